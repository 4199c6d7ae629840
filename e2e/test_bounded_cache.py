"""Bounded cache (issue 25) on the real API server: a tenant's gated pods carrying the
largest metadata the API server accepts (hundreds of KiB of labels and annotations each)
cost the operator no more memory per pod than small pods do, in a namespace no policy
governs as in one a budget governs; and a budget created after them, selecting by a label
the cache did not keep, still charges exactly the pod it covers.

Memory is the operator process's resident set (VmRSS). Parsing one large object costs
the process a few MiB at once, which it keeps for the next: so each kind of pod is
created in two batches, and only the second batch's growth per pod is compared (hostile
against small, measured in the same run)."""

import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from kubernetes import client

from harness import Cluster, Operator, create_budget, get_budget, samples, simulated, wait_for
from trainwarden.testing.builders import PodBuilder

GPU = "nvidia.com/gpu"
BATCH = 60
"""Pods per batch, half in each namespace."""
POD_BOUND = 16 * 1024
"""The stated bound of one cached pod under this test's policies (docs/security.md;
tests/test_bounded_cache.py pod_bound: 8 KiB and 256 B plus each key's length per kept
label or resource), rounded up."""
RSS_NOISE = 4 * 2**20
"""What a quiet operator's resident set moves by over a batch (its own evaluations,
metrics, the allocator's pages)."""
RELIST = 32 * 2**20
"""What listing every pod again may cost at once: a page read one pod at a time
(adapters/pages.py), a few of the largest pods parsed, the new records beside the old."""
LABELS = 4000
ANNOTATIONS = 250


def rss(operator: Operator, field: str = "VmRSS") -> int:
    """The operator process's resident set (VmHWM: its peak), in bytes."""
    status = Path(f"/proc/{operator.process.pid}/status").read_text()
    line = next(row for row in status.splitlines() if row.startswith(f"{field}:"))
    return int(line.split()[1]) * 1024


def reset_peak(operator: Operator) -> None:
    Path(f"/proc/{operator.process.pid}/clear_refs").write_text("5")  # VmHWM = VmRSS


def seen(operator: Operator) -> float:
    """Pod events the operator's informer received."""
    return sum(v for _, v in samples(operator, "trainwarden_informer_events_total", source="pods"))


def gated(name: str, tag: str, hostile: bool) -> dict[str, Any]:
    """A pod that never runs (so it costs its tenant no quota): behind a scheduling gate
    no one lifts. Hostile: 4,000 labels (250 KiB) and 250 annotations of 1 KB (the API
    server's limit is 256 KiB of annotations), each its own."""
    pod = simulated(PodBuilder(name)).labels({"cost-center": "cv", "e2e-bounded": tag})
    body = pod.build()
    body["spec"]["schedulingGates"] = [{"name": "example.com/never"}]
    if hostile:
        meta = body["metadata"]
        meta["labels"] |= {f"l{i}.example.com/{name}": f"{i}".ljust(63, "y") for i in range(LABELS)}
        meta["annotations"] = {
            f"trainwarden.dev/{name}-{i}": "z" * 1000 for i in range(ANNOTATIONS)
        }
    return body


def batch(cluster: Cluster, operator: Operator, namespaces: tuple[str, str], tag: str,
          hostile: bool, first: int) -> int:  # fmt: skip
    """Create one batch (half in each namespace) and return the operator's resident set
    once it has seen them."""
    core = client.CoreV1Api(cluster.api)
    before = seen(operator)
    kind = "hostile" if hostile else "small"

    def create(i: int) -> None:
        namespace = namespaces[i % 2]
        core.create_namespaced_pod(namespace, gated(f"{kind}-{first + i}", tag, hostile))

    def settled() -> int | None:
        """Its resident set once the informer has seen each pod (its ADDED, and maybe a
        MODIFIED from the scheduler) and nothing more for a second."""
        count = seen(operator)
        if count < before + BATCH:
            return None
        time.sleep(1)
        return rss(operator) if seen(operator) == count else None

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(create, range(BATCH)))
    found: int = wait_for(settled, timeout=120, what=f"the {kind} pods seen")
    return found


def test_hostile_pods_cost_the_operator_what_small_pods_do(
    cluster: Cluster, operator: Operator, namespace: str
) -> None:
    core = client.CoreV1Api(cluster.api)
    ungoverned = f"{namespace}-free"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=ungoverned)))
    tag = uuid.uuid4().hex[:6]
    spaces = (ungoverned, namespace)
    try:
        trainer = simulated(PodBuilder("trainer", namespace)).labels({"cost-center": "cv"})
        core.create_namespaced_pod(namespace, trainer.build())
        wait_for(
            lambda: core.read_namespaced_pod("trainer", namespace).status.phase == "Running",
            timeout=60,
            what="the trainer running on a kwok node",
        )
        figures = {"operator": (rss(operator), 0)}
        for kind, hostile in (("small", False), ("hostile", True)):
            start = rss(operator)
            warm = batch(cluster, operator, spaces, tag, hostile, 0)
            end = batch(cluster, operator, spaces, tag, hostile, BATCH)
            figures[kind] = (warm - start, end - warm)
        print(f"resident set growth per batch of {BATCH} (first, second): {figures}")
        small, hostile = figures["small"][1], figures["hostile"][1]
        assert hostile - small <= BATCH * POD_BOUND + RSS_NOISE, (
            f"a hostile pod costs {(hostile - small) / BATCH:,.0f} B more than a small one"
        )

        # A budget selecting by a label no policy read before: the pods are listed again.
        reset_peak(operator)
        before = rss(operator)
        name = f"{namespace}-cv"
        create_budget(
            cluster,
            name,
            namespace,
            1000,
            mode="DryRun",
            scope={"namespaces": [namespace], "selector": {"matchLabels": {"cost-center": "cv"}}},
            attributionLabels=["cost-center"],
        )

        def charged() -> dict[str, Any] | None:
            status = get_budget(cluster, name).get("status") or {}
            used = float((status.get("used") or {}).get("acceleratorHours", 0))
            return status if used > 0 else None

        status = wait_for(charged, timeout=60, what="the trainer charged to the new budget")
        shares = status["breakdown"]["byLabel"]["cost-center"]
        assert [s["key"] for s in shares] == ["cv"], "attributed by the label it came to read"
        assert any("listing again" in line and '"pods"' in line for line in operator.log_lines())
        peak = rss(operator, "VmHWM") - before
        print(f"listing {2 * BATCH} hostile pods again: at most {peak / 2**20:.1f} MiB more")
        assert peak <= RELIST, f"listing the pods again took {peak / 2**20:.0f} MiB at once"
    finally:
        for space in spaces:
            core.delete_collection_namespaced_pod(space, grace_period_seconds=0)
        core.delete_namespace(ungoverned)
