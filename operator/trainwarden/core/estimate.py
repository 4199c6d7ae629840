"""What a workload will cost before it starts: its pods' requests times how long it says
it will run.

The same arithmetic serves `trainwarden estimate -f job.yaml`, the message a held
workload gets, and Kueue's AdmissionCheck. Manifests are tenant-written mappings: every
field is read defensively (a count that is not a small non-negative integer counts as
its default), and an unreadable duration is reported, never taken as zero.
"""

import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from itertools import islice
from typing import Any

from trainwarden.api.v1alpha1.names import EXPECTED_DURATION
from trainwarden.api.v1alpha1.types import MAX_DURATION, parse_duration
from trainwarden.core.accounting import CPU, GIB, HOUR, MEMORY, PriceTable, Usage
from trainwarden.core.durations import human
from trainwarden.core.pods import effective_requests
from trainwarden.core.shapes import mapping, strings

KUEUE_MAX_EXEC = "kueue.x-k8s.io/max-exec-time-seconds"
"""Kueue's label for a Job's maximum execution time, in seconds."""
MAX_PODS = 100_000
"""More pods than any one workload runs: a larger count is a typo or an attack."""
MAX_TEMPLATES = 32
"""Pod templates a manifest's cost is read from (JobSet replicatedJobs, Kubeflow roles,
Ray worker groups): more than any real workload has (Kueue admits at most 8 pod sets)."""
MAX_CONTAINERS = 256
"""Containers (init containers included) over all of a manifest's pod templates."""
MAX_ENTRIES = 4096
"""Labels, annotations, owner references, node selectors and resource quantities that
reading a manifest's cost would walk."""
_KUBEFLOW_SPECS = (
    "pytorchReplicaSpecs",
    "tfReplicaSpecs",
    "mpiReplicaSpecs",
    "xgbReplicaSpecs",
    "paddleReplicaSpecs",
    "jaxReplicaSpecs",
)


@dataclass(frozen=True)
class PodGroup:
    """Pods of one template that run at once."""

    name: str
    count: int
    requests: Mapping[str, float]
    node_selector: Mapping[str, str]
    labels: Mapping[str, str]
    """The pods' labels: what a budget's selector is matched against."""


@dataclass(frozen=True)
class Demand:
    """A workload's pods and its declared run time (None: it declares none)."""

    kind: str
    groups: tuple[PodGroup, ...]
    duration: timedelta | None = None
    duration_source: str = ""
    problem: str | None = None
    """Why the declared duration was not used, if it was unreadable."""

    @property
    def pods(self) -> int:
        return sum(g.count for g in self.groups)


@dataclass(frozen=True)
class Estimate:
    """What one hour of the workload costs, and its whole declared run if it has one."""

    hourly: Usage
    total: Usage | None
    highest_rate: bool = False
    """A rate was taken as the highest of several: the pods do not select a node model."""


def _count(value: object, default: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_PODS:
        return default
    return value


def _group(name: str, count: int, template: object) -> PodGroup:
    spec = mapping(mapping(template).get("spec"))
    labels = strings(mapping(mapping(template).get("metadata")).get("labels"))
    return PodGroup(
        name, count, effective_requests(spec), strings(spec.get("nodeSelector")), labels
    )


def _job_pods(spec: Mapping[str, Any]) -> int:
    """Pods a Job runs at once: its parallelism, never more than its completions."""
    parallelism = _count(spec.get("parallelism"))
    completions = spec.get("completions")
    return min(parallelism, _count(completions)) if completions is not None else parallelism


def _each(value: object) -> Iterator[Mapping[str, Any]]:
    """The mappings in a list, lazily (a count can stop early)."""
    return (v for v in value if isinstance(v, Mapping)) if isinstance(value, list) else iter(())


def _templates(
    kind: str, meta: Mapping[str, Any], spec: Mapping[str, Any]
) -> Iterator[tuple[str, int, object]]:
    """Each pod template of a manifest: its name, how many of its pods run at once, and
    the template. Lazy: `too_costly` stops past MAX_TEMPLATES."""
    if kind == "Pod":
        yield "pod", 1, {"metadata": meta, "spec": spec}
    elif kind == "Job":
        yield "job", _job_pods(spec), spec.get("template")
    elif kind == "JobSet":
        for rj in _each(spec.get("replicatedJobs")):
            job = mapping(mapping(rj.get("template")).get("spec"))
            yield (
                str(rj.get("name", "")),
                _count(rj.get("replicas")) * _job_pods(job),
                job.get("template"),
            )
    elif kind == "RayJob":
        cluster = mapping(spec.get("rayClusterSpec"))
        yield "head", 1, mapping(cluster.get("headGroupSpec")).get("template")
        for worker in _each(cluster.get("workerGroupSpecs")):
            count = _count(worker.get("replicas", worker.get("minReplicas")))
            count *= _count(worker.get("numOfHosts"))
            yield str(worker.get("groupName", "")), count, worker.get("template")
    elif kind == "Workload":  # Kueue's: the pod sets it admits
        for ps in _each(spec.get("podSets")):
            yield str(ps.get("name", "")), _count(ps.get("count")), ps.get("template")
    else:
        field = next((f for f in _KUBEFLOW_SPECS if f in spec), None)
        for role, replica in mapping(spec.get(field)).items() if field else ():
            yield role, _count(mapping(replica).get("replicas")), mapping(replica).get("template")


def _size(value: object) -> int:
    return len(value) if isinstance(value, list | Mapping) else 0


def too_costly(manifest: Mapping[str, Any]) -> str | None:
    """Why reading this manifest's cost would walk more than any real workload needs (a
    tenant's 2.6 MiB JobSet of 9,000 templates took 0.3 s to read twice), or None. It
    counts sizes and stops at a limit: `demand` of a manifest it passes is cheap."""
    kind = str(manifest.get("kind") or "")
    meta, spec = mapping(manifest.get("metadata")), mapping(manifest.get("spec"))
    templates = list(islice(_templates(kind, meta, spec), MAX_TEMPLATES + 1))
    if len(templates) > MAX_TEMPLATES:
        return f"more than {MAX_TEMPLATES} pod templates"
    containers = 0
    entries = sum(_size(meta.get(k)) for k in ("labels", "annotations", "ownerReferences"))
    for _, _, template in templates:
        pod = mapping(mapping(template).get("spec"))
        listed = (pod.get("containers"), pod.get("initContainers"))
        containers += sum(_size(c) for c in listed)
        if containers > MAX_CONTAINERS:
            return f"more than {MAX_CONTAINERS} containers"
        entries += _size(mapping(mapping(template).get("metadata")).get("labels"))
        entries += _size(pod.get("nodeSelector")) + _size(pod.get("overhead"))
        for container in (c for items in listed for c in _each(items)):
            resources = mapping(container.get("resources"))
            entries += _size(resources.get("requests")) + _size(resources.get("limits"))
    if entries > MAX_ENTRIES:
        return f"more than {MAX_ENTRIES} labels, annotations and resource quantities"
    return None


def _seconds(value: object, source: str) -> tuple[timedelta | None, str | None]:
    try:
        seconds = int(str(value))
    except ValueError:
        return None, f"{source}={str(value)[:40]!r} is not a number of seconds"
    if not 0 < seconds <= MAX_DURATION.total_seconds():
        return None, f"{source}={seconds} is out of range"
    return timedelta(seconds=seconds), None


def _duration(
    kind: str, meta: Mapping[str, Any], spec: Mapping[str, Any]
) -> tuple[timedelta | None, str, str | None]:
    """The declared run time, where it came from, and why a declaration was unusable."""
    declared = {**mapping(meta.get("labels")), **mapping(meta.get("annotations"))}
    if EXPECTED_DURATION in declared:
        try:
            declared_duration = parse_duration(str(declared[EXPECTED_DURATION])[:64])
        except ValueError as error:
            return None, "", f"{EXPECTED_DURATION}: {error}"
        return declared_duration, EXPECTED_DURATION, None
    candidates: list[tuple[object, str]] = [
        (mapping(meta.get("labels")).get(KUEUE_MAX_EXEC), KUEUE_MAX_EXEC),
        (
            spec.get("maximumExecutionTimeSeconds") if kind == "Workload" else None,
            "maximumExecutionTimeSeconds",
        ),
        (spec.get("activeDeadlineSeconds") if kind == "Job" else None, "activeDeadlineSeconds"),
    ]
    for value, source in candidates:
        if value is not None:
            parsed, problem = _seconds(value, source)
            return parsed, source if parsed else "", problem
    return None, "", None


def demand(manifest: Mapping[str, Any]) -> Demand:
    """The pods a manifest runs at once and its declared run time."""
    kind = str(manifest.get("kind") or "")
    meta, spec = mapping(manifest.get("metadata")), mapping(manifest.get("spec"))
    duration, source, problem = _duration(kind, meta, spec)
    groups = tuple(_group(*t) for t in _templates(kind, meta, spec))
    return Demand(kind, groups, duration, source, problem)


def _price(prices: PriceTable, resource: str, selector: Mapping[str, str]) -> tuple[float, bool]:
    """The rate for pods that select `selector`: the most specific matching rate, else the
    highest of the resource's rates (an upper bound: the node is not known yet)."""
    rates = [r for r in prices.accelerator_hour if r.resource == resource]
    matching = [r for r in rates if all(selector.get(k) == v for k, v in r.node_selector.items())]
    if matching:
        return max(matching, key=lambda r: len(r.node_selector)).price, False
    return max((r.price for r in rates), default=0.0), len(rates) > 1


def estimate(d: Demand, accelerators: Sequence[str], prices: PriceTable) -> Estimate:
    """Usage per hour of all the workload's pods, and over its declared duration."""
    hourly, upper = Usage(), False
    for group in d.groups:
        accel = {r: group.requests[r] for r in accelerators if group.requests.get(r)}
        cores = float(group.requests.get(CPU, 0.0))
        gib = float(group.requests.get(MEMORY, 0.0)) / GIB
        cost = cores * prices.cpu_core_hour + gib * prices.memory_gib_hour
        for resource, count in accel.items():
            price, highest = _price(prices, resource, group.node_selector)
            cost, upper = cost + count * price, upper or highest
        hourly = hourly + Usage(accel, cores, gib, cost).scaled(group.count)
    total = hourly.scaled(d.duration.total_seconds() / HOUR) if d.duration else None
    return Estimate(hourly, total, upper)


def describe(d: Demand, e: Estimate) -> str:
    """One line for people: "8 pods, 64 nvidia.com/gpu for 6h (annotation ...) = 384
    accelerator-hours"."""
    accel = ", ".join(f"{n:g} {r}" for r, n in sorted(e.hourly.accelerator_hours.items()))
    held = f"{d.pods} pod{'s' if d.pods != 1 else ''}" + (f", {accel}" if accel else "")
    if d.duration is None or e.total is None:
        why = f" ({d.problem})" if d.problem else f" (no {EXPECTED_DURATION} declared)"
        return f"{held}: {e.hourly.total_accelerator_hours:g} accelerator-hours per hour{why}"
    return (
        f"{held} for {human(d.duration)} ({d.duration_source}) = "
        f"{e.total.total_accelerator_hours:.4g} accelerator-hours"
    )


def shares(total: Usage, remaining: Mapping[str, float]) -> dict[str, float]:
    """Percent of what remains that the workload would use, per limited dimension of a
    budget (as `status.remaining` names them): above 100 it alone would overrun the
    budget; infinite where nothing is left and it needs some."""
    found: dict[str, float] = {}
    for name, left in remaining.items():
        wanted = usage_along(total, name)
        if wanted <= 0:
            found[name] = 0.0
        else:
            found[name] = 100.0 * wanted / left if left > 0 else math.inf
    return found


def usage_along(usage: Usage, dimension: str) -> float:
    """The amount of `usage` along one of a budget's dimension names."""
    if dimension == "acceleratorHours":
        return usage.total_accelerator_hours
    if dimension.startswith("acceleratorHours["):
        return usage.accelerator_hours.get(dimension[len("acceleratorHours[") : -1], 0.0)
    return {
        "cpuCoreHours": usage.cpu_core_hours,
        "memoryGiBHours": usage.memory_gib_hours,
        "cost": usage.cost,
    }.get(dimension, 0.0)
