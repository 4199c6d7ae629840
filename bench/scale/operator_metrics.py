"""What the operator itself says it asked of the API server, from its /metrics: requests
by verb and resource (trainwarden_api_requests_total), watch events by source
(trainwarden_informer_events_total), and the watches that failed (each holds every policy
until its kind is listed again: trainwarden_informer_errors_total) or expired into a relist
(trainwarden_informer_relists_total), read at a window's start and end."""

from __future__ import annotations

import re
import urllib.request

from scale.report import Phase

_SAMPLE = re.compile(r"^(\w+)\{([^}]*)\} ([0-9.eE+-]+)$")
_LABEL = re.compile(r'(\w+)="([^"]*)"')
Counts = dict[str, float]
_FAILURES = {
    "trainwarden_informer_errors_total": "held",
    "trainwarden_informer_relists_total": "relisted",
}
TOP = 12
"""Request kinds shown per window in the report (the JSON has them all)."""


def scrape(url: str) -> Counts:
    """Cumulative counts keyed "requests VERB RESOURCE CODE" and "events SOURCE"; empty when
    the operator does not answer (the window then shows no breakdown)."""
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            text = response.read().decode()
    except OSError:
        return {}
    found: Counts = {}
    for line in text.splitlines():
        match = _SAMPLE.match(line)
        if not match:
            continue
        labels = dict(_LABEL.findall(match.group(2)))
        if match.group(1) == "trainwarden_api_requests_total":
            key = f"requests {labels['verb']} {labels['resource']} {labels['code']}"
        elif match.group(1) == "trainwarden_informer_events_total":
            key = f"events {labels['source']}"
        elif match.group(1) in _FAILURES:
            key = f"{_FAILURES[match.group(1)]} {labels['source']}"
        else:
            continue
        found[key] = found.get(key, 0.0) + float(match.group(3))
    return found


def breakdown(phase: Phase, start: Counts, end: Counts) -> None:
    """Per minute over the phase's window, largest first: into phase.extra (the JSON) and
    its notes (the report)."""
    if not start or not end:
        phase.notes.append("operator /metrics not read: no request breakdown")
        return
    per_min = 60 / max(1e-9, phase.seconds)
    rates = {k: (end[k] - start.get(k, 0.0)) * per_min for k in end}
    requests = sorted(
        ((k.split(" ", 1)[1], v) for k, v in rates.items() if k.startswith("requests ") and v),
        key=lambda kv: -kv[1],
    )
    events = sorted(
        ((k.split(" ", 1)[1], v) for k, v in rates.items() if k.startswith("events ") and v),
        key=lambda kv: -kv[1],
    )
    phase.extra["requests_per_min"] = dict(requests)
    phase.extra["watch_events_per_min"] = dict(events)
    total = sum(v for _, v in requests)
    shown = ", ".join(f"{k} {v:.1f}" for k, v in requests[:TOP])
    phase.notes.append(
        f"operator's own count, requests/min {total:.1f} (verb resource code): " + shown
    )
    shown = ", ".join(f"{k} {v:.1f}" for k, v in events) or "none"
    phase.notes.append(f"operator's informer watch events/min by source: {shown}")
    failed = {
        k: int(end[k] - start.get(k, 0.0))
        for k in end
        if k.split(" ", 1)[0] in _FAILURES.values() and end[k] > start.get(k, 0.0)
    }
    phase.extra["watch_failures"] = failed
    phase.notes.append(
        "watches failed, holding every policy until relisted (held) or expired (relisted): "
        + (", ".join(f"{k} {v}" for k, v in sorted(failed.items())) or "none")
    )
