"""Benchmark: one budget evaluation's pure work, and the operator's memory per indexed pod.

Run: .venv/bin/python bench/budget_evaluation.py [pods ...]
Prints, per pod count, the time of the pure part of an evaluation: scope matching, the
usage (budget/ledger accrue: ledger, tally with breakdowns, forecast), and, measured in the same
run, the same plus efficiency (budget/meters: one step of points integrated for every pod,
and the view against usage), with their ratio; and the memory the pod index and the
efficiency meters hold per pod. The API calls of an evaluation do not grow with pods.
"""

import statistics
import sys
import time
import tracemalloc
from datetime import UTC, datetime, timedelta

from trainwarden.api.v1alpha1.types import Scope
from trainwarden.budget.ledger import Ledger, Period, accrue
from trainwarden.budget.meters import Meters, advance, view
from trainwarden.core.accounting import Charge, PriceTable, charge
from trainwarden.core.budgets import Limits, crossing_time, percent_used
from trainwarden.core.efficiency import Point
from trainwarden.core.keep import Keep
from trainwarden.core.pods import facts
from trainwarden.core.reads import keep
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


KEYS = ("team", "project", "experiment")
STEP = 60.0


def usage(index: list, scope: Scope, limits: Limits) -> tuple[list[Charge], object]:
    """Scope, charges and the usage of one evaluation (what every budget does)."""
    live = [
        c
        for f in index
        if in_scope(scope, f.snapshot.namespace, {}, f.snapshot.labels)
        and (c := charge(f.snapshot, {}, accelerators=[GPU], prices=PriceTable(), label_keys=KEYS))
    ]
    now = NOW.timestamp()
    period = Period(now - 86400, None)
    acct = accrue(
        Ledger(), period=period, previous=period, live=live, gone=[], now=now, label_keys=KEYS
    )
    percent_used(acct.usage.total, limits)
    crossing_time(acct.usage.total, acct.burn, limits, 100, NOW)
    return live, acct


def measure(live: list[Charge], meters: Meters, names: dict) -> Meters:
    """One measurement step for every pod (once per resolution, not per evaluation)."""
    now = NOW.timestamp()
    points = {names[c.uid]: [Point(now, 6.0, 8)] for c in live}
    by_name = {names[c.uid]: c for c in live}
    return advance(meters, points, by_name, step=STEP, lo=now - 86400, hi=now, width=None)


def shown(live: list[Charge], acct: object, meters: Meters) -> None:
    """The efficiency status of one evaluation: the meters against the usage."""
    usage = acct.usage  # type: ignore[attr-defined]
    view(meters, live, usage, KEYS, lo=NOW.timestamp() - 86400, width=None)


def run(n: int) -> None:
    raw = [pod(i) for i in range(n)]
    tracemalloc.start()
    kept = keep([]) | Keep(pod_labels=frozenset(KEYS))  # budgets attributing by KEYS
    index = [facts(p, kept) for p in raw]
    index_bytes, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    names = {f.snapshot.uid: (f.snapshot.namespace, f.snapshot.name) for f in index}
    scope = Scope(namespaces=[f"team-{t}" for t in range(10)])
    limits = Limits(accelerator_hours=100_000, cost=1e6)
    plain, viewed, stepped = [], [], []
    live, acct = usage(index, scope, limits)
    meters = Meters(period_start=NOW.timestamp() - 86400, until=NOW.timestamp() - STEP)
    tracemalloc.start()
    meters = measure(live, meters, names)
    meter_bytes, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    for _ in range(5):  # interleaved, so a noisy neighbour slows all alike
        started = time.perf_counter()
        live, acct = usage(index, scope, limits)
        plain.append(time.perf_counter() - started)
        started = time.perf_counter()
        shown(live, acct, meters)
        viewed.append(time.perf_counter() - started)
        started = time.perf_counter()
        measure(live, Meters(period_start=meters.period_start, until=meters.until), names)
        stepped.append(time.perf_counter() - started)
    a, b, c = (statistics.median(t) * 1000 for t in (plain, viewed, stepped))
    print(
        f"{n:>6} pods ({len(live):>6} in scope): usage {a:6.1f} ms; efficiency view"
        f" {b:6.1f} ms (x{b / a:.2f} of usage), per evaluation; measurement step {c:6.1f} ms"
        f" (x{c / a:.2f}), once per resolution; pod index {index_bytes / n:5.0f} B/pod,"
        f" meters {meter_bytes / max(1, len(live)):4.0f} B/pod in scope"
    )


if __name__ == "__main__":
    for count in [int(a) for a in sys.argv[1:]] or [100, 2000, 20000]:
        run(count)
