"""What a budget starts of its held work, against the fake API server (issue 25): only its
own (a `held-by` mark elsewhere is a claim, not a place in its queue), oldest by the API
server's clock, the ones that fit first whatever does not, and never more than it has left
once what it started before is counted, across evaluations and restarts."""

from datetime import datetime, timedelta

import pytest

from test_holds import NS, TB, Budgets, held_job, spend, started, team
from trainwarden.api.v1alpha1.budget_status import MAX_RELEASED
from trainwarden.api.v1alpha1.names import EXPECTED_DURATION, HELD_AT, HELD_BY
from trainwarden.budget.decide import Memory
from trainwarden.testing.builders import JobBuilder, NamespaceBuilder, PodBuilder
from world import JSON, World

FORGED = {HELD_AT: "1970-01-01T00:00:00Z", EXPECTED_DURATION: "36500d"}


class Killed(Exception):
    """The process died here (nothing in the reconciler catches it)."""


@pytest.fixture
def world() -> World:
    w = World()
    w.put(NamespaceBuilder(NS).build())
    return w


def declared(minutes: int) -> dict[str, str]:
    return {EXPECTED_DURATION: f"{minutes}m"}


def runs(world: World, job: str, since: datetime) -> None:
    """The Job's one-GPU pod, running since `since` (as the Job controller would start it)."""
    owner = world.read("batch/v1", "Job", NS, job)
    world.put(PodBuilder(f"{job}-0", NS).gpus(1).owned_by(owner).started(since).build())


def finishes(world: World, job: str, since: datetime, at: datetime) -> None:
    """The Job's pod ended at `at` and the Job completed."""
    owner = world.read("batch/v1", "Job", NS, job)
    uid = world.read("v1", "Pod", NS, f"{job}-0")["metadata"]["uid"]  # the same pod, ended
    pod = PodBuilder(f"{job}-0", NS).gpus(1).owned_by(owner).started(since).finished(at)
    world.put(pod.field("metadata.uid", uid).build())
    world.fake.edit(
        "batch/v1", "Job", NS, job, {"status": JobBuilder(job).succeeded(at).build()["status"]}
    )
    world.sync()


def released(budgets: Budgets) -> list[tuple[str, float]]:
    found = budgets.admission("b").get("released") or []
    return [(r["ref"]["name"], r["estimate"]["acceleratorHours"]) for r in found]


def pending(world: World) -> list[str]:
    return list(world.read(*TB, None, "b")["status"].get("pendingActions") or [])


def three_held(world: World) -> Budgets:
    """The review's case: 8 of 8.997 GPU-hours spent (0.997 left after a raise), then
    three held one-GPU Jobs declaring 30, 40 and 20 minutes (0.5, 0.667, 0.333): only the
    first and the third fit together."""
    spend(world, 8, 1)
    budgets = Budgets(world, team())
    for i, (name, minutes) in enumerate([("first", 30), ("second", 40), ("third", 20)]):
        at = world.now + timedelta(seconds=i)
        held_job(world, name, "b", at=at, gpus=1, marks=declared(minutes))
    budgets.raise_limit("b", 8.997)
    return budgets


# --- item 1: held work starved from another namespace ----------------------------------------


def test_held_marks_in_another_namespace_never_take_the_budgets_places(world: World) -> None:
    """Reproduced by a review: suspended Jobs in a namespace outside the budget's scope,
    marked by their owner `held-by: b`, `held-at: 1970`, 100 years declared, took every
    release place; the budget's own held Job did not start with 992 GPU-hours left."""
    world.put(NamespaceBuilder("team-x").build())
    spend(world, 8, 1)
    budgets = Budgets(world, team())
    held_job(world, "own", "b", at=world.now, gpus=1, marks=declared(60))
    for i in range(12):
        at = world.now + timedelta(seconds=1 + i)
        held_job(world, f"forged-{i}", "b", at=at, ns="team-x", marks=FORGED)
    budgets.evaluate("b")
    assert budgets.admission("b")["held"] == 1, "only its own counts"
    budgets.raise_limit("b", 1000)  # 992 left
    budgets.evaluate("b")
    assert started(world, "own"), "its own held Job starts at once"
    for i in range(12):
        forged = world.read("batch/v1", "Job", "team-x", f"forged-{i}")
        assert forged["spec"]["suspend"] is True
        assert forged["metadata"]["annotations"][HELD_BY] == "b"
    assert [e.reason for e in world.fake.events if e.namespace == "team-x"] == [], "no word there"
    assert not any("team-x" in line for line in pending(world))


def test_a_held_job_outside_the_budgets_selector_is_never_its_to_start(world: World) -> None:
    """In a namespace of the budget, but its pods not selected: the budget neither starts
    it (it is not the budget's) nor lets it take the place of its own."""
    spend(world, 8, 1)
    budgets = Budgets(world, team().selector({"team": "a"}).max_suspensions_per_minute(1))
    mine = {"team": "a"}
    held_job(world, "outsider", "b", at=world.now, gpus=1, marks=declared(10))
    held_job(world, "own", "b", at=world.now + timedelta(seconds=5), gpus=1, pod_labels=mine)
    budgets.raise_limit("b", 1000)
    budgets.evaluate("b")
    assert started(world, "own")
    assert world.read("batch/v1", "Job", NS, "outsider")["spec"]["suspend"] is True


def test_held_work_that_does_not_fit_takes_no_place_from_work_that_does(world: World) -> None:
    spend(world, 8, 1)
    budgets = Budgets(world, team().max_suspensions_per_minute(2))
    for i in range(3):  # older, and each far more than is left
        held_job(world, f"huge-{i}", "b", at=world.now + timedelta(seconds=i), marks=FORGED)
    held_job(world, "small", "b", at=world.now + timedelta(seconds=9), gpus=1, marks=declared(60))
    budgets.raise_limit("b", 20)  # 12 left
    budgets.evaluate("b")
    assert started(world, "small"), "the first that fits starts, whatever stands before it"
    assert not any(started(world, f"huge-{i}") for i in range(3))
    assert sum("its estimate needs more acceleratorHours" in line for line in pending(world)) == 3


def test_held_work_starts_in_the_order_it_was_created_not_the_held_at_it_claims(
    world: World,
) -> None:
    spend(world, 8, 1)
    budgets = Budgets(world, team().max_suspensions_per_minute(1))
    held_job(world, "first", "b", at=world.now, gpus=1, marks=declared(10))
    later = world.now + timedelta(seconds=10)
    claims = {**declared(10), HELD_AT: "1970-01-01T00:00:00Z"}
    held_job(world, "jumper", "b", at=later, gpus=1, marks=claims)
    budgets.raise_limit("b", 1000)
    budgets.evaluate("b")
    assert (started(world, "first"), started(world, "jumper")) == (True, False)


# --- item 2: releases overcommit what is left ----------------------------------------------------


def test_what_the_budget_started_stays_committed_across_evaluations(world: World) -> None:
    """Reproduced by a review: after a raise left 0.997 GPU-hours, three held Jobs of
    0.5, 0.667 and 0.333 all started within 120 ms: each evaluation counted from zero,
    and the started Jobs had used almost nothing yet."""
    budgets = three_held(world)
    budgets.evaluate("b")
    assert [started(world, n) for n in ("first", "second", "third")] == [True, False, True]
    world.advance(0.12)
    budgets.evaluate("b")
    assert not started(world, "second"), "the next evaluation counts what the first started"
    runs(world, "first", world.now)
    runs(world, "third", world.now)
    world.advance(600)  # ten minutes in: a third of `first` and half of `third` used
    budgets.evaluate("b")
    assert not started(world, "second")
    assert released(budgets) == [("first", 0.5), ("third", 0.333334)]
    why = [line for line in pending(world) if line.startswith("holding Job/team-a/second")]
    assert len(why) == 1, pending(world)
    assert "committed to work it started" in why[0]
    assert budgets.admission("b")["held"] == 1


def test_a_per_minute_cap_does_not_let_a_workload_that_does_not_fit_through_later(
    world: World,
) -> None:
    """With a cap of one a minute, the one that does not fit started a minute later."""
    spend(world, 8, 1)
    budgets = Budgets(world, team().max_suspensions_per_minute(1))
    for i, (name, minutes) in enumerate([("first", 30), ("second", 40), ("third", 20)]):
        held_job(
            world, name, "b", at=world.now + timedelta(seconds=i), gpus=1, marks=declared(minutes)
        )
    budgets.raise_limit("b", 8.997)
    for _ in range(3):
        budgets.evaluate("b")
        world.advance(61)
    assert [started(world, n) for n in ("first", "second", "third")] == [True, False, True]


def test_the_commitment_survives_a_restart(world: World) -> None:
    budgets = three_held(world)
    budgets.evaluate("b")
    budgets.memory["b"] = Memory()  # a new process: status is all that is left
    world.advance(5)
    budgets.evaluate("b")
    assert not started(world, "second")
    assert released(budgets) == [("first", 0.5), ("third", 0.333334)]


def test_work_that_finished_gives_back_what_it_did_not_use(world: World) -> None:
    budgets = three_held(world)
    begun = world.now
    budgets.evaluate("b")
    runs(world, "first", begun)
    runs(world, "third", begun)
    world.advance(360)
    budgets.evaluate("b")
    assert not started(world, "second")
    finishes(world, "first", begun, world.now)  # 0.1 of 0.5 used
    finishes(world, "third", begun, world.now)  # 0.1 of 0.333 used
    world.advance(1)
    budgets.evaluate("b")  # 0.797 left, nothing committed
    assert started(world, "second")
    assert released(budgets) == [("second", 0.666667)]


def test_killed_between_the_record_and_the_start_starts_once_and_records_once(
    world: World,
) -> None:
    budgets = three_held(world)
    world.fake.fail_next("patch", "Job", Killed("SIGKILL"), name="first")
    with pytest.raises(Killed):
        budgets.evaluate("b")
    world.sync()
    assert released(budgets) == [("first", 0.5), ("third", 0.333334)], "the record first"
    assert not any(started(world, n) for n in ("first", "second", "third"))
    budgets.memory["b"] = Memory()
    world.advance(2)
    budgets.evaluate("b")
    assert [started(world, n) for n in ("first", "second", "third")] == [True, False, True]
    assert released(budgets) == [("first", 0.5), ("third", 0.333334)], "one record each"
    starts = [w for w in world.fake.writes_to("Job", verb="patch") if w.outcome == "changed"]
    assert sorted(w.name for w in starts) == ["first", "third"]


def test_at_most_max_released_started_workloads_are_kept_committed(world: World) -> None:
    """Status stays bounded: one more declared workload waits until one of them ends."""
    spend(world, 8, 1)
    budgets = Budgets(world, team().max_suspensions_per_minute(1000))
    for i in range(MAX_RELEASED + 1):
        held_job(
            world, f"j{i:02d}", "b", at=world.now + timedelta(seconds=i), gpus=1, marks=declared(1)
        )
    budgets.raise_limit("b", 1000)
    budgets.evaluate("b")
    last = f"j{MAX_RELEASED:02d}"
    assert sum(started(world, f"j{i:02d}") for i in range(MAX_RELEASED + 1)) == MAX_RELEASED
    assert not started(world, last)
    assert any(line.startswith(f"holding Job/team-a/{last}") for line in pending(world))
    runs(world, "j00", world.now)
    finishes(world, "j00", world.now, world.now + timedelta(seconds=30))
    world.advance(31)
    budgets.evaluate("b")
    assert started(world, last)


def test_a_held_job_that_does_not_fit_is_read_again_only_once_it_changed(world: World) -> None:
    spend(world, 8, 1)
    budgets = Budgets(world, team())
    held_job(world, "huge", "b", at=world.now, marks=FORGED)
    budgets.raise_limit("b", 20)
    gets: list[str] = []
    real_get = world.fake.get

    async def counted(api_version: str, kind: str, namespace: str | None, name: str) -> JSON | None:
        gets.append(f"{kind}/{name}")
        return await real_get(api_version, kind, namespace, name)

    world.fake.get = counted  # type: ignore[method-assign]
    sync = world.sync
    world.sync = lambda: None  # type: ignore[method-assign]  # no event meanwhile
    for _ in range(3):
        budgets.evaluate("b")
        world.advance(10)
    assert gets.count("Job/huge") == 1
    world.fake.edit("batch/v1", "Job", NS, "huge", {"metadata": {"annotations": declared(10)}})
    sync()  # the change's event
    budgets.evaluate("b")
    assert gets.count("Job/huge") == 2
    assert world.read("batch/v1", "Job", NS, "huge")["spec"]["suspend"] is False, "now it fits"


# --- item 3's pattern: a clock stepped back holds nothing back ------------------------------------


def test_a_clock_stepped_back_holds_no_release_back_for_the_length_of_the_step(
    world: World,
) -> None:
    """A start stamped "in the future" (the server's clock then stepped back ten minutes)
    counts against the per-minute cap for a minute from now, not for eleven."""
    spend(world, 8, 1)
    budgets = Budgets(world, team().max_suspensions_per_minute(1))
    held_job(world, "first", "b", at=world.now, gpus=1, marks=declared(10))
    held_job(world, "second", "b", at=world.now + timedelta(seconds=1), gpus=1, marks=declared(10))
    budgets.raise_limit("b", 1000)
    budgets.evaluate("b")
    assert (started(world, "first"), started(world, "second")) == (True, False)
    world.now -= timedelta(minutes=10)
    budgets.evaluate("b")
    assert not started(world, "second"), "still one a minute"
    world.advance(61)
    budgets.evaluate("b")
    assert started(world, "second")
