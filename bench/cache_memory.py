"""Benchmark: the bytes the operator's cache keeps per pod as tenants make pods large.

Run (no cluster needed):
    .venv/bin/python bench/cache_memory.py [pods]          default: 50 of each kind

For each kind of pod below it projects that many pods, each parsed from its own JSON as
the informer parses a page (adapters/informer.py), into records held the way the cache
holds them, and prints the memory those records keep per pod (tracemalloc: what is
allocated while pods are parsed and projected and still held once their bodies are
dropped), against the reference measured in the same run: a realistic training pod.
The records are projected for a budget attributing by team/project/experiment.

The same script measures an older checkout, whose projection read the whole pod:
    PYTHONPATH=<checkout>/operator .venv/bin/python bench/cache_memory.py
"""

import inspect
import json
import sys
import tracemalloc
from collections.abc import Callable
from typing import Any

from trainwarden.core.pods import facts

JSON = dict[str, Any]
GPU = "nvidia.com/gpu"


def reference(i: int) -> JSON:
    """A realistic pod of a training Job, as the API returns it."""
    return {
        "metadata": {
            "uid": f"uid-{i:06d}",
            "name": f"train-{i}-abcde",
            "namespace": "team-a",
            "resourceVersion": str(1000 + i),
            "labels": {
                "team": "vision",
                "project": "vit",
                "experiment": f"e{i}",
                "job-name": f"train-{i}",
                "batch.kubernetes.io/controller-uid": f"{i:036d}",
            },
            "ownerReferences": [
                {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "name": f"train-{i}",
                    "uid": f"{i:036d}",
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": {
            "nodeName": f"gpu-{i % 250}",
            "containers": [
                {
                    "name": "trainer",
                    "resources": {
                        "requests": {"cpu": "8", "memory": "64Gi", GPU: "8"},
                        "limits": {GPU: "8"},
                    },
                }
            ],
        },
        "status": {"phase": "Running", "startTime": "2026-12-01T12:00:00Z"},
    }


def annotated(i: int) -> JSON:
    """The review's first probe: 250 trainwarden annotations of 1 KB."""
    pod = reference(i)
    pod["metadata"]["annotations"] = {f"trainwarden.dev/n{n}": "z" * 1000 for n in range(250)}
    return pod


def labelled(i: int) -> JSON:
    """The review's second probe: 10,000 labels (each pod's its own, as tenants write
    them: the cache interns keys and values, so labels shared by pods cost less)."""
    pod = reference(i)
    own = {f"l{n}.example.com/k{i}": f"{i}-{n}".ljust(63, "y") for n in range(10_000)}
    pod["metadata"]["labels"].update(own)
    return pod


def owned(i: int) -> JSON:
    """50 owner references, the controller's strings 64 KiB each."""
    pod = reference(i)
    big = {
        "apiVersion": "a" * 65536,
        "kind": "K" * 65536,
        "name": "n" * 65536,
        "uid": f"{i}" + "u" * 65536,
        "controller": True,
    }
    pod["metadata"]["ownerReferences"] = [big] + [{**big, "controller": False}] * 49
    return pod


def containers(i: int) -> JSON:
    """200 containers asking for 60 resource names each."""
    pod = reference(i)
    requests = {f"vendor{n}.example.com/r": "1" for n in range(60)} | {GPU: "1"}
    pod["spec"]["containers"] = [
        {"name": f"c{n}", "resources": {"requests": requests}} for n in range(200)
    ]
    return pod


KINDS: dict[str, Callable[[int], JSON]] = {
    "reference (a training Job's pod)": reference,
    "250 annotations of 1 KB": annotated,
    "10,000 labels": labelled,
    "50 owners of 64 KiB strings": owned,
    "200 containers x 60 resources": containers,
}


def projection() -> Callable[[JSON], object]:
    """This checkout's `facts`, for a budget attributing by team/project/experiment."""
    if len(inspect.signature(facts).parameters) == 1:  # an older checkout: the whole pod
        return facts  # type: ignore[return-value]
    from trainwarden.core.keep import Keep
    from trainwarden.core.reads import keep

    kept = keep([]) | Keep(pod_labels=frozenset({"team", "project", "experiment"}))
    return lambda pod: facts(pod, kept)  # type: ignore[call-arg]


def kept_per_pod(
    kind: Callable[[int], JSON], count: int, project: Callable[[JSON], object]
) -> float:
    texts = [json.dumps(kind(i)) for i in range(count)]
    records: dict[int, object] = {}
    tracemalloc.start()
    for i, text in enumerate(texts):
        records[i] = project(json.loads(text))  # the body is dropped, as the informer does
    kept, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return kept / count


def main(count: int) -> None:
    project = projection()
    base = kept_per_pod(reference, count, project)
    print(f"{count} pods of each kind; bytes the cache keeps per pod")
    for name, kind in KINDS.items():
        found = base if kind is reference else kept_per_pod(kind, count, project)
        print(f"  {name:<34} {found:>12,.0f} B  x{found / base:8.1f} of the reference")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 50)
