"""Idle reclaim decisions: warnings recorded on pods, exemptions, leases, whole workloads, caps."""

from datetime import UTC, datetime, timedelta

from hypothesis import event, given, settings
from hypothesis import strategies as st

from trainwarden.api.v1alpha1.names import IDLE_RECLAIMED_AT, IDLE_WARNED_AT
from trainwarden.core import reclaim
from trainwarden.core.exemptions import Exemption
from trainwarden.core.idleness import IdleState, Observation

T0 = datetime(2026, 8, 1, tzinfo=UTC)
MINUTE = timedelta(minutes=1)
RULES = reclaim.Rules(
    threshold=5,
    window=timedelta(minutes=5),
    warmup=timedelta(minutes=2),
    grace=timedelta(minutes=3),
    step=timedelta(seconds=90),
)
IDLE = Observation("Idle", idle_since=T0 - timedelta(minutes=5))
BUSY = Observation("Busy")
UNKNOWN = Observation("Unknown")
NOT_EXEMPT = Exemption()
EXEMPT = Exemption("trainwarden.dev/exempt: true")


def pod(name: str = "p", group: str = "job-1", started: datetime = T0 - timedelta(hours=1)):  # type: ignore[no-untyped-def]
    return reclaim.PodView(f"uid-{name}", "ns", name, started, 2.0, group)


def judge(  # type: ignore[no-untyped-def]
    previous: IdleState | None,
    observation: Observation,
    now: datetime = T0,
    exemption: Exemption = NOT_EXEMPT,
    lease: timedelta | None = None,
    view: reclaim.PodView | None = None,
):
    return reclaim.judge(
        view or pod(), previous, observation, exemption, now=now, rules=RULES, lease=lease
    )


def marks_of(state: IdleState, **extra: str) -> dict[str, str]:
    marks = {k: v for k, v in reclaim.warning_marks(state, "irp").items() if v is not None}
    return {**marks, **extra}


def recorded(
    marks: dict[str, str], policy: str = "irp", *, notify_only: bool = False
) -> IdleState | None:
    started = T0 - timedelta(hours=1)
    return reclaim.recorded(marks, policy, now=T0, started=started, notify_only=notify_only)


def test_warning_marks_round_trip_and_belong_to_one_policy() -> None:
    warned = IdleState("Warned", T0 - timedelta(minutes=5), T0)
    marks = marks_of(warned)
    assert recorded(marks) == warned
    assert recorded(marks, "other") is None, "another policy's warning is not ours"
    assert recorded({**marks, IDLE_WARNED_AT: "yesterday"}) is None, "unreadable"
    assert set(reclaim.withdrawn_marks()) == set(reclaim.MARKS)


def test_marks_a_tenant_forged_cannot_postpone_or_prevent_a_reclaim() -> None:
    """Pod annotations are tenant-writable: a warning dated in the future would postpone
    the reclaim forever, a "reclaimed" mark on a running pod would exempt it for good."""
    warned = IdleState("Warned", T0 - timedelta(minutes=5), T0 - timedelta(minutes=1))
    future = marks_of(warned, **{IDLE_WARNED_AT: "2099-01-01T00:00:00+00:00"})
    assert recorded(future) is None
    before_start = marks_of(warned, **{IDLE_WARNED_AT: "2000-01-01T00:00:00+00:00"})
    assert recorded(before_start) is None
    done = marks_of(warned, **{IDLE_RECLAIMED_AT: T0.isoformat()})
    forged = recorded(done)
    assert forged is not None
    assert forged.state == "Warned", "a pod that still runs was not suspended or evicted"
    notified = recorded(done, notify_only=True)
    assert notified is not None
    assert notified.state == "Reclaimed", "NotifyOnly leaves the pod running: believed"


def test_under_enforce_a_warning_exists_only_on_the_pod() -> None:
    remembered = IdleState("Warned", T0, T0)
    assert reclaim.previous_state(remembered, None, enforce=True) is None, (
        "mark removed: warn again"
    )
    on_pod = IdleState("Warned", T0, T0 - MINUTE)
    assert reclaim.previous_state(remembered, on_pod, enforce=True) == on_pod
    suspect = IdleState("IdleSuspected", T0)
    assert reclaim.previous_state(suspect, None, enforce=True) == suspect
    assert reclaim.previous_state(remembered, None, enforce=False) == remembered


def test_warn_then_reclaim_after_the_grace_period() -> None:
    first = judge(None, IDLE)
    assert first.action == "Warn"
    assert "below 5% for 5m" in first.cause
    assert first.due == T0 + RULES.grace
    assert judge(first.state, IDLE, T0 + MINUTE).action is None
    assert judge(first.state, IDLE, T0 + RULES.grace).action == "Reclaim"


def test_exemptions_prevent_warnings_and_withdraw_given_ones() -> None:
    exempt = judge(None, IDLE, exemption=EXEMPT)
    assert exempt.action is None
    assert exempt.state.state == "Exempt"
    assert exempt.exemption == EXEMPT.reason
    warned = judge(None, IDLE).state
    later = judge(warned, IDLE, T0 + RULES.grace, exemption=EXEMPT)
    assert later.action == "Withdraw", "an exemption added during the grace period spares the pod"
    until = T0 + timedelta(hours=2)
    kept = judge(None, IDLE, exemption=Exemption("kept", until=until))
    assert kept.due == until, "look again when the acknowledgement runs out"


def test_a_lease_expires_busy_pods_too_but_only_at_its_end() -> None:
    started = T0 - timedelta(hours=72)
    view = pod(started=started)
    lease = timedelta(hours=72)
    verdict = judge(None, BUSY, lease=lease, view=view)
    assert verdict.action == "Warn"
    assert "lease of 3d expired" in verdict.cause
    young = pod(started=T0 - timedelta(hours=1))
    fresh = judge(None, BUSY, lease=lease, view=young)
    assert fresh.action is None
    assert fresh.due == young.started + lease


def test_suspicion_is_due_when_the_window_could_be_complete() -> None:
    since = T0 - MINUTE
    verdict = judge(None, Observation("Suspect", idle_since=since))
    assert verdict.state.state == "IdleSuspected"
    assert verdict.due == since + RULES.window + RULES.step


def reclaiming(view: reclaim.PodView, since: datetime = T0 - timedelta(minutes=10)):  # type: ignore[no-untyped-def]
    return view, reclaim.Verdict(IdleState("Reclaimed", since, since), "Reclaim", "idle")


def test_a_workload_is_reclaimed_only_when_all_of_it_is_due() -> None:
    busy = (pod("rank-1"), reclaim.Verdict(IdleState("Active", T0), None))
    decided = reclaim.plan(
        [reclaiming(pod("rank-0")), busy], per_workload=True, recent=[], max_per_minute=5, now=T0
    )
    assert decided.act == ()
    assert "1 of 2 pods" in decided.waiting[0][1]
    alone = reclaim.plan(
        [reclaiming(pod("rank-0")), busy], per_workload=False, recent=[], max_per_minute=5, now=T0
    )
    assert [r.pods[0].name for r in alone.act] == ["rank-0"], "Delete acts pod by pod"


def test_the_cap_counts_the_last_minute_and_takes_the_longest_idle_first() -> None:
    judged = [reclaiming(pod(f"p{i}", group=f"g{i}"), T0 - timedelta(minutes=i)) for i in range(4)]
    recent = [T0 - timedelta(seconds=30), T0 - timedelta(minutes=2)]
    decided = reclaim.plan(judged, per_workload=True, recent=recent, max_per_minute=3, now=T0)
    assert [r.group for r in decided.act] == ["g3", "g2"]
    assert [r.group for r in decided.deferred] == ["g1", "g0"]


def test_held_reclaims_stay_warned() -> None:
    state = IdleState("Reclaimed", T0, T0 - MINUTE)
    assert reclaim.held(state) == IdleState("Warned", T0, T0 - MINUTE)
    active = IdleState("Active", T0)
    assert reclaim.held(active) == active


def test_reclaimed_hours_stop_at_the_expected_end_and_the_horizon() -> None:
    hour = timedelta(hours=1)
    assert reclaim.reclaimed_hours(8, T0, None, hour) == 8
    assert reclaim.reclaimed_hours(8, T0, T0 + hour / 2, hour) == 4
    assert reclaim.reclaimed_hours(8, T0, T0 - hour, hour) == 0


# Mostly idle, so that histories reach the reclaims whose guards are under test.
steps = st.tuples(
    st.sampled_from([IDLE] * 6 + [BUSY, UNKNOWN, Observation("Suspect", idle_since=T0)]),
    st.sampled_from([False] * 5 + [True]),  # exempt at this evaluation
    st.sampled_from([True] * 3 + [False]),  # the action succeeds when tried
)


@settings(max_examples=500)
@given(st.lists(steps, min_size=12, max_size=60), st.integers(1, 3))
def test_invariants_of_a_simulated_controller(
    history: list[tuple[Observation, bool, bool]], cap: int
) -> None:
    """Drive judge -> plan -> held as the controller does, one evaluation a minute, for two
    pods of one workload and one bare pod: nothing is reclaimed unwarned, exempt, on
    missing data, before a full grace period, twice, or beyond the cap."""
    views = [pod("rank-0"), pod("rank-1"), pod("bare", group="uid-bare")]
    states: dict[str, IdleState | None] = {v.uid: None for v in views}
    warned_at: dict[str, datetime | None] = {v.uid: None for v in views}
    reclaimed: list[tuple[datetime, str]] = []
    actions: list[datetime] = []
    for i, (observation, exempt, succeeds) in enumerate(history):
        now = T0 + i * MINUTE
        judged = []
        for view in views:
            if any(uid == view.uid for _, uid in reclaimed):
                continue
            verdict = judge(
                states[view.uid], observation, now, EXEMPT if exempt else NOT_EXEMPT, view=view
            )
            judged.append((view, verdict))
            if verdict.action == "Warn":
                warned_at[view.uid] = now
            if verdict.action == "Withdraw":
                warned_at[view.uid] = None
            if verdict.action == "Reclaim":
                assert observation.verdict == "Idle", "missing data is never idleness"
                assert not exempt, "an exempt pod is never reclaimed"
                seen = warned_at[view.uid]
                assert seen is not None, "warned first"
                assert now >= seen + RULES.grace, "then a full grace period"
            states[view.uid] = verdict.state
        decided = reclaim.plan(
            judged, per_workload=True, recent=actions, max_per_minute=cap, now=now
        )
        for r, _ in decided.waiting:
            for p in r.pods:
                states[p.uid] = reclaim.held(states[p.uid])  # type: ignore[arg-type]
        for r in decided.deferred:
            for p in r.pods:
                states[p.uid] = reclaim.held(states[p.uid])  # type: ignore[arg-type]
        for r in decided.act:
            if succeeds:
                reclaimed += [(now, p.uid) for p in r.pods]
                actions.append(now)
            else:
                for p in r.pods:
                    states[p.uid] = reclaim.held(states[p.uid])  # type: ignore[arg-type]
        assert len([t for t in actions if t > now - MINUTE]) <= cap, "the per-minute cap"
    uids = [uid for _, uid in reclaimed]
    event(f"pods reclaimed: {len(uids)}")
    assert len(uids) == len(set(uids)), "a pod is reclaimed once"
    if "uid-rank-0" in uids or "uid-rank-1" in uids:
        assert {"uid-rank-0", "uid-rank-1"} <= set(uids), "a workload is reclaimed whole"


def test_idle_hours_count_only_observed_idle_time() -> None:
    warned = IdleState("Warned", T0 - timedelta(hours=1), T0)
    cap = timedelta(minutes=1)
    assert reclaim.idle_hours(4, warned, T0 - timedelta(seconds=30), T0, cap) == 4 * 30 / 3600
    assert reclaim.idle_hours(4, warned, T0 - timedelta(hours=2), T0, cap) == 4 * 60 / 3600, (
        "the operator was down: unobserved time is not charged"
    )
    fresh = IdleState("IdleSuspected", T0 - timedelta(seconds=10))
    assert reclaim.idle_hours(4, fresh, T0 - timedelta(seconds=30), T0, cap) == 4 * 10 / 3600
    assert reclaim.idle_hours(4, IdleState("Active", T0), T0 - cap, T0, cap) == 0
    assert reclaim.idle_hours(4, warned, None, T0, cap) == 0
