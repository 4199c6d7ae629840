"""The orphaned-volume decisions (core/orphans.py), pure.

Invariant 1: no claim that is protected, kept, StatefulSet-governed, owned, referenced by
a workload, in a namespace whose workloads are unknown, checkpoint-governed, Retain-bound
or on an unreadable volume is ever planned for deletion; every planned claim was unmounted
for unmountedFor and reported at least gracePeriod ago.
Invariant 2: over any timeline of observations, gaps and restarts, a claim is planned only
after unmountedFor + gracePeriod of *observed* unmounted time (downtime never counts).
"""

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from trainwarden.api.v1alpha1.names import KEEP_UNTIL, PROTECT_LABEL
from trainwarden.api.v1alpha1.volumes import VolumeReclaimPolicySpec
from trainwarden.core import orphans
from trainwarden.core.accounting import PodSnapshot
from trainwarden.core.claims import ClaimFacts
from trainwarden.core.orphans import ANY_CLAIM, UNKNOWN
from trainwarden.core.pods import MAX_POD_CLAIMS, PodFacts, mounted_claims
from trainwarden.core.pods import facts as pod_facts
from trainwarden.core.reads import CODE
from trainwarden.volumes import status as volume_status

NOW = datetime(2026, 12, 1, 12, tzinfo=UTC)
RULES = orphans.Rules(
    unmounted_for=timedelta(hours=1),
    grace=timedelta(minutes=30),
    max_keep=timedelta(days=1),
    snapshot_timeout=None,
)


def facts(name: str, ns: str = "team-a", uid: str | None = None) -> ClaimFacts:
    created = (NOW - timedelta(days=30)).timestamp()
    return ClaimFacts(uid or f"uid-{name}", ns, name, {}, "", created, ((created, 2**30),))


def pod(claims: set[str], *, ended: datetime | None = None, ns: str = "team-a") -> PodFacts:
    outcome = "Succeeded" if ended is not None else "Running"
    snap = PodSnapshot("p", ns, "p", {}, NOW - timedelta(days=1), ended, outcome)
    return PodFacts(snap, None, None, 0, claims=tuple(sorted(claims)))


def claim(**kw: Any) -> orphans.Claim:
    base = orphans.Claim("uid-data", "7", False, {}, (), "pv-1", 2**30, False)
    return replace(base, **kw)


# --- the rules, one by one --------------------------------------------------------------


def test_an_orphan_is_reported_then_waits_out_its_grace_then_is_planned() -> None:
    rec = orphans.Record("team-a", "data", "uid-data", NOW - timedelta(hours=2))
    first = orphans.judge(rec, claim(), orphans.Context(), RULES, NOW)
    assert (first.action, first.record.state) == ("Report", "Orphaned")
    reported = replace(first.record, reported_at=NOW, reported_in="Enforce")
    waiting = orphans.judge(
        reported, claim(), orphans.Context(), RULES, NOW + timedelta(minutes=29)
    )
    assert waiting.action is None
    assert waiting.due == NOW + timedelta(minutes=30)
    due = orphans.judge(reported, claim(), orphans.Context(), RULES, NOW + timedelta(minutes=30))
    assert due.action == "Delete"


def test_dry_run_plans_the_same_deletion_but_never_says_deleting() -> None:
    """The plan is the same in both modes; only Enforce's record reads Deleting (a DryRun
    status that said so would alarm the team for nothing)."""
    rec = orphans.Record("team-a", "data", "uid-data", NOW - timedelta(hours=2))
    later = NOW + timedelta(minutes=30)
    for enforce, state in ((True, "Deleting"), (False, "Orphaned")):
        rules = replace(RULES, enforce=enforce)
        mode = "Enforce" if enforce else "DryRun"
        reported = replace(rec, state="Orphaned", reported_at=NOW, reported_in=mode)
        v = orphans.judge(reported, claim(), orphans.Context(), rules, later)
        assert (v.action, v.record.state) == ("Delete", state)


def test_not_yet_unmounted_long_enough() -> None:
    rec = orphans.Record("team-a", "data", "uid-data", NOW - timedelta(minutes=59))
    v = orphans.judge(rec, claim(), orphans.Context(), RULES, NOW)
    assert (v.action, v.record.state, v.due) == (None, "Unmounted", rec.since + RULES.unmounted_for)


def test_each_rule_leaves_the_claim_alone_with_its_reason() -> None:
    rec = orphans.Record(
        "team-a",
        "data-trainer-0",
        "uid-data",
        NOW - timedelta(days=2),
        reported_at=NOW - timedelta(days=1),
    )
    cases = [
        (claim(protected=True), orphans.Context(), PROTECT_LABEL),
        (claim(owners=(("StatefulSet", "web"),)), orphans.Context(), "StatefulSet web"),
        (claim(), orphans.Context(statefulsets={"trainer": ["data"]}), "StatefulSet trainer"),
        (claim(owners=(("Pod", "p"),)), orphans.Context(), "owned by Pod/p"),
        (claim(), orphans.Context(references={"data-trainer-0": "Job/x"}), "Job/x"),
        (claim(), orphans.Context(references={ANY_CLAIM: "JobSet/big"}), "JobSet/big"),
        (claim(), orphans.Context(unknown="RayJob not listed"), "workloads unknown"),
        (claim(), orphans.Context(checkpoint="ckpt"), "governed by CheckpointPolicy ckpt"),
        (claim(), orphans.Context(retain=True), "reclaimPolicy Retain"),
        (claim(), orphans.Context(retain=None), "could not be read"),
        (claim(deleting=True), orphans.Context(), "already being deleted"),
        (claim(annotations={KEEP_UNTIL: "2026-12-01T18:00:00Z"}), orphans.Context(), "kept until"),
    ]
    for c, ctx, reason in cases:
        v = orphans.judge(rec, c, ctx, RULES, NOW)
        assert v.action is None, reason
        assert v.record.state == "Exempt"
        assert v.record.reported_at is None  # a grace period restarts from a new report
        assert reason in v.reason


def test_a_statefulset_name_needs_the_ordinal() -> None:
    rec = orphans.Record("team-a", "data-trainer-x", "uid-data", NOW - timedelta(days=2))
    v = orphans.judge(rec, claim(), orphans.Context(statefulsets={"trainer": ["data"]}), RULES, NOW)
    assert v.action == "Report"


def test_keep_until_is_capped_from_when_it_was_first_seen() -> None:
    rec = orphans.Record("team-a", "data", "uid-data", NOW - timedelta(days=2))
    far = claim(annotations={KEEP_UNTIL: "2030-01-01T00:00:00Z"})
    first = orphans.judge(rec, far, orphans.Context(), RULES, NOW)
    assert first.record.keep == ("2030-01-01T00:00:00Z", NOW)
    later = orphans.judge(first.record, far, orphans.Context(), RULES, NOW + timedelta(days=1))
    assert later.action == "Report"  # the cap (1 day from first seen) ran out


def test_a_bogus_keep_until_is_reported_and_keeps_nothing() -> None:
    rec = orphans.Record("team-a", "data", "uid-data", NOW - timedelta(days=2))
    v = orphans.judge(
        rec, claim(annotations={KEEP_UNTIL: "forever"}), orphans.Context(), RULES, NOW
    )
    assert v.action == "Report"
    assert v.problem is not None
    assert "not an RFC 3339 time" in v.problem


def test_a_snapshot_is_waited_for_and_a_late_one_stops_the_deletion() -> None:
    rules = replace(RULES, snapshot_timeout=timedelta(minutes=10))
    rec = orphans.Record(
        "team-a",
        "data",
        "uid-data",
        NOW - timedelta(days=2),
        reported_at=NOW - timedelta(hours=1),
        reported_in="Enforce",
    )
    assert orphans.judge(rec, claim(), orphans.Context(), rules, NOW).action == "Snapshot"
    asked = replace(rec, snapshot_at=NOW)
    pending = {"status": {"readyToUse": False}}
    v = orphans.judge(
        asked, claim(), orphans.Context(snapshot=pending), rules, NOW + timedelta(minutes=9)
    )
    assert (v.action, v.record.state) == ("AwaitSnapshot", "Snapshotting")
    late = orphans.judge(
        asked, claim(), orphans.Context(snapshot=pending), rules, NOW + timedelta(minutes=10)
    )
    assert (late.action, late.record.state) == (None, "SnapshotFailed")
    gone = orphans.judge(
        asked, claim(), orphans.Context(snapshot=None), rules, NOW + timedelta(minutes=1)
    )
    assert (gone.action, gone.record.state) == (None, "SnapshotFailed")
    ready = {"status": {"readyToUse": True}}
    assert (
        orphans.judge(asked, claim(), orphans.Context(snapshot=ready), rules, NOW).action
        == "Delete"
    )


def test_a_report_made_in_dry_run_starts_no_grace_period_in_enforce() -> None:
    rec = orphans.Record(
        "team-a", "data", "uid-data", NOW - timedelta(days=2),
        reported_at=NOW - timedelta(days=1), reported_in="DryRun",
    )  # fmt: skip
    v = orphans.judge(rec, claim(), orphans.Context(), RULES, NOW)
    assert (v.action, v.record.reported_at) == ("Report", None)
    dry = orphans.judge(rec, claim(), orphans.Context(), replace(RULES, enforce=False), NOW)
    assert dry.action == "Delete"  # what DryRun lists: Enforce does it after its own grace


def test_a_claim_replaced_under_its_name_is_not_judged_as_the_old_one() -> None:
    rec = orphans.Record(
        "team-a",
        "data",
        "uid-old",
        NOW - timedelta(days=2),
        reported_at=NOW - timedelta(days=1),
        reported_in="Enforce",
    )
    v = orphans.judge(rec, claim(uid="uid-new"), orphans.Context(), RULES, NOW)
    assert v.action is None


# --- tracking ----------------------------------------------------------------------------


def test_mounted_claims_have_no_record_and_terminal_pods_count_until_their_end() -> None:
    old = {"uid-a": orphans.Record("team-a", "a", "uid-a", NOW - timedelta(hours=5))}
    claims = [facts("a"), facts("b"), facts("c")]
    seen = {"team-a": orphans.mounts([pod({"b"}), pod({"a"}, ended=NOW - timedelta(hours=1))], NOW)}
    records, untracked, _ = orphans.track(old, claims, seen, NOW, 50)
    assert set(records) == {"uid-a", "uid-c"}
    assert records["uid-a"].since == NOW - timedelta(hours=1)  # the pod ended after it began
    assert records["uid-c"].since == NOW
    assert untracked == 0


def test_a_pod_that_may_mount_anything_shields_its_whole_namespace() -> None:
    seen = {"team-a": orphans.mounts([pod({"x", UNKNOWN})], NOW)}
    records, _, _ = orphans.track({}, [facts("a"), facts("b", ns="team-b")], seen, NOW, 50)
    assert [r.name for r in records.values()] == ["b"]


def test_past_the_cap_new_claims_are_not_aged_and_recorded_ones_keep_their_place() -> None:
    old = {"uid-z": orphans.Record("team-a", "z", "uid-z", NOW - timedelta(hours=5))}
    claims = [facts(f"c{i}") for i in range(5)] + [facts("z")]
    records, untracked, _ = orphans.track(old, claims, {}, NOW, 3)
    assert "uid-z" in records
    assert len(records) == 3
    assert untracked == 3


def test_a_gap_moves_every_clock_and_a_short_one_moves_none() -> None:
    rec = orphans.Record("a", "b", "u", NOW, reported_at=NOW, snapshot_at=NOW, keep=("x", NOW))
    assert orphans.gap(NOW, NOW + orphans.RESOLUTION) == timedelta(0)
    moved = orphans.shifted({"u": rec}, orphans.gap(NOW, NOW + timedelta(hours=3)))["u"]
    assert moved.since == moved.reported_at == moved.snapshot_at == NOW + timedelta(hours=3)
    assert moved.keep == ("x", NOW)  # a keep-until is wall time


# --- invariant 1: nothing excluded is ever planned --------------------------------------

times = st.integers(min_value=0, max_value=3 * 86400).map(lambda s: NOW - timedelta(seconds=s))
keep_values = st.one_of(
    st.none(),
    st.text(max_size=80),
    st.integers(-86400 * 3, 86400 * 3).map(
        lambda s: (NOW + timedelta(seconds=s)).isoformat().replace("+00:00", "Z")
    ),
)
owner_chains = st.lists(
    st.tuples(st.sampled_from(["StatefulSet", "Pod", "Job", "x" * 300, ""]), st.text(max_size=20)),
    max_size=3,
)


@st.composite
def cases(draw: st.DrawFn) -> tuple[orphans.Record, orphans.Claim, orphans.Context, orphans.Rules]:
    name = draw(
        st.sampled_from(["data", "data-trainer-0", "data-trainer-x", "ckpt", "-", "a" * 253])
    )
    since = draw(times)
    reported = draw(st.one_of(st.none(), times))
    snapshot_at = draw(st.one_of(st.none(), times))
    rec = orphans.Record(
        "team-a",
        name,
        "uid-data",
        since,
        reported_at=reported,
        snapshot_at=snapshot_at,
        reported_in=draw(st.sampled_from([None, "DryRun", "Enforce"])),
    )
    keep = draw(keep_values)
    c = claim(
        protected=draw(st.booleans()),
        owners=tuple(draw(owner_chains)),
        deleting=draw(st.booleans()),
        annotations={KEEP_UNTIL: keep} if keep is not None else {},
    )
    ctx = orphans.Context(
        references=draw(
            st.dictionaries(
                st.sampled_from([name, "other", ANY_CLAIM]), st.just("Job/j"), max_size=2
            )
        ),
        statefulsets=draw(
            st.dictionaries(st.sampled_from(["trainer", "web"]), st.just(["data"]), max_size=2)
        ),
        unknown=draw(st.sampled_from([None, "RayJob not listed"])),
        checkpoint=draw(st.sampled_from([None, "ckpt"])),
        retain=draw(st.sampled_from([False, True, None])),
        snapshot=draw(st.sampled_from([None, {"status": {"readyToUse": True}}, {"status": {}}])),
    )
    rules = orphans.Rules(
        unmounted_for=timedelta(seconds=draw(st.integers(60, 86400))),
        grace=timedelta(seconds=draw(st.integers(0, 86400))),
        max_keep=timedelta(seconds=draw(st.integers(1, 86400 * 7))),
        snapshot_timeout=draw(st.sampled_from([None, timedelta(minutes=10)])),
        enforce=draw(st.booleans()),
    )
    return rec, c, ctx, rules


def excluded(
    rec: orphans.Record, c: orphans.Claim, ctx: orphans.Context, now: datetime, rules: orphans.Rules
) -> bool:
    head, _, ordinal = rec.name.rpartition("-")
    sts_named = any(
        head == f"{t}-{s}" and ordinal.isdigit() for s, ts in ctx.statefulsets.items() for t in ts
    )
    kept = False
    raw = c.annotations.get(KEEP_UNTIL)
    if raw is not None:
        try:
            until = datetime.fromisoformat(raw.replace("Z", "+00:00"))
            kept = until.tzinfo is not None and now < until
        except ValueError:
            pass
    return (
        c.protected
        or c.deleting
        or bool(c.owners)
        or sts_named
        or rec.name in ctx.references
        or ANY_CLAIM in ctx.references
        or ctx.unknown is not None
        or ctx.checkpoint is not None
        or ctx.retain is not False
        or kept
    )


@settings(max_examples=1000)
@given(cases())
def test_nothing_excluded_is_ever_planned(
    case: tuple[orphans.Record, orphans.Claim, orphans.Context, orphans.Rules],
) -> None:
    rec, c, ctx, rules = case
    v = orphans.judge(rec, c, ctx, rules, NOW)
    if v.action not in orphans.PLANNED:
        return
    assert not excluded(rec, c, ctx, NOW, rules)
    assert NOW - rec.since >= rules.unmounted_for
    assert rec.reported_at is not None
    assert NOW - rec.reported_at >= rules.grace
    assert rec.reported_in == ("Enforce" if rules.enforce else "DryRun")  # reported in this mode
    if v.action == "Delete" and rules.snapshot_timeout is not None:
        assert orphans.snapshot_ready(ctx.snapshot)


# --- invariant 2: only observed time ages a claim ---------------------------------------

SPEC = VolumeReclaimPolicySpec.model_validate(
    {"scope": {"namespaces": ["team-a"]}, "unmountedFor": "10m", "gracePeriod": "5m"}
)
STEP_RULES = replace(RULES, unmounted_for=SPEC.unmounted_for, grace=SPEC.grace_period)
steps = st.lists(
    st.tuples(
        st.integers(1, 900),  # seconds since the last evaluation
        st.booleans(),  # a pod mounts the claim at this evaluation
        st.booleans(),  # the operator restarted before it
    ),
    min_size=1,
    max_size=60,
)


@settings(max_examples=1000)
@given(steps)
def test_a_claim_is_planned_only_after_observed_unmounted_time(
    timeline: list[tuple[int, bool, bool]],
) -> None:
    now, memory_last, heartbeat = NOW, None, None
    records: dict[str, orphans.Record] = {}
    observed = timedelta(0)  # unmounted time seen across gaps of at most RESOLUTION
    for seconds, mounted, restarted in timeline:
        previous, now = now, now + timedelta(seconds=seconds)
        last = heartbeat if restarted or memory_last is None else memory_last
        if last is not None and orphans.gap(last, now) == timedelta(0):
            observed += now - previous
        shifted = orphans.shifted(records, orphans.gap(last, now))
        seen = {"team-a": orphans.mounts([pod({"data"})] if mounted else [], now)}
        records, _, _ = orphans.track(shifted, [facts("data")], seen, now, 50)
        if mounted:
            observed = timedelta(0)
        verdicts = [
            orphans.judge(r, claim(), orphans.Context(), STEP_RULES, now) for r in records.values()
        ]
        for v in verdicts:
            if v.action in orphans.PLANNED:
                assert observed >= STEP_RULES.unmounted_for + STEP_RULES.grace, (observed, v)
        records = {
            v.record.uid: replace(v.record, reported_at=now, reported_in="Enforce")
            if v.action == "Report"
            else v.record
            for v in verdicts
        }
        memory_last, heartbeat = now, volume_status.heartbeat(SPEC, heartbeat, now)


# --- hostile input ------------------------------------------------------------------------

junk = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=300),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=30), inner, max_size=4)
    ),
    max_leaves=30,
)


@settings(max_examples=1000)
@given(
    st.dictionaries(
        st.sampled_from(["metadata", "spec", "status"]),
        st.one_of(
            junk,
            st.fixed_dictionaries(
                {
                    "labels": junk,
                    "annotations": st.one_of(junk, st.fixed_dictionaries({KEEP_UNTIL: junk})),
                    "ownerReferences": junk,
                    "uid": junk,
                    "resourceVersion": junk,
                }
            ),
        ),
    )
)
def test_any_claim_object_reads_bounded_and_never_raises(obj: dict[str, Any]) -> None:
    c = orphans.claim(obj)
    assert len(c.uid) <= 64
    assert len(c.resource_version) <= 64
    assert len(c.volume) <= 253
    assert len(c.owners) <= orphans.MAX_OWNERS + 1
    assert all(len(v) <= 64 for v in c.annotations.values())
    orphans.judge(
        orphans.Record("a", "b", c.uid, NOW - timedelta(days=9)), c, orphans.Context(), RULES, NOW
    )


def test_a_huge_keep_until_is_cut_and_ignored() -> None:
    c = orphans.claim({"metadata": {"uid": "u", "annotations": {KEEP_UNTIL: "9" * 1_000_000}}})
    assert len(c.annotations[KEEP_UNTIL]) == 64
    v = orphans.judge(
        orphans.Record("a", "b", "u", NOW - timedelta(days=9)), c, orphans.Context(), RULES, NOW
    )
    assert v.action == "Report"
    assert v.problem is not None


def test_a_pod_naming_more_claims_than_its_record_keeps_shields_its_namespace() -> None:
    """core/pods.py keeps MAX_POD_CLAIMS names, the last one UNKNOWN past that (the
    receipts' rule): for volumes, such a pod may mount any claim of its namespace."""
    many = [
        {"name": f"v{i}", "persistentVolumeClaim": {"claimName": f"c{i:02}"}}
        for i in range(MAX_POD_CLAIMS + 1)
    ]
    spec = {"containers": [{"name": "c", "image": "x"}], "volumes": many}
    record = pod_facts(
        {"metadata": {"name": "p", "namespace": "team-a", "uid": "u"}, "spec": spec}, CODE
    )
    assert UNKNOWN in record.claims
    assert orphans.mounts([record], NOW).mounted("c16-not-in-the-record")
    assert mounted_claims({"volumes": [{"name": "scratch", "ephemeral": {}}]}, "p") == (
        "p-scratch",
    )


def test_template_claims_at_any_depth_and_bounded() -> None:
    jobset = {
        "spec": {
            "replicatedJobs": [
                {
                    "template": {
                        "spec": {
                            "template": {
                                "spec": {
                                    "volumes": [{"persistentVolumeClaim": {"claimName": "ds"}}]
                                }
                            }
                        }
                    }
                }
            ]
        }
    }
    assert orphans.template_claims(jobset) == {"ds"}
    huge = {"spec": {"items": [[0] * 100 for _ in range(300)]}}
    assert orphans.template_claims(huge) == {ANY_CLAIM}


# --- caps ---------------------------------------------------------------------------------


@settings(max_examples=1000)
@given(
    st.lists(st.integers(0, 10 * 2**30), max_size=20),
    st.lists(st.tuples(st.integers(0, 7200), st.integers(0, 10 * 2**30)), max_size=10),
    st.integers(1, 5),
    st.integers(1, 20 * 2**30),
)
def test_the_caps_hold(
    sizes: list[int], recent: list[tuple[int, int]], per_minute: int, per_hour: int
) -> None:
    past = [(NOW - timedelta(seconds=s), b) for s, b in recent]
    wanted = [(f"u{i}", b) for i, b in enumerate(sizes)]
    act, wait = orphans.within_caps(wanted, past, NOW, per_minute, per_hour)
    assert sorted(act + wait) == sorted(u for u, _ in wanted)
    in_minute = sum(1 for at, _ in past if NOW - at < timedelta(minutes=1))
    assert not act or in_minute + len(act) <= per_minute
    hour = sum(b for at, b in past if NOW - at < timedelta(hours=1))
    sizes_acted = [dict(wanted)[u] for u in act]
    alone = hour == 0 and sum(sizes_acted) == max(sizes_acted, default=0)  # one oversized
    assert not act or hour + sum(sizes_acted) <= per_hour or alone


def test_a_claim_left_alone_gives_its_place_to_a_new_one_and_never_takes_one_back() -> None:
    """Past the cap, exempt records (oldest first) give way to new claims; a claim that
    gave way waits for a free place instead of pushing another exempt record out."""
    old = {
        f"uid-e{i}": orphans.Record("team-a", f"e{i}", f"uid-e{i}", NOW - timedelta(hours=9 - i))
        for i in range(3)
    }
    old = {u: replace(r, state="Exempt") for u, r in old.items()}
    claims = [facts(f"e{i}") for i in range(3)] + [facts("new")]
    records, untracked, gave_way = orphans.track(old, claims, {}, NOW, 3)
    assert gave_way == ["uid-e0"]
    assert set(records) == {"uid-e1", "uid-e2", "uid-new"}
    assert records["uid-new"].since == NOW
    assert untracked == 1
    later, untracked, gave_way = orphans.track(records, claims, {}, NOW, 3, {"uid-e0"})
    assert (set(later), untracked, gave_way) == (set(records), 1, [])


STATES = st.sampled_from(["Unmounted", "Orphaned", "Exempt", "Snapshotting", "Deleting"])


@settings(max_examples=1000, deadline=None)
@given(
    st.lists(STATES, max_size=12),
    st.integers(min_value=0, max_value=12),
    st.integers(min_value=1, max_value=10),
    st.data(),
)
def test_tracking_stays_within_its_cap_and_only_exempt_records_give_way(
    states: list[str], new: int, cap: int, data: st.DataObject
) -> None:
    """Whatever the states, the new claims and the cap: at most `cap` records; a record
    that is not Exempt keeps its place; one gives way only to a new claim that did not give
    way itself, and only while such a claim has no free place; every claim in scope is
    either recorded or counted untracked."""
    old = {
        f"uid-o{i}": orphans.Record("team-a", f"o{i}", f"uid-o{i}", NOW, state=s)  # type: ignore[arg-type]
        for i, s in enumerate(states)
    }
    claims = [facts(f"o{i}") for i in range(len(states))] + [facts(f"n{i}") for i in range(new)]
    yielded = set(data.draw(st.sets(st.sampled_from([f"uid-n{i}" for i in range(new)] or ["-"]))))
    records, untracked, gave_way = orphans.track(old, claims, {}, NOW, cap, yielded)
    assert len(records) <= max(cap, len(old))
    assert all(u in records for u, r in old.items() if r.state != "Exempt")
    assert all(old[u].state == "Exempt" for u in gave_way)
    newcomers = [c.uid for c in claims if c.uid not in old and c.uid not in yielded]
    assert gave_way == [] or newcomers
    if any(u not in records for u in newcomers):  # no room: no exempt record kept a place
        assert not any(old[u].state == "Exempt" for u in records if u in old)
    assert len(records) + untracked == len(claims)
    assert all(records[u].since == NOW for u in records if u not in old)
