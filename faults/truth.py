"""Ground truth for budgets: what pods really held, from their own timestamps.

The API server records a pod's startTime and its containers' finishedAt (1 s
resolution); a running pod holds its requests until the moment the truth is taken. This
is the reference the operator's `status.used` is compared with; a pod that no longer
exists can only be judged from what the suite itself saw of it (`seen_gone`).
"""

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from faults import kit
from faults.kit import harness

GPU = harness.GPU


parse = kit.parse_time


def start_of(pod: Mapping[str, Any]) -> datetime:
    start = parse((pod.get("status") or {}).get("startTime"))
    assert start is not None, "a running pod has a startTime"
    return start


def gpus(pod: Mapping[str, Any]) -> float:
    total = 0.0
    for container in pod["spec"]["containers"]:
        resources = container.get("resources") or {}
        amount = (resources.get("requests") or resources.get("limits") or {}).get(GPU)
        total += float(amount or 0)
    return total


def end_of(pod: Mapping[str, Any]) -> datetime | None:
    """A terminal pod's last container finish, None while it runs."""
    status = pod.get("status") or {}
    if status.get("phase") not in ("Succeeded", "Failed"):
        return None
    finished = [
        parse(((cs.get("state") or {}).get("terminated") or {}).get("finishedAt"))
        for cs in status.get("containerStatuses") or []
    ]
    known = [t for t in finished if t is not None]
    return max(known) if known else None


@dataclass(frozen=True)
class Held:
    """One pod's accelerator-seconds at a moment."""

    uid: str
    seconds: float


def held(pod: Mapping[str, Any], at: datetime) -> Held:
    start = parse((pod.get("status") or {}).get("startTime"))
    uid = str(pod["metadata"]["uid"])
    if start is None or start > at:
        return Held(uid, 0.0)
    end = min(end_of(pod) or at, at)
    return Held(uid, gpus(pod) * max(0.0, (end - start).total_seconds()))


def existing(cluster: harness.Cluster, namespaces: Iterable[str]) -> list[dict[str, Any]]:
    return [pod for namespace in namespaces for pod in kit.list_pods(cluster, namespace)]


def accelerator_seconds(pods: Iterable[Mapping[str, Any]], at: datetime) -> float:
    return sum(held(p, at).seconds for p in pods)
