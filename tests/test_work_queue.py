"""The controllers' work queue: a burst of requests for one policy is one evaluation, the
earliest request wins, a policy being evaluated is never handed to a second worker (a
request meanwhile waits for `done`), a forgotten policy is not evaluated, and a failing
key backs off on its own schedule without delaying any other.

No wall time: the properties run on a clock of their own (`WorkQueue(now=...)`); the
others compare what is due with what is far in the future, and a waiting worker is woken
by a request (tasks run in the order they were created)."""

import asyncio

from hypothesis import given, settings
from hypothesis import strategies as st

from trainwarden.controllers.queue import BACKOFF_BASE, BACKOFF_CAP, STARVED, WorkQueue, backoff

LATER = 3600.0
"""Seconds: never due within a test."""


def test_a_burst_of_requests_is_one_evaluation_at_the_earliest_time() -> None:
    async def scenario() -> None:
        q = WorkQueue()
        q.add("a", LATER)
        q.add("a")  # sooner: wins
        q.add("a", LATER)  # later: ignored
        q.add("b", LATER)
        assert len(q) == 2
        assert await q.get() == "a"
        assert len(q) == 1, "a is handed out once; b is still waiting for its time"
        q.add("c")
        assert await q.get() == "c", "b is not due yet"

    asyncio.run(scenario())


def test_keys_are_served_in_the_order_they_fell_due() -> None:
    """A negative delay is "now", not the past: it does not jump the queue."""

    async def scenario() -> None:
        q = WorkQueue()
        q.add("a", 0)
        q.add("b", -LATER)
        q.add("c", 0)
        assert [await q.get() for _ in range(3)] == ["a", "b", "c"]

    asyncio.run(scenario())


def test_a_busy_key_is_not_handed_out_again_until_done() -> None:
    async def scenario() -> None:
        q = WorkQueue()
        q.add("a")
        assert await q.get() == "a"
        q.add("a")  # a change while "a" is being evaluated
        q.add("a", LATER)
        q.add("b")
        assert len(q) == 2
        assert await q.get() == "b", "a is busy: not given to a second worker"
        q.done("a")
        assert await q.get() == "a", "the request made meanwhile is served after done"
        q.done("a")
        q.done("b")
        assert len(q) == 0

    asyncio.run(scenario())


def test_done_keeps_the_sooner_of_two_requests() -> None:
    """A request from before the evaluation (later) and one during it (now): after done,
    the key is due now."""

    async def scenario() -> None:
        q = WorkQueue()
        q.add("a")
        assert await q.get() == "a"
        q.add("a")
        q.done("a")
        q.add("b", LATER)
        assert await q.get() == "a"

    asyncio.run(scenario())


def test_a_forgotten_key_is_not_evaluated() -> None:
    """A deleted policy: neither its pending request nor one made while it was being
    evaluated comes back."""

    async def scenario() -> None:
        q = WorkQueue()
        q.add("busy")
        assert await q.get() == "busy"
        q.add("busy")
        q.add("gone")
        q.forget("gone")
        q.forget("busy")
        q.done("busy")
        assert len(q) == 0
        q.add("next")
        assert await q.get() == "next"

    asyncio.run(scenario())


def test_a_waiting_worker_wakes_up_for_a_new_request() -> None:
    async def scenario() -> None:
        q = WorkQueue()
        q.add("later", LATER)

        async def request() -> None:
            q.add("now")

        getter = asyncio.create_task(q.get())  # runs first: finds nothing due, waits
        requester = asyncio.create_task(request())
        got, _ = await asyncio.gather(getter, requester)
        assert got == "now"
        assert len(q) == 1

    asyncio.run(scenario())


def test_a_worker_waiting_on_nothing_wakes_up_when_a_busy_key_is_done() -> None:
    async def scenario() -> None:
        q = WorkQueue()
        q.add("a")
        assert await q.get() == "a"
        q.add("a")

        async def finish() -> None:
            q.done("a")

        getter = asyncio.create_task(q.get())  # nothing due: waits without a timeout
        finisher = asyncio.create_task(finish())
        got, _ = await asyncio.gather(getter, finisher)
        assert got == "a"

    asyncio.run(scenario())


@settings(max_examples=1000, deadline=None)
@given(st.integers(min_value=1, max_value=10_000))
def test_the_retry_schedule_doubles_from_the_base_up_to_the_cap(failures: int) -> None:
    delay = backoff(failures)
    assert BACKOFF_BASE <= delay <= BACKOFF_CAP
    assert delay == min(BACKOFF_CAP, BACKOFF_BASE * 2 ** min(failures - 1, 64))
    assert backoff(failures + 1) == min(BACKOFF_CAP, 2 * delay), "doubles until capped"


KEYS = st.sampled_from(["a", "b", "c", "d"])
STEPS = st.lists(
    st.one_of(
        st.tuples(st.just("add"), KEYS, st.floats(min_value=0, max_value=500)),
        st.tuples(st.just("fail"), KEYS, st.just(0.0)),
        st.tuples(st.just("succeed"), KEYS, st.just(0.0)),
        st.tuples(st.just("forget"), KEYS, st.just(0.0)),
        st.tuples(st.just("wait"), KEYS, st.floats(min_value=0, max_value=200)),
    ),
    max_size=60,
)


@settings(max_examples=1000, deadline=None)
@given(STEPS)
def test_a_failing_key_never_delays_another_key(steps: list[tuple[str, str, float]]) -> None:
    """Whatever keys fail, how often, and in what order: every request is handed out by
    the time it asked for (a failing key's retry is only its own request); each key's
    failures count from its last success, and only keys that failed since are kept."""
    clock = [0.0]
    q = WorkQueue(now=lambda: clock[0])
    asked: dict[str, float] = {}  # the earliest time each pending key asked for
    failures: dict[str, int] = {}
    for op, key, value in steps:
        if op == "add" or op == "fail":
            delay = value if op == "add" else q.failed(key)
            if op == "fail":
                failures[key] = failures.get(key, 0) + 1
                assert delay == backoff(failures[key])
            q.add(key, delay)
            asked[key] = min(asked.get(key, float("inf")), clock[0] + delay)
        elif op == "succeed":
            q.succeeded(key)
            failures.pop(key, None)
        elif op == "forget":
            q.forget(key)
            asked.pop(key, None)
            failures.pop(key, None)
        else:
            clock[0] += value
            taken = q.take_due()
            for got in taken:
                q.done(got)
                assert asked.pop(got) <= clock[0], "never handed out before its time"
            late = {k for k, at in asked.items() if at <= clock[0]}
            assert not late, f"{late} due at {clock[0]} but not handed out"
        assert {k: q.failures(k) for k in "abcd" if q.failures(k)} == failures


def test_a_key_that_may_act_is_taken_before_the_routine_keys_due_before_it() -> None:
    """100 routine evaluations fell due (a burst of pod events) a moment before a budget
    crossed its forecast: the budget is taken first, not 101st. Its urgency is asked when
    it is due: a key that was routine when added may act by then."""
    clock = [0.0]
    acting: set[str] = set()

    async def scenario() -> None:
        q = WorkQueue(now=lambda: clock[0], urgent=acting.__contains__)
        for i in range(100):
            q.add(f"routine-{i}", 1.0)
        q.add("crossing", 2.0)
        q.add("later", 10.0)
        acting.update({"crossing", "later"})
        clock[0] = 5.0
        assert await q.get() == "crossing"
        assert await q.get() == "routine-0", "then the others, in the order they fell due"
        acting.discard("crossing")
        q.add("crossing")
        assert await q.get() == "routine-1", "no longer acting: back in line"

    asyncio.run(scenario())


@settings(max_examples=1000, deadline=None)
@given(
    st.lists(st.tuples(st.sampled_from("abcdef"), st.floats(6, 10)), min_size=1, max_size=12),
    st.sets(st.sampled_from("abcdef")),
)
def test_the_keys_due_are_taken_urgent_first_each_in_the_order_it_fell_due(
    adds: list[tuple[str, float]], urgent: set[str]
) -> None:
    """Every key due less than STARVED ago (taken at 10 s, due from 6 s)."""
    clock = [0.0]

    async def scenario() -> list[str]:
        q = WorkQueue(now=lambda: clock[0], urgent=urgent.__contains__)
        for key, delay in adds:
            q.add(key, delay)
        clock[0] = 10.0
        return [await q.get() for _ in range(len(q))]

    due: dict[str, float] = {}
    for key, delay in adds:
        due[key] = min(due.get(key, delay), delay)
    taken = asyncio.run(scenario())
    assert sorted(taken) == sorted(due)
    lanes = [k in urgent for k in taken]
    assert lanes == sorted(lanes, reverse=True), "an urgent key after a routine one"
    for lane in (True, False):
        times = [due[k] for k in taken if (k in urgent) == lane]
        assert times == sorted(times)


def test_a_routine_key_waits_behind_urgent_ones_at_most_starved() -> None:
    """A budget that stays past its threshold is due again at every pod event: routine
    keys due STARVED ago go first again, so they are never kept waiting for good."""
    clock = [0.0]

    async def scenario() -> None:
        q = WorkQueue(now=lambda: clock[0], urgent=lambda key: key.startswith("acting"))
        q.add("routine", 0.0)
        q.add("acting-0", 1.0)
        clock[0] = 1.0
        assert await q.get() == "acting-0"
        q.add("acting-1")
        clock[0] = STARVED
        assert await q.get() == "routine", "due STARVED ago: its turn"
        assert await q.get() == "acting-1"

    asyncio.run(scenario())
