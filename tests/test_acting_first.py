"""Issue 30 item 3: a budget's suspension goes ahead of the writes that only report it.
Before its suspend request a budget asks only what the suspension needs (its record in
status, enforce.py; the Job as it is now); the Events of the thresholds it crossed, its
status and its BudgetUsage come after. And once it has acted, those writes go on without
its worker: a second acting budget queued behind it suspends while the first's writes
are still on their way, while the first's next evaluation waits for them."""

import asyncio
from collections.abc import Callable
from typing import Any

from fakekube import FakeKube
from trainwarden.budget.controller import BudgetController
from trainwarden.testing.builders import BudgetBuilder, JobBuilder, NamespaceBuilder, PodBuilder
from world import World

Request = tuple[str, str, str, str]
"""(verb, kind, namespace, name); an Event's kind is its reason, its name the object's."""


class Requests:
    """The fake API's requests in the order asked; a request `slow` matches waits for
    `gate` first (a round trip that has not come back)."""

    def __init__(self, fake: FakeKube, slow: Callable[[Request], bool]) -> None:
        self.log: list[Request] = []
        self.asked = asyncio.Event()
        """Set at each request logged."""
        self.gate = asyncio.Event()
        self.slow = slow
        for verb in ("get", "list", "create", "merge_patch", "apply", "delete", "event"):
            setattr(fake, verb, self._logged(verb, getattr(fake, verb)))

    def _logged(self, verb: str, call: Any) -> Any:
        async def logged(*args: Any, **kwargs: Any) -> Any:
            request = self.describe(verb, args, kwargs)
            if self.slow(request):
                await self.gate.wait()
            self.log.append(request)
            self.asked.set()
            return await call(*args, **kwargs)

        return logged

    @staticmethod
    def describe(verb: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Request:
        if isinstance(args[0], dict):  # an Event, create, apply: about an object
            meta = args[0]["metadata"]
            kind = kwargs["reason"] if verb == "event" else args[0]["kind"]
            return verb, kind, meta.get("namespace") or "", meta.get("name") or ""
        subresource = kwargs.get("subresource")
        kind = args[1] + (f"/{subresource}" if subresource else "")
        return verb, kind, args[2] or "", args[3] if len(args) > 3 else ""

    async def until(self, asked: Callable[[list[Request]], bool], within: float = 5) -> None:
        """Wait until the requests logged satisfy `asked` (TimeoutError after `within`)."""
        async with asyncio.timeout(within):
            while not asked(self.log):
                self.asked.clear()
                await self.asked.wait()


def crossing(world: World, names: list[str]) -> BudgetController:
    """Budgets of 2 accelerator-hours, each over a namespace of its own where a Job runs
    8 accelerators; evaluated once, then 20 minutes on: past their crossing."""
    c = BudgetController(world.fake, world.cache, clock=world.clock, workers=1)
    world.cache.listeners.add(c.index, c.holds, c.labels)  # as runtime.wire does
    for name in names:
        world.put(NamespaceBuilder(name).build())
        job = world.put(JobBuilder(f"train-{name}", name).gpus(8).build())
        pod = PodBuilder(f"train-{name}-0", name).gpus(8).owned_by(job).started(world.now)
        world.put(pod.build())
        budget = BudgetBuilder(name).namespaces(name).accelerator_hours(2).enforce().grace("0s")
        c.policy_event("ADDED", world.put(budget.build()))
    return c


SUSPEND_A = ("merge_patch", "Job", "a", "train-a")
SUSPEND_B = ("merge_patch", "Job", "b", "train-b")


def test_before_its_suspend_request_a_budget_asks_only_what_the_suspension_needs() -> None:
    """Before, the Events of the thresholds crossed (BudgetWarning, BudgetExhausted)
    were two round trips ahead of the suspension."""

    async def scenario() -> None:
        world = World()
        c = crossing(world, ["a"])
        await c._evaluate("a")
        world.advance(20 * 60)
        requests = Requests(world.fake, lambda _: False)
        await c._evaluate("a")
        log = requests.log
        first = log.index(SUSPEND_A)
        assert log[:first] == [
            ("merge_patch", "TrainingBudget/status", "", "a"),  # the record first (enforce.py)
            ("get", "Job", "a", "train-a"),  # the Job as it is now
        ]
        after = [r[:2] for r in log[first + 1 :]]
        assert ("event", "BudgetExhausted") in after
        assert ("create", "BudgetUsage") in after

    asyncio.run(scenario())


def test_a_second_acting_budget_does_not_wait_for_the_first_ones_reports() -> None:
    """One worker, two budgets past their crossing. Once the first has suspended its
    Job (and said so in its Events), none of its requests (the thresholds' Events,
    status, BudgetUsage) comes back until the second has suspended too: before, the
    worker waited for them, so the second was never evaluated (TimeoutError). The
    first's next evaluation waits for its own writes: its key stays busy until then."""

    async def scenario() -> None:
        world = World()
        c = crossing(world, ["a", "b"])
        for name in ("a", "b"):
            await c._evaluate(name)
        world.advance(20 * 60)

        def reports_a(r: Request) -> bool:
            """What follows a's suspension and its own Events (enforce.py, the act)."""
            acting = r[1] in ("SuspendedByBudget", "Suspended")
            return SUSPEND_A in requests.log and "a" in (r[2], r[3]) and not acting

        requests = Requests(world.fake, reports_a)
        ready = asyncio.Event()
        ready.set()
        runner = asyncio.create_task(c.run(ready))
        try:
            await requests.until(lambda log: SUSPEND_B in log)
            assert requests.log.index(SUSPEND_A) < requests.log.index(SUSPEND_B)
            status = ("merge_patch", "TrainingBudget/status")
            records = [r[3] for r in requests.log if r[:2] == status]
            assert records == ["a", "b"], "each budget's record, nothing more"
            c.queue.add("a")
            assert "a" not in c.queue.take_due(), "evaluated again before its writes"
            requests.gate.set()
            usage_a = ("create", "BudgetUsage", "a")
            await requests.until(lambda log: usage_a in [r[:3] for r in log])
        finally:
            runner.cancel()
            await asyncio.gather(runner, return_exceptions=True)
        assert ("event", "BudgetExhausted", "", "a") in requests.log, "the first's reports"
        assert world.read("batch/v1", "Job", "b", "train-b")["spec"]["suspend"] is True

    asyncio.run(scenario())
