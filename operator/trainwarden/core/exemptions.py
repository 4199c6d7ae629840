"""Whether a workload asked to be left alone, and whether the policy lets it.

A malformed annotation is reported and ignored; it never crashes an evaluation and never
exempts anything by accident.
"""

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from trainwarden.api.v1alpha1.names import EXEMPT, KEEP_UNTIL

KEYS = frozenset({EXEMPT, KEEP_UNTIL})


@dataclass(frozen=True)
class Exemption:
    reason: str | None = None
    """Why the workload is exempt now; None if it is not."""
    problem: str | None = None
    """An annotation that was ignored, and why (to report)."""
    until: datetime | None = None
    """When a time-bounded exemption ends (capped by the policy); None if open-ended."""
    acknowledged: tuple[str, datetime] | None = None
    """The keep-until value and when it was first seen: what the caller keeps, so that the
    cap runs from then and not from every evaluation's now."""


def exemption(
    annotations: Mapping[str, str],
    priority_class: str | None,
    *,
    now: datetime,
    allow_opt_out: bool,
    max_keep: timedelta,
    priority_classes: Collection[str],
    seen: tuple[str, datetime] | None = None,
) -> Exemption:
    """`seen` is the keep-until value recorded earlier and when it was first seen; a
    different value is a new acknowledgement, capped from now."""
    if priority_class and priority_class in priority_classes:
        return Exemption(f"priority class {priority_class} is exempt")
    problem = None
    if annotations.get(EXEMPT, "").lower() == "true":
        if allow_opt_out:
            return Exemption(f"{EXEMPT}: true")
        problem = f"{EXEMPT} ignored: this policy does not allow opting out"
    raw = annotations.get(KEEP_UNTIL)
    if raw is not None:
        try:
            until = datetime.fromisoformat(raw.replace("Z", "+00:00"))
            if until.tzinfo is None:
                raise ValueError("no time zone")
        except ValueError:
            return Exemption(problem=f"{KEEP_UNTIL}={raw!r} ignored: not an RFC 3339 time")
        first = seen[1] if seen is not None and seen[0] == raw and seen[1] <= now else now
        capped = min(until, first + max_keep)
        if now < capped:
            note = "" if capped == until else f" (capped from {raw} by the policy)"
            return Exemption(
                f"kept until {capped.isoformat()}{note}", problem, capped, (raw, first)
            )
        return Exemption(problem=problem, acknowledged=(raw, first))
    return Exemption(problem=problem)
