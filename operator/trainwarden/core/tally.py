"""Usage in total and broken down by namespace, attribution label and outcome.

A tally is what a budget shows and what its ledger keeps of pods that are gone. It is
bounded: each breakdown keeps its `cap` largest keys and folds the rest into "(other)",
so a label with a new value per run (an experiment id) cannot grow the status. Totals are
never approximated: only the attribution of the tail is coarsened.
"""

from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from trainwarden.core.accounting import Charge, Rate, Usage

OTHER = "(other)"
OUTCOMES = ("Running", "Succeeded", "Failed")


@dataclass(frozen=True, slots=True)
class Share:
    """The part of a tally attributed to one key."""

    accelerator_hours: float = 0.0
    cost: float = 0.0

    def __add__(self, other: "Share") -> "Share":
        return Share(self.accelerator_hours + other.accelerator_hours, self.cost + other.cost)

    def minus(self, other: "Share") -> "Share":
        """Never below zero: a subtraction of estimates must not create negative usage."""
        return Share(
            max(0.0, self.accelerator_hours - other.accelerator_hours),
            max(0.0, self.cost - other.cost),
        )

    def scaled(self, factor: float) -> "Share":
        return Share(self.accelerator_hours * factor, self.cost * factor)


Shares = Mapping[str, Share]


@dataclass(frozen=True)
class Tally:
    total: Usage = field(default_factory=Usage)
    by_namespace: Shares = field(default_factory=dict)
    by_label: Mapping[str, Shares] = field(default_factory=dict)
    """Per attribution label key, per value ("" where the pod had no such label)."""
    by_outcome: Shares = field(default_factory=dict)

    def __add__(self, other: "Tally") -> "Tally":
        return _combine(self, other, lambda a, b: a + b, lambda a, b: a + b)

    def minus(self, other: "Tally") -> "Tally":
        """Per key and per dimension, never below zero. A key of `other` this tally does
        not have is taken from its "(other)" share, where a capped tally put it."""
        return _combine(self, other, _usage_minus, Share.minus, missing_to_other=True)

    def rescaled(self, total: Usage) -> "Tally":
        """The same attribution for a new total: shares scale with it, accelerator-hours
        and cost each by their own ratio (what a sliding window does to gone pods)."""

        def ratio(new: float, old: float) -> float:
            return new / old if old > 0 else 0.0

        accel = ratio(total.total_accelerator_hours, self.total.total_accelerator_hours)
        cost = ratio(total.cost, self.total.cost)

        def scale(shares: Shares) -> dict[str, Share]:
            return {k: Share(s.accelerator_hours * accel, s.cost * cost) for k, s in shares.items()}

        return Tally(
            total,
            scale(self.by_namespace),
            {k: scale(v) for k, v in self.by_label.items()},
            scale(self.by_outcome),
        )

    def capped(self, cap: int) -> "Tally":
        """At most `cap` keys per breakdown: the largest, and "(other)" for the rest."""
        return Tally(
            self.total,
            _cap(self.by_namespace, cap),
            {k: _cap(v, cap) for k, v in self.by_label.items()},
            dict(self.by_outcome),  # three outcomes at most
        )


def _usage_minus(a: Usage, b: Usage) -> Usage:
    resources = set(a.accelerator_hours) | set(b.accelerator_hours)
    return Usage(
        {
            r: max(0.0, a.accelerator_hours.get(r, 0.0) - b.accelerator_hours.get(r, 0.0))
            for r in resources
        },
        max(0.0, a.cpu_core_hours - b.cpu_core_hours),
        max(0.0, a.memory_gib_hours - b.memory_gib_hours),
        max(0.0, a.cost - b.cost),
    )


def _merge(
    a: Shares, b: Shares, op: Callable[[Share, Share], Share], missing_to_other: bool
) -> dict[str, Share]:
    out = dict(a)
    for key, share in b.items():
        target = key
        if missing_to_other and key not in out:
            if OTHER not in out:
                continue  # nothing of it was ever kept: nothing to take it from
            target = OTHER
        out[target] = op(out.get(target, Share()), share)
    return out


def _combine(
    a: Tally,
    b: Tally,
    total: Callable[[Usage, Usage], Usage],
    op: Callable[[Share, Share], Share],
    *,
    missing_to_other: bool = False,
) -> Tally:
    labels = {
        k: _merge(a.by_label.get(k, {}), b.by_label.get(k, {}), op, missing_to_other)
        for k in {*a.by_label, *b.by_label}
    }
    return Tally(
        total(a.total, b.total),
        _merge(a.by_namespace, b.by_namespace, op, missing_to_other),
        labels,
        _merge(a.by_outcome, b.by_outcome, op, missing_to_other),
    )


def _cap(shares: Shares, cap: int) -> dict[str, Share]:
    if len(shares) <= cap:
        return dict(shares)
    ranked = sorted(
        ((k, s) for k, s in shares.items() if k != OTHER),
        key=lambda kv: (-kv[1].accelerator_hours, -kv[1].cost, kv[0]),
    )
    kept = dict(ranked[: cap - 1])
    rest = shares.get(OTHER, Share())
    for _, share in ranked[cap - 1 :]:
        rest = rest + share
    kept[OTHER] = rest
    return kept


def tally(
    charges: Iterable[Charge],
    lo: float,
    hi: float,
    label_keys: Sequence[str],
    *,
    outcome_at: float | None = None,
) -> Tally:
    """Usage of `charges` within [lo, hi).

    `outcome_at` attributes pods that still ran at that time to "Running" (what a tally
    taken then said of them)."""

    def held() -> Iterable[tuple[Charge, float, str]]:
        for c in charges:
            outcome: str = c.outcome
            if outcome_at is not None and c.running_at(outcome_at):
                outcome = "Running"
            yield c, c.seconds(lo, hi), outcome

    return weighted(held(), label_keys)


def weighted(
    pairs: Iterable[tuple[Charge, float, str]],
    label_keys: Sequence[str],
    *,
    like: "Tally | None" = None,
) -> Tally:
    """The tally of (charge, seconds at its rate, outcome) triples. Seconds are summed per
    rate for the total and per key as plain floats for the shares: one pass, no vector
    arithmetic per pod (a budget evaluates it over every pod it charges). With `like`, a
    key that tally does not show is credited to "(other)" at once (what is shown next to
    it), so a label with a value per pod does not build a share per pod."""
    per_rate: dict[Rate, float] = defaultdict(float)
    by_namespace: dict[str, list[float]] = {}
    by_label: dict[str, dict[str, list[float]]] = {k: {} for k in label_keys}
    by_outcome: dict[str, list[float]] = {}
    for c, seconds, outcome in pairs:
        if seconds <= 0:
            continue
        rate = c.rate
        per_rate[rate] += seconds
        hours = seconds / 3600.0
        accel, cost = rate.accelerator_total * hours, rate.cost * hours
        _credit(by_namespace, _shown(c.namespace, like.by_namespace if like else None), accel, cost)
        _credit(by_outcome, outcome, accel, cost)
        for key, value in zip(label_keys, c.labels, strict=False):
            shown = like.by_label.get(key, {}) if like else None
            _credit(by_label[key], _shown(value, shown), accel, cost)
    total = Usage()
    for rate, seconds in per_rate.items():
        total = total + rate.usage(seconds)
    return Tally(
        total,
        _as_shares(by_namespace),
        {k: _as_shares(v) for k, v in by_label.items()},
        _as_shares(by_outcome),
    )


def _shown(key: str, shown: Shares | None) -> str:
    return key if shown is None or key in shown else OTHER


def _credit(into: dict[str, list[float]], key: str, accel: float, cost: float) -> None:
    found = into.get(key)
    if found is None:
        into[key] = [accel, cost]
    else:
        found[0] += accel
        found[1] += cost


def _as_shares(sums: Mapping[str, list[float]]) -> dict[str, Share]:
    return {k: Share(a, c) for k, (a, c) in sums.items()}


def burn_rate(charges: Iterable[Charge], at: float) -> Usage:
    """Usage per hour of the pods holding resources at `at`."""
    running: dict[Rate, int] = defaultdict(int)
    for c in charges:
        if c.running_at(at):
            running[c.rate] += 1
    total = Usage()
    for rate, count in running.items():
        total = total + rate.usage(3600.0 * count)
    return total
