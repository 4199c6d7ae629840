"""Over-provisioned accelerators: a workload that holds N accelerators while only k < N of
them work, judged per accelerator over a window, and what to request instead.

Only a recommendation: nothing here changes a running job. It is made only when every
accelerator the workload holds has a verdict: each reported, and either worked (its peak
reached the threshold) or stayed below it with the window covered. An accelerator that
did not report, or whose window has gaps, makes the workload unknown: no recommendation.
A workload none of whose accelerators work is idle, which is idle reclaim's business.
"""

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class GpuSeries:
    """One accelerator's window, as Prometheus summarised it."""

    namespace: str
    pod: str
    device: str
    """What tells the pod's accelerators apart (the UUID, else host and index)."""
    peak: float
    """The highest sample within the window, in percent."""
    samples: int
    """Raw samples within the window (how well it is covered)."""


@dataclass(frozen=True, slots=True)
class Holder:
    """A workload and what each of its running pods holds."""

    key: str
    kind: str
    namespace: str
    name: str
    pods: tuple[tuple[str, int], ...]
    """(pod name, accelerators it requests)."""


@dataclass(frozen=True, slots=True)
class Recommendation:
    key: str
    kind: str
    namespace: str
    name: str
    pods: int
    held: int
    busy: int
    idle: int
    per_pod: int
    """What each pod should request: the most any of its pods kept busy."""

    @property
    def recommended(self) -> int:
        return self.per_pod * self.pods

    @property
    def excess(self) -> int:
        return self.held - self.recommended

    def message(self, threshold: float, window: str) -> str:
        where = f" in {self.pods} pods" if self.pods > 1 else ""
        each = " per pod" if self.pods > 1 else ""
        return (
            f"{self.kind} {self.namespace}/{self.name} holds {self.held} GPUs{where}; "
            f"{self.idle} stayed below {threshold:g}% for {window} — "
            f"request {self.per_pod}{each}"
        )


def _verdicts(
    series: Iterable[GpuSeries], threshold: float, min_samples: int
) -> dict[tuple[str, str], tuple[int, int, int]]:
    """Per pod: (busy, idle, uncovered) accelerators."""
    per_pod: dict[tuple[str, str], dict[str, GpuSeries]] = defaultdict(dict)
    for s in series:
        if math.isfinite(s.peak):
            per_pod[(s.namespace, s.pod)][s.device] = s
    out = {}
    for key, devices in per_pod.items():
        busy = sum(1 for s in devices.values() if s.peak >= threshold)
        idle = sum(1 for s in devices.values() if s.peak < threshold and s.samples >= min_samples)
        out[key] = (busy, idle, len(devices) - busy - idle)
    return out


def recommend(
    holders: Sequence[Holder],
    series: Iterable[GpuSeries],
    *,
    threshold: float,
    min_samples: int,
    min_idle: int = 1,
) -> list[Recommendation]:
    """The workloads to request fewer accelerators, most excess first."""
    verdicts = _verdicts(series, threshold, min_samples)
    out = []
    for h in holders:
        found = [verdicts.get((h.namespace, pod)) for pod, _ in h.pods]
        counts = [v for v in found if v is not None]
        complete = len(counts) == len(h.pods) and all(
            b + i == n and u == 0 for (b, i, u), (_, n) in zip(counts, h.pods, strict=True)
        )
        busy = sum(b for b, _, _ in counts)
        idle = sum(i for _, i, _ in counts)
        if not complete or busy == 0 or idle < min_idle:
            continue  # an accelerator without a verdict (or a stray series), or all idle
        held = sum(n for _, n in h.pods)
        per_pod = max(b for b, _, _ in counts)
        rec = Recommendation(
            h.key, h.kind, h.namespace, h.name, len(h.pods), held, busy, idle, per_pod
        )
        if rec.excess > 0:
            out.append(rec)
    return sorted(out, key=lambda r: (-r.excess, r.namespace, r.name))


def holders(pods: Iterable[tuple[str, str, str, str, str, int]]) -> list[Holder]:
    """Group (group key, kind, namespace, workload name, pod, accelerators) rows into
    workloads: a multi-pod job is judged over all its pods."""
    grouped: dict[str, list[tuple[str, str, str, str, int]]] = defaultdict(list)
    for key, kind, namespace, name, pod, n in pods:
        grouped[key].append((kind, namespace, name, pod, n))
    out = []
    for key, rows in grouped.items():
        kind, namespace, name = rows[0][:3]
        out.append(Holder(key, kind, namespace, name, tuple(sorted((p, n) for *_, p, n in rows))))
    return out
