"""Benchmark: one budget evaluation's pure work, and the operator's memory per indexed pod.

Run: .venv/bin/python bench/budget_evaluation.py [pods ...]
Prints, per pod count, the time of the pure part of an evaluation (scope matching,
ledger advance, accounting with breakdowns, forecast) and the memory the pod index holds.
The API calls of an evaluation (one conditional status patch, one labelled list per
suspendable kind) do not grow with the number of pods.
"""

import statistics
import sys
import time
import tracemalloc
from datetime import UTC, datetime, timedelta

from trainwarden.api.v1alpha1.types import Scope
from trainwarden.core.accounting import account
from trainwarden.core.budgets import Limits, crossing_time, percent_used
from trainwarden.core.ledger import Ledger, advance, charged
from trainwarden.core.pods import facts
from trainwarden.core.scope import in_scope

NOW = datetime(2026, 12, 2, 12, tzinfo=UTC)
GPU = "nvidia.com/gpu"


def pod(i: int) -> dict[str, object]:
    """A realistic pod object as the API returns it (the index keeps only its facts)."""
    return {
        "metadata": {
            "uid": f"uid-{i:06d}",
            "name": f"train-{i}-abcde",
            "namespace": f"team-{i % 20}",
            "labels": {
                "team": f"team-{i % 20}",
                "project": f"p{i % 7}",
                "experiment": f"e{i}",
                "job-name": f"train-{i}",
                "batch.kubernetes.io/controller-uid": "x" * 36,
            },
            "ownerReferences": [
                {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "name": f"train-{i}",
                    "uid": f"job-{i}",
                    "controller": True,
                }
            ],
        },
        "spec": {
            "nodeName": f"gpu-{i % 250}",
            "priority": i % 3,
            "containers": [
                {
                    "name": "trainer",
                    "resources": {
                        "requests": {"cpu": "8", "memory": "64Gi", GPU: "8"},
                        "limits": {GPU: "8"},
                    },
                }
            ],
            "initContainers": [{"name": "fetch", "resources": {"requests": {"cpu": "1"}}}],
        },
        "status": {
            "phase": "Running" if i % 10 else "Succeeded",
            "startTime": (NOW - timedelta(minutes=i % 600)).isoformat(),
            "containerStatuses": []
            if i % 10
            else [
                {"state": {"terminated": {"finishedAt": (NOW - timedelta(minutes=1)).isoformat()}}}
            ],
        },
    }


def run(n: int) -> None:
    raw = [pod(i) for i in range(n)]
    tracemalloc.start()
    index = [facts(p) for p in raw]
    index_bytes, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    scope = Scope(namespaces=[f"team-{t}" for t in range(10)])
    limits = Limits(accelerator_hours=100_000, cost=1e6)
    timings = []
    for _ in range(5):
        started = time.perf_counter()
        live = {
            f.snapshot.uid: f.snapshot
            for f in index
            if in_scope(scope, f.snapshot.namespace, {}, f.snapshot.labels)
        }
        ledger = advance(
            Ledger(),
            live,
            {},
            now=NOW,
            window_start=NOW - timedelta(days=1),
            label_keys=["team", "project", "experiment"],
        )
        acct = account(
            charged(ledger, live),
            NOW - timedelta(days=1),
            NOW,
            accelerators=[GPU],
            attribution_labels=["team", "project", "experiment"],
        )
        percent_used(acct.total, limits)
        crossing_time(acct.total, acct.burn_rate, limits, 100, NOW)
        timings.append(time.perf_counter() - started)
    print(
        f"{n:>6} pods ({len(live):>6} in scope): evaluation median "
        f"{statistics.median(timings) * 1000:8.1f} ms, worst {max(timings) * 1000:8.1f} ms; "
        f"pod index {index_bytes / n:7.0f} bytes/pod ({index_bytes / 2**20:6.1f} MiB)"
    )


if __name__ == "__main__":
    for count in [int(a) for a in sys.argv[1:]] or [100, 2000, 20000]:
        run(count)
