"""The storage a run held: GiB-hours of the claims its pods mounted, while it ran.

Pure: the shell passes the names of the claims the run's pods mounted (core/runs.py
`Run.claims`) and the cache's records of the run's namespace's claims (core/claims.py),
those that exist and those seen gone. Each distinct claim is charged once, its request
in force times the overlap of its life with [run start, run end]; a claim deleted before
the run ended is charged up to its deletion. A name with no record whose life touches
the run (gone and forgotten, never seen, or past the accumulator's caps) is unknown: said,
never guessed. docs/receipts.md says why.
"""

from collections.abc import Collection, Iterable
from dataclasses import dataclass

from trainwarden.api.v1alpha1.receipt import (
    MAX_STORAGE_CLASSES,
    MAX_UNKNOWN_CLAIMS,
    ClassHours,
    Storage,
)
from trainwarden.core.claims import ClaimFacts, charge_seconds

BYTE_SECONDS_PER_GIB_HOUR = float(2**30) * 3600.0
"""Byte-seconds in one GiB-hour."""
OTHER = "(other)"
PAST_CAP = "(more claims than a receipt follows)"
"""How the unknown list names the claims past the caps (an empty name in `Run.claims`)."""


@dataclass(frozen=True, slots=True)
class Record:
    """One record of a claim the cache holds."""

    claim: ClaimFacts
    gone: float | None = None
    """When it stopped being charged, for a claim seen gone: its deletion, else when the
    cache saw it gone. None for a claim that exists."""


@dataclass(frozen=True, slots=True)
class Claims:
    """The cache's claim records of the run's namespace, and whether they are current."""

    records: tuple[Record, ...]
    current: bool
    """The claims' source was listed and is watched: without it nothing is known."""


UNKNOWN = Claims((), current=False)
"""No records: every claim a run mounted is unknown."""


def _end(r: Record) -> float | None:
    ends = [t for t in (r.gone, r.claim.deleting_since) if t is not None]
    return min(ends) if ends else None


def _touches(r: Record, start: float, end: float) -> bool:
    """Its life [created, end) meets the run's [start, end]."""
    stop = _end(r)
    return r.claim.created <= end and (stop is None or stop >= start)


def _lives(names: Collection[str], claims: Claims, start: float, end: float) -> dict[str, Record]:
    """The records, by uid, of the mounted names whose lives touch the run (a name
    recreated after a deletion may have several; a uid once, the live record first)."""
    found: dict[str, Record] = {}
    for r in claims.records:
        if r.claim.name and r.claim.name in names and _touches(r, start, end):
            found.setdefault(r.claim.uid, r)
    return found


def _classes(hours: dict[str, float]) -> list[ClassHours]:
    ranked = sorted(hours.items(), key=lambda kv: (-kv[1], kv[0]))
    shown = [ClassHours(storage_class=k, gib_hours=_r(v)) for k, v in ranked[:MAX_STORAGE_CLASSES]]
    rest = sum(v for _, v in ranked[MAX_STORAGE_CLASSES:])
    return shown + ([ClassHours(storage_class=OTHER, gib_hours=_r(rest))] if rest > 0 else [])


def held(names: Collection[str], claims: Claims, *, start: float, end: float) -> Storage | None:
    """What the claims named held within [start, end]; None when the run mounted none."""
    if not names:
        return None
    if not claims.current:
        shown = sorted(n or PAST_CAP for n in names)[:MAX_UNKNOWN_CLAIMS]
        note = "the claims' watch was not current when the receipt was written"
        return Storage(unknown_claims=len(names), unknown=shown, note=note)
    lives = _lives(names, claims, start, end)
    known = {r.claim.name for r in lives.values()}
    missing = sorted(n or PAST_CAP for n in names if n not in known)
    by_class: dict[str, float] = {}
    for r in lives.values():
        seconds = charge_seconds(r.claim, start, end, r.gone)
        by_class[r.claim.storage_class] = by_class.get(r.claim.storage_class, 0.0) + seconds
    hours = {k: v / BYTE_SECONDS_PER_GIB_HOUR for k, v in by_class.items()}
    note = (
        f"{len(missing)} mounted claim(s) not known (gone and forgotten, or never seen): "
        "not in gibHours"
        if missing
        else ""
    )
    return Storage(
        gib_hours=_r(sum(hours.values())) if lives else None,
        by_class=_classes(hours),
        claims=len(lives),
        unknown_claims=len(missing),
        unknown=missing[:MAX_UNKNOWN_CLAIMS],
        note=note,
    )


def records(live: Iterable[ClaimFacts], gone: Iterable[tuple[ClaimFacts, float]]) -> list[Record]:
    """The cache's live claims and those it saw gone, as records."""
    return [Record(c) for c in live] + [Record(c, t) for c, t in gone]


def _r(value: float) -> float:
    """Six decimals: a micro-GiB-hour is 3.6 ms of one GiB."""
    return round(max(0.0, value), 6)
