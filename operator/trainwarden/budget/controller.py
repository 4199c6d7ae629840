"""The budget controller: a budget is evaluated when a pod it charges changes, when its
forecast, grace period or period end is due, and at least every resync."""

import functools
from collections.abc import Callable
from datetime import datetime

from trainwarden import logs
from trainwarden.adapters.kube import JSON, Kube
from trainwarden.adapters.prometheus import AcceleratorSeries, Busy, NodePriceSource
from trainwarden.api.v1alpha1.budget import TrainingBudgetSpec
from trainwarden.api.v1alpha1.names import BUDGET_KIND
from trainwarden.api.v1alpha1.validation import parse_spec
from trainwarden.budget import departure
from trainwarden.budget.decide import Memory
from trainwarden.budget.holds import HeldIndex
from trainwarden.budget.labels import LabelReporter
from trainwarden.budget.prices import PriceBook, source_of
from trainwarden.budget.reconcile import Sources, reconcile
from trainwarden.cache.budgets import BudgetIndex, Members
from trainwarden.cache.cluster import ClusterCache
from trainwarden.cache.listeners import Listeners
from trainwarden.controllers.base import COALESCE, Clock, PolicyController, utcnow
from trainwarden.controllers.links import Links
from trainwarden.core.admission import BudgetView, budget_view

log = logs.get(__name__)


class BudgetController(PolicyController[Memory]):
    kind = BUDGET_KIND

    def __init__(
        self,
        kube: Kube,
        cache: ClusterCache,
        *,
        instance: str | None = None,
        workers: int = 8,
        clock: Clock = utcnow,
        series: AcceleratorSeries | None = None,
        busy: Busy | None = None,
        doubt: Callable[[], str | None] = lambda: None,
        links: Links | None = None,
        prices: NodePriceSource | None = None,
    ) -> None:
        super().__init__(kube, cache, instance=instance, workers=workers, clock=clock)
        self.series = series
        """Where pods that came and went while no operator ran are seen (Prometheus)."""
        self.busy = busy
        """What the accelerators did, for the budgets' efficiency (Prometheus)."""
        self.doubt = doubt
        """Why the clock cannot be trusted to act on now (clock.ServerClock.doubt)."""
        self.links = links or Links()
        """Read: `pruner_jobs` (the operator's own Jobs, which no budget suspends).
        Published: `budget_views` (runtime.py `wire`)."""
        self.book = PriceBook(prices)
        """Per-node prices for the budgets that read them (spec.rates.acceleratorHourFrom)."""
        self.index = BudgetIndex(cache, self._dirty, clock)
        self.labels = LabelReporter(kube, cache, self.index)
        self.holds = HeldIndex(self._dirty)
        """The index, the label reporter and the held index listen to the cache; runtime.py
        `wire` subscribes them (in that order, with the others)."""
        self.listeners: Listeners[Callable[[], None]] = Listeners("budgets")
        """Told after any budget event (spec or status): what budgets allow may differ."""
        self.spec_listeners: Listeners[Callable[[], None]] = Listeners("budget specs")
        """Told after a budget's spec (so what it charges) changed."""

    def policy_event(self, event: str | None, body: JSON) -> None:
        super().policy_event(event, body)
        self.listeners.notify(lambda listener: listener())

    def new_memory(self) -> Memory:
        return Memory()

    def _dirty(self, name: str) -> None:
        if name in self.policies:
            self.queue.add(name, COALESCE)

    def spec_changed(self, name: str, body: JSON | None) -> None:
        spec = parse_spec(TrainingBudgetSpec, (body or {}).get("spec") or {})
        if body is None or isinstance(spec, list):
            self.index.forget_budget(name)  # an invalid budget charges nothing
        else:
            self.index.set_budget(name, spec, self.book.known(spec, self.clock()))
        self.book.keep_only(m.spec for m in self.index.budgets.values())
        self.labels.budgets_changed()
        self.spec_listeners.notify(lambda listener: listener())

    async def evaluate(self, name: str, body: JSON, now: datetime) -> datetime:
        members = await self._priced(name, now)
        memory = self.memory[name]
        sources = Sources(
            series=self.series,
            busy=self.busy,
            doubt=self.doubt(),
            own=self.links.pruner_jobs.pruner_uids(),
            held=self.holds.held(
                name, members.spec.scope if members else None, self.cache.namespace_labels
            ),
            others=self.budget_views,
            instance=self.instance,
            prices=self.book.report(
                members.spec, members.prices, members.facts.values(), self.cache.node_labels, now
            )
            if members
            else None,
            acted=functools.partial(self.hand_off, name),
        )
        return await reconcile(body, members, self.cache, self.kube, memory, now, sources)

    async def _priced(self, name: str, now: datetime) -> Members | None:
        """The budget's members, charged at its query's current prices (read again when
        due): a new answer, or one gone stale, re-prices its running pods."""
        members = self.index.budgets.get(name)
        if members is None or source_of(members.spec) is None:
            return members
        await self.book.refresh(members.spec, now)
        wanted = self.book.known(members.spec, now)
        if members.prices.nodes is not wanted:
            self.index.set_budget(name, members.spec, wanted)
        return self.index.budgets.get(name)

    async def release(self, name: str, body: JSON, now: datetime) -> bool:
        """A deleted budget's holds started or handed over, its suspensions resumed or
        handed over (budget/departure.py); a budget of the same name created since keeps
        the holds that name it."""
        held = [] if name in self.policies else list(self.holds.by_budget.get(name, {}).values())
        d = departure.Departure(self.kube, self.cache, body, held, self.budget_views, now)
        out = await departure.release(d)
        log.info(
            "deleted budget released",
            policy=f"{self.kind}/{name}",
            started=out.started,
            resumed=out.resumed,
            handed_over=out.handed_over,
            left=out.left,
            pending=out.lines[:10],
        )
        return out.left == 0

    def budget_views(self) -> list[BudgetView]:
        """The `budget_views` link: every budget of this instance as its status says."""
        return [v for body in self.policies.values() if (v := budget_view(body)) is not None]
