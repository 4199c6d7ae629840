"""Removing everything the benchmark created: it all carries bench.trainwarden.dev/scale."""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial

from scale.cluster import BENCH_LABEL, Env
from scale.kube import (
    BUDGETS,
    CHECKPOINT_POLICIES,
    CLUSTER_ROLE_BINDINGS,
    FLOW_SCHEMAS,
    IDLE_POLICIES,
    JOBS,
    NAMESPACES,
    NODES,
    PODS,
    Kube,
    KubeError,
    Resource,
)
from scale.params import Params
from scale.progress import Progress, parallel, wait_until


def forget_utilization(env: Env) -> int:
    """Drop every series the benchmark published (namespaces bench-*)."""
    with urllib.request.urlopen(f"{env.dcgm_url}/gpus", timeout=30) as response:
        pods = json.load(response)["pods"]
    mine = [f"{p['namespace']}/{p['pod']}" for p in pods if p["namespace"].startswith("bench-")]

    def forget(key: str) -> None:
        request = urllib.request.Request(f"{env.dcgm_url}/gpus/{key}", method="DELETE")
        urllib.request.urlopen(request, timeout=30).close()

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(forget, mine))
    return len(mine)


def leftovers(admin: Kube) -> dict[str, int]:
    found = {}
    for res in (NODES, NAMESPACES, BUDGETS, IDLE_POLICIES, CHECKPOINT_POLICIES, FLOW_SCHEMAS):
        try:
            count = len(admin.list(res, labelSelector=BENCH_LABEL, limit=500)["items"])
        except KubeError:
            count = 0
        if count:
            found[res.plural] = count
    return found


def cleanup(env: Env, admin: Kube, params: Params) -> bool:
    """Delete everything labelled as the benchmark's, kwok nodes last, and wait for it.

    Never raises: what fails is printed, and False returned (run --cleanup-only again).
    """
    progress = Progress("cleanup")
    selector = {"labelSelector": BENCH_LABEL}
    failures: list[str] = []

    def step(what: str, call: Callable[[], object]) -> None:
        try:
            call()
        except Exception as error:  # one failed step must not stop the others
            failures.append(f"{what}: {error!r}"[:300])

    for res in (BUDGETS, IDLE_POLICIES, CHECKPOINT_POLICIES, FLOW_SCHEMAS, CLUSTER_ROLE_BINDINGS):
        step(f"delete {res.plural}", partial(admin.delete_collection, res, **selector))
    # Jobs, then every pod one by one (grace 0), in parallel: a DELETE of a whole collection
    # is served serially and times out after 60 s under load, and the namespace controller
    # deletes at kube-controller-manager's 20 requests/s.
    jobs = _names(admin, JOBS, step)
    step(
        "delete Jobs",
        lambda: parallel(
            (partial(admin.delete, JOBS, n, ns, propagationPolicy="Background") for ns, n in jobs),
            progress,
            "jobs deleted",
            len(jobs),
        ),
    )
    pods = _names(admin, PODS, step)
    step(
        "delete pods",
        lambda: parallel(
            (partial(admin.delete, PODS, n, ns, gracePeriodSeconds=0) for ns, n in pods),
            progress,
            "pods deleted",
            len(pods),
        ),
    )
    namespaces = [n for _, n in _names(admin, NAMESPACES, step)]
    step(
        "delete namespaces",
        lambda: parallel(
            (partial(admin.delete, NAMESPACES, n) for n in namespaces),
            progress,
            "namespaces deleted",
            len(namespaces),
        ),
    )

    def gone(res: Resource) -> bool:
        left = len(admin.list(res, limit=1000, **selector)["items"])
        progress.set(f"{res.plural} left", str(left))
        return left == 0

    deadline = time.monotonic() + params.cleanup_timeout
    step(
        "wait for the namespaces",
        lambda: wait_until(
            "namespaces gone", partial(gone, NAMESPACES), deadline, progress, every=3
        ),
    )
    step("delete nodes", partial(admin.delete_collection, NODES, **selector))
    step(
        "wait for the nodes",
        lambda: wait_until("nodes gone", partial(gone, NODES), time.monotonic() + 120, progress),
    )
    step(
        "drop utilization",
        lambda: progress.set("utilization series dropped", str(forget_utilization(env))),
    )
    progress.done()
    for failure in failures:
        print(f"cleanup: {failure}", flush=True)
    if failures:
        print("cleanup incomplete: run `bench/scale.py --cleanup-only` again", flush=True)
    return not failures


def _names(
    admin: Kube, res: Resource, step: Callable[[str, Callable[[], object]], None]
) -> list[tuple[str, str]]:
    """(namespace, name) of every benchmark object of a kind, listed in pages."""
    found: list[tuple[str, str]] = []

    def collect() -> None:
        for item in admin.list_all(res, labelSelector=BENCH_LABEL):
            meta = item["metadata"]
            found.append((meta.get("namespace", ""), meta["name"]))

    step(f"list {res.plural}", collect)
    return found
