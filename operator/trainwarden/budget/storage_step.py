"""A budget's storage in one evaluation: the claims in its scope from the cache, its
ledger advanced (budget/storage.py), its limits judged, and what status says of it.

Storage limits never suspend or hold pods: a volume is charged whether or not a pod
mounts it, so stopping compute would destroy work and save no storage. Exhausted, they
refuse new PersistentVolumeClaims in scope through the admission webhook (Enforce; DryRun
warns). Storage's cost counts in the cost limit, which does hold and suspend workloads
as it always did, and refuses new claims too (docs/storage.md).
"""

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from trainwarden.api.v1alpha1.budget import TrainingBudgetSpec
from trainwarden.api.v1alpha1.budget_status import (
    StorageAdmission,
    StorageBucket,
    StorageStatus,
    TrainingBudgetStatus,
)
from trainwarden.api.v1alpha1.types import MAX_DURATION
from trainwarden.budget import storage as st
from trainwarden.budget.holding import HOLD_LEASE, RENEW_BEFORE
from trainwarden.cache.cluster import CLAIMS, ClusterCache
from trainwarden.core.accounting import Usage
from trainwarden.core.budgets import Level, Limits, level, percent_used
from trainwarden.core.claims import ClaimFacts
from trainwarden.core.scope import in_namespaces, in_scope


def accounts(spec: TrainingBudgetSpec) -> bool:
    """Whether the budget accounts storage: a storage limit or a storage price."""
    lim = spec.limits
    priced = spec.rates is not None and bool(spec.rates.storage_gib_hour)
    return priced or lim.storage_gib_hours is not None or bool(lim.storage_gib_hours_by_class)


def prices(spec: TrainingBudgetSpec) -> dict[str, float]:
    rates = spec.rates.storage_gib_hour if spec.rates is not None else []
    return {r.storage_class: r.price for r in rates}


def named_classes(spec: TrainingBudgetSpec) -> frozenset[str]:
    """Classes the spec names: never folded into "(other)"."""
    return frozenset(spec.limits.storage_gib_hours_by_class) | frozenset(prices(spec))


def in_budget(spec: TrainingBudgetSpec, cache: ClusterCache, c: ClaimFacts) -> bool:
    """A claim is in a budget's scope by the pods' rule (core/scope.py `in_scope`): its
    namespace, and the scope's label selector on the claim's labels; the budget label is
    honoured only through them."""
    return in_scope(spec.scope, c.namespace, cache.namespace_labels(c.namespace), c.labels)


def claims(spec: TrainingBudgetSpec, cache: ClusterCache) -> tuple[list[ClaimFacts], list[st.Gone]]:
    """The live claims in scope, and those seen gone lately (cache/cluster.py)."""
    live = [
        c
        for ns in list(cache.claims_by_namespace)
        if in_namespaces(spec.scope, ns, cache.namespace_labels(ns))
        for c in cache.claims_in(ns)
        if in_budget(spec, cache, c)
    ]
    gone = [(c, end) for c, end in cache.claims_gone_now() if in_budget(spec, cache, c)]
    return live, gone


def _elsewhere(
    ledger: st.StorageLedger,
    cache: ClusterCache,
    live: list[ClaimFacts],
    gone: list[st.Gone],
    now: float,
) -> list[st.Gone]:
    """The claims this ledger charged that the cache holds out of scope now (relabelled,
    or their namespace): their watermark moves on uncharged (budget/storage.py)."""
    inside = {c.uid for c in live} | {c.uid for c, _ in gone}
    held = [(c, now) for c in map(cache.claims.get, ledger.charged_to) if c is not None]
    held += [g for g in cache.claims_gone_now() if g[0].uid in ledger.charged_to]
    return [(c, end) for c, end in held if c.uid not in inside]


@dataclass(frozen=True)
class StorageView:
    usage: st.StorageUsage
    cost: float
    percent: float
    dimension: str
    level: Level
    current: bool
    """The cache's claims were current: the ledger was advanced to now."""


def advance(
    spec: TrainingBudgetSpec,
    ledger: st.StorageLedger,
    cache: ClusterCache,
    *,
    period_start: float,
    now: float,
) -> tuple[st.StorageLedger, st.StorageUsage, bool]:
    """The ledger charged to `now`, the window's usage, and whether the claims were
    current: while the claims' watch is interrupted nothing is charged (the watermark
    stays), and the claims are charged from it once they are listed again."""
    window = spec.period.window
    rolling = window.total_seconds() if spec.period.type == "Rolling" and window else None
    live, gone = claims(spec, cache)
    current = cache.claims_watch.current(CLAIMS)
    if current:
        keep = named_classes(spec)
        elsewhere = _elsewhere(ledger, cache, live, gone, now)
        ledger = st.advance(
            ledger,
            live,
            gone,
            period_start=period_start,
            now=now,
            rolling=rolling,
            keep=keep,
            elsewhere=elsewhere,
        )
    return ledger, st.usage(ledger, live, now, rolling), current


def judge(
    spec: TrainingBudgetSpec,
    limits: Limits,
    pods: Usage,
    usage: st.StorageUsage,
    *,
    current: bool,
) -> StorageView:
    """The storage limits and the cost limit (storage's cost included) against usage."""
    cost = st.cost(usage.by_class, prices(spec))
    combined = pods + Usage(cost=cost)
    dims = limits.dimensions(combined, usage.by_class)
    storage_limits = Limits(
        cost=limits.cost,
        storage_gib_hours=limits.storage_gib_hours,
        storage_gib_hours_by_class=limits.storage_gib_hours_by_class,
    )
    pct, dim = percent_used(combined, storage_limits, usage.by_class) if dims else (0.0, "")
    lvl = level(pct, spec.thresholds.warn, spec.thresholds.enforce)
    return StorageView(usage, cost, pct, dim, lvl, current)


def cost_rate(view: StorageView, spec: TrainingBudgetSpec) -> Usage:
    """Storage's cost per hour at the claims' requests now (what the cost limit burns)."""
    return Usage(cost=st.cost(view.usage.requested, prices(spec)))


def wakes(
    view: StorageView, spec: TrainingBudgetSpec, limits: Limits, now: datetime
) -> list[datetime]:
    """When the storage limits reach the warn and enforce thresholds at the claims'
    requests now: the budget is evaluated then (a claim changing is seen at the resync)."""
    dims = limits.dimensions(Usage(), view.usage.by_class)
    found = []
    for percent in (spec.thresholds.warn, spec.thresholds.enforce):
        storage = {k: (limit, percent) for k, (_, limit) in dims.items() if k.startswith("storage")}
        hours = st.crossing(view.usage.by_class, view.usage.requested, storage)
        if hours is not None and hours * 3600 < MAX_DURATION.total_seconds():
            found.append(now + timedelta(hours=hours))
    return found


def refusal(
    view: StorageView,
    spec: TrainingBudgetSpec,
    previous: StorageAdmission | None,
    *,
    now: datetime,
    period_end: datetime | None,
    generation: int,
) -> StorageAdmission | None:
    """What the webhook refuses claims by: a lease renewed as the hold's is
    (budget/holding.py), never past the period's end."""
    if view.level != "Exhausted":
        return None
    until = previous.refuse_until if previous is not None and previous.refusing else None
    if until is None or until - now < RENEW_BEFORE or until > now + HOLD_LEASE:
        until = now.replace(microsecond=0) + HOLD_LEASE
    if period_end is not None:
        until = min(until, period_end)
    # No figure that moves with the clock: a new message each evaluation would be a
    # status write each evaluation (the webhook reads the figures from status.storage).
    message = f"{view.dimension} at or past {spec.thresholds.enforce}% of its limit"
    return StorageAdmission(
        refusing=True, refuse_until=until, message=message[:256], observed_generation=generation
    )


def _time(t: float) -> datetime:
    return datetime.fromtimestamp(t, UTC)


def status_of(ledger: st.StorageLedger, view: StorageView) -> StorageStatus:
    """Status shows the window's figures and keeps the ledger's watermark (and, Rolling,
    its buckets): what a restart charges from."""
    u = view.usage
    ranked = sorted(u.by_class.items(), key=lambda kv: (-kv[1], kv[0]))
    return StorageStatus(
        observed_at=_time(ledger.observed_at) if ledger.observed_at is not None else None,
        used_gib_hours=round(u.total, 6),
        requested_gib=round(u.requested_gib, 6),
        claims=u.claims,
        cost=round(view.cost, 6),
        by_class={k: round(v, 6) for k, v in ranked},
        buckets=[StorageBucket(start=_time(s), used_gib_hours=v) for s, v in ledger.buckets],
    )


def ledger_from(old: TrainingBudgetStatus) -> st.StorageLedger:
    """The ledger an earlier process wrote (its watermark and figures); none, or one
    without a watermark, starts the period from nothing. A Rolling window's classes
    were shown for the window: they are scaled back to the retained buckets."""
    s = old.storage
    start = old.period_start.timestamp() if old.period_start is not None else None
    if s is None or s.observed_at is None or start is None:
        return st.StorageLedger()
    buckets = tuple((b.start.timestamp(), b.used_gib_hours) for b in s.buckets)
    by_class = dict(s.by_class)
    if buckets:
        by_class = st.scaled(by_class, sum(v for _, v in buckets))
    return st.StorageLedger(
        observed_at=s.observed_at.timestamp(),
        period_start=start,
        by_class=by_class,
        buckets=buckets,
        since=s.observed_at.timestamp(),
    )
