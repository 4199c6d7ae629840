"""The naive janitor: what kube-janitor-style tools do, the first reference for trainwarden.

Every `--interval` seconds it lists every pod in the cluster (one unpaginated LIST, as
kube-janitor does for each resource type it cleans) and every TrainingBudget, computes each
budget's accelerator-hours from the pods it sees (start time to now, or to the end of a
finished pod; pods already deleted are forgotten - the naive part), and suspends the Jobs of
the budgets it enforces once they are over their limit. It enforces only budgets labelled
bench.trainwarden.dev/janitor=enforce, which the operator runs in DryRun, so the two never
act on the same Job. Like `requests`, it asks for gzip. One JSON line on stdout per pass.

    python -m scale.janitor --kubeconfig FILE [--interval 30]
"""

from __future__ import annotations

import argparse
import json
import time
from datetime import UTC, datetime
from pathlib import Path

from scale.kube import BUDGETS, JOBS, PODS, Kube, Obj

ENFORCE = "bench.trainwarden.dev/janitor"


def gpus(pod: Obj) -> float:
    resources = [c.get("resources", {}) for c in pod["spec"]["containers"]]
    return sum(
        float((r.get("requests") or r.get("limits") or {}).get("nvidia.com/gpu", 0))
        for r in resources
    )


def hours(pod: Obj, now: datetime) -> float:
    status = pod.get("status", {})
    if "startTime" not in status:
        return 0.0
    end = now
    if status.get("phase") in ("Succeeded", "Failed"):
        ends = [
            c["state"]["terminated"]["finishedAt"]
            for c in status.get("containerStatuses", [])
            if "terminated" in c.get("state", {})
        ]
        end = datetime.fromisoformat(max(ends)) if ends else now
    return max(0.0, (end - datetime.fromisoformat(status["startTime"])).total_seconds()) / 3600


def in_scope(pod: Obj, scope: Obj) -> bool:
    labels = pod["metadata"].get("labels") or {}
    wanted = (scope.get("selector") or {}).get("matchLabels") or {}
    return pod["metadata"]["namespace"] in scope.get("namespaces", []) and all(
        labels.get(k) == v for k, v in wanted.items()
    )


def one_pass(kube: Kube, suspended: set[str]) -> Obj:
    pods = kube.list(PODS)["items"]
    budgets = kube.list(BUDGETS)["items"]
    now, decisions = datetime.now(UTC), []
    for budget in budgets:
        mine = [p for p in pods if in_scope(p, budget["spec"]["scope"])]
        used = sum(gpus(p) * hours(p, now) for p in mine)
        limit = budget["spec"]["limits"].get("acceleratorHours")
        enforce = (budget["metadata"].get("labels") or {}).get(ENFORCE) == "enforce"
        if not enforce or limit is None or used < limit:
            continue
        for pod in mine:
            for ref in pod["metadata"].get("ownerReferences", []):
                job = f"{pod['metadata']['namespace']}/{ref['name']}"
                if ref["kind"] == "Job" and job not in suspended:
                    namespace, name = job.split("/")
                    kube.patch(JOBS, name, {"spec": {"suspend": True}}, namespace)
                    suspended.add(job)
                    decisions.append({"job": job, "at": time.time(), "used": used})
    return {"pods": len(pods), "budgets": len(budgets), "suspended": decisions}


def main() -> None:
    parser = argparse.ArgumentParser(description="the naive janitor")
    parser.add_argument("--kubeconfig", type=Path, required=True)
    parser.add_argument("--interval", type=float, default=30)
    args = parser.parse_args()
    kube, suspended = Kube(args.kubeconfig, pool=4), set[str]()
    while True:
        started = time.time()
        try:
            result = one_pass(kube, suspended)
        except Exception as error:
            result = {"error": str(error)[:300]}
        print(json.dumps({"started": started, "done": time.time(), **result}), flush=True)
        time.sleep(max(0.0, args.interval - (time.time() - started)))


if __name__ == "__main__":
    main()
