"""The churn generator: short training pods created at a fixed rate, run, finish, deleted.

Each pod requests one GPU, lands on a benchmark kwok node (spec.nodeName, round robin), and
carries the kwok stage annotation that completes it `--lifetime` seconds after it started
(every tenth fails instead, for the budgets' outcome breakdown); once the generator's own
watch sees it Succeeded or Failed, it deletes it. Creations follow a fixed schedule (i/rate
after the start); if the API server falls behind, the lag is reported, not hidden.

    python -m scale.churn --kubeconfig FILE --rate 10 --seconds 180 --phase c10 \
        --namespaces bench-w-000,bench-w-001 --nodes bench-gpu- --node-count 1000 --log FILE

Writes one JSON line per create and per delete to --log (the time each request was sent),
and a summary JSON line on stdout at the end.
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from scale.kube import PODS, Kube, Obj, Watcher, key_of

BENCH = "bench.trainwarden.dev/scale"
CHURN = "bench.trainwarden.dev/churn"
COMPLETE = "sim.trainwarden.dev/complete-after"
FAIL = "sim.trainwarden.dev/fail-after"


def pod(i: int, args: argparse.Namespace, namespaces: list[str]) -> tuple[str, Obj]:
    namespace = namespaces[i % len(namespaces)]
    ending = FAIL if i % 10 == 9 else COMPLETE
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"churn-{args.phase}-{i:06d}",
            "labels": {
                BENCH: "true",
                CHURN: args.phase,
                "team": namespace,
                "project": f"sweep-{i % 5}",
                "experiment": f"trial-{i % 20}",
            },
            "annotations": {ending: f"{args.lifetime}s"},
        },
        "spec": {
            "nodeName": f"{args.nodes}{i % args.node_count:04d}",
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 0,
            "containers": [
                {
                    "name": "trainer",
                    "image": "example.invalid/trainer:1",
                    "resources": {
                        "requests": {"cpu": "1", "memory": "4Gi", "nvidia.com/gpu": "1"},
                        "limits": {"nvidia.com/gpu": "1"},
                    },
                }
            ],
        },
    }
    return namespace, body


class Churn:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.kube = Kube(args.kubeconfig, pool=24)
        self.namespaces: list[str] = args.namespaces.split(",")
        self.lock = threading.Lock()
        self.log = args.log.open("a", buffering=1)
        self.created: set[str] = set()
        self.deleting: set[str] = set()
        self.gone: set[str] = set()
        self.ran: set[str] = set()
        self.finished: set[str] = set()
        self.errors = 0
        self.lags: list[float] = []
        self.deleter = ThreadPoolExecutor(8)

    def record(self, **line: Any) -> None:
        with self.lock:
            self.log.write(json.dumps(line) + "\n")

    def create(self, i: int, scheduled: float) -> None:
        namespace, body = pod(i, self.args, self.namespaces)
        key = f"{namespace}/{body['metadata']['name']}"
        sent = time.time()
        try:
            self.kube.create(PODS, body, namespace)
        except Exception:
            with self.lock:
                self.errors += 1
            return
        with self.lock:
            self.created.add(key)
            self.lags.append(sent - scheduled)
        self.record(pod=key, created=sent)

    def delete(self, key: str) -> None:
        namespace, name = key.split("/")
        sent = time.time()
        try:
            self.kube.delete(PODS, name, namespace, gracePeriodSeconds=0)
        except Exception:
            with self.lock:
                self.deleting.discard(key)
            return
        self.record(pod=key, deleted=sent)

    def on_event(self, kind: str, obj: Obj, _seen: float) -> None:
        key = key_of(obj)
        if kind == "DELETED":
            with self.lock:
                self.gone.add(key)
            return
        phase = obj.get("status", {}).get("phase")
        finished = phase in ("Succeeded", "Failed")
        with self.lock:
            if phase == "Running" or finished:
                self.ran.add(key)
            if finished:
                self.finished.add(key)
            if not finished or obj["metadata"].get("deletionTimestamp") or key in self.deleting:
                return
            self.deleting.add(key)
        self.deleter.submit(self.delete, key)

    def sweep(self) -> None:
        """Delete what did not finish in time (after the summary: it may take a while)."""
        with self.lock:
            left = self.created - self.gone
        with ThreadPoolExecutor(16) as pool:
            list(pool.map(self.delete, left))
        self.deleter.shutdown()

    def run(self) -> Obj:
        args = self.args
        watch = Watcher(self.kube, PODS, self.on_event, labelSelector=f"{CHURN}={args.phase}")
        watch.start()
        watch.synced.wait(60)
        total = int(args.rate * args.seconds)
        start = time.time()
        with ThreadPoolExecutor(16) as creators:
            for i in range(total):
                scheduled = start + i / args.rate
                time.sleep(max(0.0, scheduled - time.time()))
                creators.submit(self.create, i, scheduled)
        created_by = time.time()
        deadline = created_by + args.lifetime + 120
        while time.time() < deadline:
            with self.lock:
                left = self.created - self.gone
            if not left:
                break
            time.sleep(1)
        with self.lock:
            left = self.created - self.gone
            ran, finished = len(self.ran), len(self.finished)
        watch.stop()
        lags = sorted(self.lags) or [0.0]
        return {
            "created": len(self.created),
            "create_errors": self.errors,
            "ran": ran,
            "finished": finished,
            "deleted": len(self.gone),
            "left_running": len(left),
            "rate_requested": args.rate,
            "rate_achieved": len(self.created) / max(1e-9, created_by - start),
            "lag_p50": lags[len(lags) // 2],
            "lag_max": lags[-1],
            "started": start,
            "creations_done": created_by,
        }


def main() -> None:
    parser = argparse.ArgumentParser(description="the churn generator")
    parser.add_argument("--kubeconfig", type=Path, required=True)
    parser.add_argument("--rate", type=float, required=True)
    parser.add_argument("--seconds", type=float, required=True)
    parser.add_argument("--phase", required=True)
    parser.add_argument("--namespaces", required=True)
    parser.add_argument("--nodes", required=True, help="node name prefix")
    parser.add_argument("--node-count", type=int, required=True)
    parser.add_argument("--lifetime", type=int, default=30)
    parser.add_argument("--log", type=Path, required=True)
    churn = Churn(parser.parse_args())
    summary = churn.run()
    print(json.dumps(summary), flush=True)
    churn.sweep()


if __name__ == "__main__":
    main()
