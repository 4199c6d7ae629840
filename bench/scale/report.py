"""Results: one table per phase, ratios against both references, the targets with pass/fail,
and the same as JSON."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from scale.meters import Usage
from scale.params import TARGET_SIZE, TARGETS, Params

CLIENTS = ("operator", "janitor", "watcher")
EMPTY_STATUS = 2
"""The size of `{}`: no policy has a status yet."""
TITLES = {"operator": "trainwarden", "janitor": "naive janitor", "watcher": "bare watch"}


@dataclass
class Latencies:
    """Reaction latencies in seconds; None is a probe that saw no reaction by its deadline."""

    values: list[float | None] = field(default_factory=list)
    timeout: float = 0.0

    def percentile(self, q: float) -> float | None:
        """Nearest rank; a missed probe counts as infinitely late (then None)."""
        if not self.values:
            return None
        ranked = sorted(math.inf if v is None else v for v in self.values)
        value = ranked[max(0, math.ceil(q * len(ranked)) - 1)]
        return None if value == math.inf else value

    @property
    def missed(self) -> int:
        return sum(1 for v in self.values if v is None)

    def text(self, q: float) -> str:
        if not self.values:
            return "-"
        value = self.percentile(q)
        if value is None:
            return f"not reached in {self.timeout:.0f} s"
        return f"{value:.2f} s"


@dataclass
class StatusSize:
    status_bytes: int = 0
    object_bytes: int = 0
    name: str = ""


@dataclass
class Phase:
    key: str
    title: str
    seconds: float = 0.0
    usage: dict[str, Usage] = field(default_factory=dict)
    apiserver_cores: float | None = None
    sync: dict[str, float | None] = field(default_factory=dict)
    """Time to the first full evaluation (initial sync only); None: not within the deadline."""
    sync_timeout: dict[str, float] = field(default_factory=dict)
    status: StatusSize | None = None
    crossing: dict[str, Latencies] = field(default_factory=dict)
    idle: Latencies | None = None
    events: dict[str, Latencies] = field(default_factory=dict)
    """The bare watcher's "request sent -> event seen" for churn pods (created, deleted)."""
    notes: list[str] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class Results:
    params: Params
    phases: list[Phase] = field(default_factory=list)
    targets: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def phase(self, key: str) -> Phase | None:
        return next((p for p in self.phases if p.key == key), None)


# --- formatting ------------------------------------------------------------------------
def _num(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def _bytes(value: float | None) -> str:
    if value is None:
        return "-"
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if value >= size:
            return f"{value / size:.1f} {unit}"
    return f"{value:.0f} B"


def _at_least(timeout: float | None, b: float | None) -> str:
    """The ratio of a figure that was not reached within `timeout` to a reached one."""
    if timeout is None or not b:
        return "-"
    return f"> {timeout / b:,.0f}x"


def _ratio(a: float | None, b: float | None) -> str:
    if a is None or b is None:
        return "-"
    if b == 0:
        return "-" if a == 0 else "inf"
    ratio = a / b
    return f"{ratio:.2g}x" if ratio < 10 else f"{ratio:,.0f}x"


def _table(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    lines = [
        "  ".join(
            c.ljust(w) if i == 0 else c.rjust(w)
            for i, (c, w) in enumerate(zip(r, widths, strict=True))
        )
        for r in [header, *rows]
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


Metric = Callable[[Phase, str], float | None]


def _usage(attribute: str) -> Metric:
    def get(phase: Phase, client: str) -> float | None:
        usage = phase.usage.get(client)
        value = getattr(usage, attribute) if usage else None
        return float(value) if value is not None else None

    return get


def phase_table(phase: Phase) -> str:
    header = ["", *(TITLES[c] for c in CLIENTS), "tw / janitor", "tw / watch"]
    rows: list[list[str]] = []

    def add(label: str, get: Metric, fmt: Callable[[float | None], str]) -> None:
        values = {c: get(phase, c) for c in CLIENTS}
        rows.append(
            [
                label,
                *(fmt(values[c]) for c in CLIENTS),
                _ratio(values["operator"], values["janitor"]),
                _ratio(values["operator"], values["watcher"]),
            ]
        )

    if phase.sync:
        rows.append(
            [
                "time to first full evaluation",
                *(
                    _num(phase.sync.get(c), ".1f") + " s"
                    if phase.sync.get(c) is not None
                    else (
                        f"not in {phase.sync_timeout.get(c, 0):.0f} s" if c in phase.sync else "-"
                    )
                    for c in CLIENTS
                ),
                *(
                    _ratio(phase.sync.get("operator"), phase.sync.get(ref))
                    if phase.sync.get("operator") is not None
                    else _at_least(phase.sync_timeout.get("operator"), phase.sync.get(ref))
                    for ref in ("janitor", "watcher")
                ),
            ]
        )
    add("RSS peak (MiB)", _usage("rss_peak_mib"), lambda v: _num(v, ".0f"))
    add("CPU (cores)", _usage("cores"), lambda v: _num(v, ".3f"))
    add("API requests/min (API server)", _usage("requests_per_min"), lambda v: _num(v, ",.0f"))
    add("bytes/min (proxy, both ways)", _usage("bytes_per_min"), _bytes)
    if phase.status:
        size = phase.status.status_bytes
        rows.append(
            [
                "largest policy status",
                _bytes(size) if size > EMPTY_STATUS else "none written",
                "-",
                "-",
                "-",
                "-",
            ]
        )
    for q, name in ((0.5, "p50"), (0.99, "p99")):
        if phase.crossing:
            op, jan = phase.crossing.get("operator"), phase.crossing.get("janitor")
            ev = phase.events.get("created")
            rows.append(
                [
                    f"budget crossing -> suspension {name}",
                    op.text(q) if op else "-",
                    jan.text(q) if jan else "-",
                    (ev.text(q) + " (event)") if ev else "-",
                    _ratio(op.percentile(q) if op else None, jan.percentile(q) if jan else None),
                    _ratio(op.percentile(q) if op else None, ev.percentile(q) if ev else None),
                ]
            )
    if phase.idle:
        rows.append(
            ["idle window elapsed -> warning p99", phase.idle.text(0.99), "n/a", "n/a", "-", "-"]
        )
    out = [f"== {phase.title} ({phase.seconds:.0f} s) ==", _table(header, rows)]
    context = []
    if phase.apiserver_cores is not None:
        context.append(f"kube-apiserver {phase.apiserver_cores:.2f} cores (all clients)")
    rejected = {c: u.rejected for c, u in phase.usage.items() if u.rejected}
    if rejected:
        context.append(f"requests rejected by flow control: {rejected}")
    if phase.status and phase.status.name:
        context.append(
            f"largest status: {phase.status.name} "
            f"(whole object {_bytes(phase.status.object_bytes)})"
        )
    if phase.crossing:
        counts = ", ".join(
            f"{c} n={len(lat.values)} missed={lat.missed}" for c, lat in phase.crossing.items()
        )
        context.append(f"crossing probes: {counts}")
    if phase.events:
        counts = ", ".join(
            f"{k} p50 {lat.text(0.5)} p99 {lat.text(0.99)} "
            f"(n={len(lat.values)}, missed={lat.missed})"
            for k, lat in phase.events.items()
        )
        context.append(f"bare watch, request sent -> event seen: {counts}")
    if phase.idle:
        context.append(
            f"idle probes: n={len(phase.idle.values)} missed={phase.idle.missed} "
            f"p50 {phase.idle.text(0.5)}"
        )
    out += [f"  {line}" for line in context + phase.notes]
    return "\n".join(out)


# --- targets ---------------------------------------------------------------------------
def evaluate_targets(results: Results) -> None:
    params = results.params
    figures: dict[str, tuple[float | None, str]] = {}
    sync = results.phase("sync")
    if sync and "operator" in sync.sync:
        value = sync.sync["operator"]
        figures["sync_seconds"] = (
            value,
            f"{value:.1f}" if value is not None else f"not within {params.sync_timeout} s",
        )
    peaks = [
        u.rss_peak_mib
        for p in results.phases
        if (u := p.usage.get("operator")) and u.rss_peak_mib is not None
    ]
    if peaks:
        figures["rss_mib"] = (max(peaks), f"{max(peaks):.0f}")
    steady = results.phase("steady")
    if steady and (u := steady.usage.get("operator")) and u.cores is not None:
        figures["steady_cores"] = (u.cores, f"{u.cores:.3f}")
    churn10 = next((p for p in results.phases if p.extra.get("rate") == 10), None)
    if churn10:
        if (u := churn10.usage.get("operator")) and u.cores is not None:
            figures["churn10_cores"] = (u.cores, f"{u.cores:.3f}")
        if lat := churn10.crossing.get("operator"):
            p99 = lat.percentile(0.99)
            figures["churn10_p99"] = (p99, lat.text(0.99))
    if steady:
        op, jan = steady.usage.get("operator"), steady.usage.get("janitor")
        if op and jan and op.bytes_per_min is not None and jan.bytes_per_min:
            percent = 100 * op.bytes_per_min / jan.bytes_per_min
            figures["steady_bytes_ratio"] = (percent, f"{percent:.2f} %")
    sizes = [p.status.status_bytes for p in results.phases if p.status]
    if sizes and max(sizes) > EMPTY_STATUS:
        figures["status_kib"] = (max(sizes) / 1024, f"{max(sizes) / 1024:.1f}")
    results.targets = []
    for target in TARGETS:
        value, text = figures.get(target.key, (None, "not measured"))
        measured = target.key in figures
        passed = value is not None and value <= target.limit
        results.targets.append(
            {
                "key": target.key,
                "target": f"{target.text} <= {target.limit:g}",
                "measured": text,
                "value": value,
                "pass": passed if measured else None,
            }
        )


def targets_table(results: Results) -> str:
    rows = [
        [
            t["target"],
            t["measured"],
            "-" if t["pass"] is None else ("pass" if t["pass"] else "FAIL"),
        ]
        for t in results.targets
    ]
    params = results.params
    size = f"{params.nodes:,} nodes / {params.pods:,} pods / {params.budgets} budgets"
    title = f"== Targets (issue 12, set for {TARGET_SIZE}; this run: {size}) =="
    return title + "\n" + _table(["target", "measured", ""], rows)


def render(results: Results) -> str:
    parts = [phase_table(p) for p in results.phases]
    parts.append(targets_table(results))
    if results.notes:
        parts.append("Notes:\n" + "\n".join(f"  - {n}" for n in results.notes))
    return "\n\n".join(parts)


def write_json(results: Results, path: Path) -> None:
    data = asdict(results)
    data["params"] = results.params.as_dict()
    for phase in data["phases"]:
        for name, lat in list(phase["crossing"].items()) + list(phase["events"].items()):
            lat["p50"] = Latencies(lat["values"], lat["timeout"]).percentile(0.5)
            lat["p99"] = Latencies(lat["values"], lat["timeout"]).percentile(0.99)
            del name
        if phase["idle"]:
            lat = phase["idle"]
            lat["p50"] = Latencies(lat["values"], lat["timeout"]).percentile(0.5)
            lat["p99"] = Latencies(lat["values"], lat["timeout"]).percentile(0.99)
    path.write_text(json.dumps(data, indent=1, default=str))
