"""The budget controller: a budget is evaluated when a pod it charges changes, when its
forecast, grace period or period end is due, and at least every resync."""

from collections.abc import Callable
from datetime import datetime

from trainwarden.adapters.kube import JSON, Kube
from trainwarden.adapters.prometheus import AcceleratorSeries, Busy
from trainwarden.api.v1alpha1.budget import TrainingBudgetSpec
from trainwarden.api.v1alpha1.names import BUDGET_KIND
from trainwarden.api.v1alpha1.validation import parse_spec
from trainwarden.budget.decide import Memory
from trainwarden.budget.holds import HeldIndex
from trainwarden.budget.labels import LabelReporter
from trainwarden.budget.reconcile import Sources, reconcile
from trainwarden.cache.budgets import BudgetIndex
from trainwarden.cache.cluster import ClusterCache
from trainwarden.controllers.base import COALESCE, Clock, PolicyController, utcnow
from trainwarden.core.admission import BudgetView, budget_view


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
        own: Callable[[], frozenset[str]] = frozenset,
    ) -> None:
        super().__init__(kube, cache, instance=instance, workers=workers, clock=clock)
        self.series = series
        """Where pods that came and went while no operator ran are seen (Prometheus)."""
        self.busy = busy
        """What the accelerators did, for the budgets' efficiency (Prometheus)."""
        self.doubt = doubt
        """Why the clock cannot be trusted to act on now (clock.ServerClock.doubt)."""
        self.own = own
        """The uids of the operator's own Jobs (pruners), which no budget suspends."""
        self.index = BudgetIndex(cache, self._dirty, clock)
        self.labels = LabelReporter(kube, cache, self.index)
        self.holds = HeldIndex(self._dirty)
        cache.subscribe(self.index)
        cache.subscribe(self.labels)
        cache.subscribe(self.holds)
        self.listeners: list[Callable[[], None]] = []
        """Told after any budget event (spec or status): Kueue's check decides again."""
        self.spec_listeners: list[Callable[[], None]] = []
        """Told after a budget's spec (so what it charges) changed: runs are found again."""

    def policy_event(self, event: str | None, body: JSON) -> None:
        super().policy_event(event, body)
        for listener in self.listeners:
            listener()

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
            self.index.set_budget(name, spec)
        self.labels.budgets_changed()
        for listener in self.spec_listeners:
            listener()

    async def evaluate(self, name: str, body: JSON, now: datetime) -> datetime:
        members = self.index.budgets.get(name)
        memory = self.memory[name]
        sources = Sources(
            series=self.series,
            busy=self.busy,
            doubt=self.doubt(),
            own=self.own(),
            held=self.holds.held(
                name, members.spec.scope if members else None, self.cache.namespace_labels
            ),
            others=self.views,
        )
        return await reconcile(body, members, self.cache, self.kube, memory, now, sources)

    def views(self) -> list[BudgetView]:
        """Every budget of this instance as its status says."""
        return [v for body in self.policies.values() if (v := budget_view(body)) is not None]
