"""The physical limit: a bare watch client of every pod, the second reference for trainwarden.

It does what any controller must do at least - one LIST of every pod, then one WATCH from
that list's resourceVersion - and nothing else: no decisions, no writes, no models (raw
JSON). It reports how long the initial list took, and writes one line per event of the
churn pods (label bench.trainwarden.dev/churn) with the time it saw it, so the benchmark
can time "created -> seen" and "deleted -> seen" against the churn generator's log.

    python -m scale.watcher --kubeconfig FILE --events FILE
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from scale.kube import PODS, Kube, KubeError

CHURN = "bench.trainwarden.dev/churn"


def main() -> None:
    parser = argparse.ArgumentParser(description="a bare watch client of every pod")
    parser.add_argument("--kubeconfig", type=Path, required=True)
    parser.add_argument("--events", type=Path, required=True)
    args = parser.parse_args()
    kube = Kube(args.kubeconfig, pool=2)
    with args.events.open("a", buffering=1) as sink:
        while True:
            started = time.time()
            listed = kube.list(PODS)
            print(
                json.dumps(
                    {"listed": len(listed["items"]), "started": started, "done": time.time()}
                ),
                flush=True,
            )
            version = listed["metadata"]["resourceVersion"]
            del listed
            try:
                while True:
                    for kind, obj in kube.watch(PODS, resource_version=version):
                        if kind == "ERROR":
                            raise KubeError(int(obj.get("code", 500)), "WATCH", "pods", b"")
                        version = obj["metadata"]["resourceVersion"]
                        meta = obj["metadata"]
                        if kind != "BOOKMARK" and CHURN in (meta.get("labels") or {}):
                            line = {
                                "t": time.time(),
                                "type": kind,
                                "pod": f"{meta['namespace']}/{meta['name']}",
                                "phase": obj.get("status", {}).get("phase"),
                            }
                            sink.write(json.dumps(line) + "\n")
            except Exception as error:
                print(json.dumps({"relist": str(error)[:200], "at": time.time()}), flush=True)
                time.sleep(1)


if __name__ == "__main__":
    main()
