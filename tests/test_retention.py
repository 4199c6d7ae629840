"""The retention engine: examples for each rule, and its invariants over random histories."""

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trainwarden.core.retention import (
    EPOCH,
    PROTECTIONS,
    Best,
    Checkpoint,
    Plan,
    Rules,
    order_key,
    plan,
)

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
HOUR = timedelta(hours=1)


def ckpt(step: int, hours_ago: float, **kw: object) -> Checkpoint:
    fields: dict[str, object] = {"size": 100, **kw}
    return Checkpoint(
        name=f"checkpoint-{step}",
        created=NOW - timedelta(hours=hours_ago),
        step=step,
        **fields,  # type: ignore[arg-type]
    )


def history(n: int, **kw: object) -> list[Checkpoint]:
    """n checkpoints, one per hour, step 100 * i; the newest is an hour old."""
    return [ckpt(100 * i, n + 1 - i, **kw) for i in range(1, n + 1)]


def decided(p: Plan) -> dict[str, str]:
    return {d.checkpoint.name: d.rule for d in p.decisions}


def deleted(p: Plan) -> set[str]:
    return {d.checkpoint.name for d in p.delete}


def test_keep_last_keeps_the_newest_and_deletes_the_rest_oldest_first() -> None:
    p = plan(history(6), Rules(keep_last=2), now=NOW)
    assert [d.checkpoint.name for d in p.delete] == [
        "checkpoint-100",
        "checkpoint-200",
        "checkpoint-300",
        "checkpoint-400",
    ]
    assert decided(p)["checkpoint-600"] == "Newest"
    assert decided(p)["checkpoint-500"] == "KeepLast"
    assert p.bytes_freed == 400
    assert p.bytes_retained == 200


def test_keep_every_steps_keeps_a_sparse_history() -> None:
    p = plan(history(6), Rules(keep_last=1, keep_every_steps=200), now=NOW)
    assert deleted(p) == {"checkpoint-100", "checkpoint-300", "checkpoint-500"}
    assert decided(p)["checkpoint-400"] == "KeepEvery"


def test_keep_every_interval_keeps_the_oldest_of_each_interval() -> None:
    # Written hourly from 06:00 to 11:00; intervals of 3 h from the epoch: [06, 09), [09, 12).
    p = plan(history(6), Rules(keep_last=1, keep_every_interval=3 * HOUR), now=NOW)
    assert decided(p)["checkpoint-100"] == decided(p)["checkpoint-400"] == "KeepEvery"
    assert deleted(p) == {"checkpoint-200", "checkpoint-300", "checkpoint-500"}


def test_keep_best_reads_the_metric_min_or_max() -> None:
    losses = {100: 0.9, 200: 0.3, 300: 0.5, 400: 0.7}
    cps = [ckpt(s, 10 - s / 100, metrics={"eval_loss": v}) for s, v in losses.items()]
    low = plan(cps, Rules(keep_last=1, keep_best=Best("eval_loss", "Min")), now=NOW)
    assert decided(low)["checkpoint-200"] == "KeepBest"
    assert deleted(low) == {"checkpoint-100", "checkpoint-300"}
    high = plan(cps, Rules(keep_last=1, keep_best=Best("eval_loss", "Max", 2)), now=NOW)
    assert deleted(high) == {"checkpoint-200", "checkpoint-300"}


def test_keep_best_that_cannot_rank_deletes_nothing_it_would_judge_and_says_why() -> None:
    # Lightning's default names record no metric: on main, Enforce deleted as if keepBest
    # were absent, and with it the library's best (issue 31).
    p = plan(history(3), Rules(keep_last=1, keep_best=Best("accuracy")), now=NOW)
    assert deleted(p) == set()
    assert decided(p) == {
        "checkpoint-100": "KeepBestUnranked",
        "checkpoint-200": "KeepBestUnranked",
        "checkpoint-300": "Newest",
    }
    assert p.notes == (
        "keepBest cannot rank: no checkpoint records the metric 'accuracy'; "
        "the 3 it would judge are kept until one does",
    )


def test_what_keep_best_cannot_rank_is_held_within_max_age_and_past_max_total_size() -> None:
    rules = Rules(keep_last=1, keep_best=Best("accuracy"), max_age=2 * HOUR, max_total_size=100)
    p = plan(history(4), rules, now=NOW)
    # keepBest would judge only what is within maxAge; what it holds maxTotalSize keeps too.
    assert decided(p) == {
        "checkpoint-100": "MaxAge",
        "checkpoint-200": "MaxAge",
        "checkpoint-300": "KeepBestUnranked",
        "checkpoint-400": "Newest",
    }


def test_the_trainers_own_best_is_never_deleted() -> None:
    cps = history(4)
    cps[1] = replace(cps[1], trainer_best="Hugging Face's best_model_checkpoint")
    p = plan(cps, Rules(keep_last=1, max_total_size=0), now=NOW)
    assert decided(p)["checkpoint-200"] == "TrainerBest"
    assert deleted(p) == {"checkpoint-100", "checkpoint-300"}


def test_a_copy_without_a_step_written_last_is_no_restart() -> None:
    # Lightning's save_last=True copies the newest to last.ckpt, which has no step.
    cps = [*history(3), Checkpoint("last.ckpt", NOW - HOUR / 2, 100, resume_point=True)]
    assert plan(cps, Rules(keep_last=1), now=NOW).notes == ()
    restarted = [*history(3), replace(ckpt(100, 0.5), name="checkpoint-100-v1")]
    assert "step order and time order disagree" in plan(restarted, Rules(), now=NOW).notes[0]


def test_max_age_expires_long_term_history_but_not_keep_last() -> None:
    rules = Rules(keep_last=2, keep_every_steps=100, max_age=3 * HOUR)
    p = plan(history(6), rules, now=NOW)
    # Ages 6h..1h: keepEvery keeps all but only within 3 h; the two newest by keepLast.
    assert deleted(p) == {"checkpoint-100", "checkpoint-200", "checkpoint-300"}
    assert decided(p)["checkpoint-100"] == "MaxAge"


def test_max_total_size_drops_rule_kept_checkpoints_oldest_first() -> None:
    p = plan(history(5), Rules(keep_last=5, max_total_size=300), now=NOW)
    assert deleted(p) == {"checkpoint-100", "checkpoint-200"}
    assert decided(p)["checkpoint-100"] == "MaxTotalSize"
    assert p.bytes_retained == 300


def test_max_total_size_never_touches_protected_checkpoints() -> None:
    cps = [*history(3), ckpt(400, 0.01, complete=False, size=1000)]
    p = plan(cps, Rules(keep_last=3, max_total_size=500), now=NOW)
    assert "checkpoint-400" not in deleted(p)
    assert "checkpoint-300" not in deleted(p)
    assert p.notes == ("maxTotalSize cannot be met: 1100 bytes are protected (limit 500)",)


@pytest.mark.parametrize(
    ("change", "rule"),
    [
        ({"complete": False}, "Incomplete"),
        ({"created": NOW - timedelta(minutes=5)}, "TooYoung"),
        ({"pinned": True}, "Pinned"),
        ({"resume_point": True}, "ResumePoint"),
        ({"held": "its snapshot class destroys the data"}, "Held"),
    ],
)
def test_protections_win_over_every_rule(change: dict[str, object], rule: str) -> None:
    cps = history(5)
    cps[0] = replace(cps[0], **change)  # type: ignore[arg-type]
    p = plan(cps, Rules(keep_last=1, max_age=HOUR, max_total_size=0), now=NOW)
    assert decided(p)["checkpoint-100"] == rule


def test_a_running_job_keeps_its_newest_whatever_the_size_limit() -> None:
    rules = Rules(keep_last=2, max_total_size=100, protect_keep_last=True)
    p = plan(history(4), rules, now=NOW)
    assert deleted(p) == {"checkpoint-100", "checkpoint-200"}
    assert decided(p)["checkpoint-300"] == "RunningJob"


def test_the_deletion_cap_deletes_the_oldest_and_leaves_the_rest() -> None:
    p = plan(history(10), Rules(keep_last=1), now=NOW, max_deletions=3)
    assert deleted(p) == {"checkpoint-100", "checkpoint-200", "checkpoint-300"}
    assert sum(d.rule == "DeletionCap" for d in p.decisions) == 6
    assert p.notes == ("6 deletion(s) over the cap of 3 per run are left for a later run",)


def test_without_steps_age_orders_the_checkpoints() -> None:
    cps = [
        Checkpoint(name=f"ckpt-{c}", created=NOW - timedelta(hours=h), size=1)
        for c, h in (("a", 3), ("b", 1), ("c", 2))
    ]
    p = plan(cps, Rules(keep_last=1), now=NOW)
    assert decided(p) == {"ckpt-a": "NotSelected", "ckpt-c": "NotSelected", "ckpt-b": "Newest"}


def test_a_run_restarted_beside_a_stale_one_keeps_its_own_fresh_checkpoints() -> None:
    """checkpoint-100..300 written minutes ago by a run restarted from scratch, beside a
    stale checkpoint-1000..3000 from a month ago: step order and time order disagree."""
    stale = [ckpt(s, 24 * 30 + s / 1000) for s in (1000, 2000, 3000)]
    fresh = [ckpt(s, 0.5 - s / 1000) for s in (100, 200, 300)]
    p = plan([*stale, *fresh], Rules(keep_last=2, protect_keep_last=True), now=NOW)
    assert decided(p)["checkpoint-3000"] == "Newest"
    assert decided(p)["checkpoint-300"] == "NewestWritten"
    assert decided(p)["checkpoint-200"] == "RunningJob", "the running job's own newest"
    assert "checkpoint-300" not in deleted(p)
    assert any("step order and time order disagree" in n for n in p.notes)
    alone = plan([*stale, *fresh], Rules(keep_last=1), now=NOW)
    assert {"checkpoint-300", "checkpoint-3000"} <= {d.checkpoint.name for d in alone.keep}


def test_when_step_and_time_agree_the_newest_is_protected_once() -> None:
    p = plan(history(3), Rules(keep_last=1), now=NOW)
    assert [d.rule for d in p.decisions] == ["NotSelected", "NotSelected", "Newest"]
    assert not p.notes


def test_duplicate_names_are_refused() -> None:
    with pytest.raises(ValueError, match="unique"):
        plan([ckpt(1, 2), ckpt(1, 3)], Rules(), now=NOW)


# --- invariants over random histories -------------------------------------------------------

checkpoints = st.lists(
    st.builds(
        lambda step, minutes, size, complete, pinned, resume, loss, held, best: Checkpoint(
            name=f"c-{step}",
            created=NOW - timedelta(minutes=minutes),
            size=size,
            step=step,
            complete=complete,
            metrics={} if loss is None else {"eval_loss": loss},
            pinned=pinned,
            resume_point=resume,
            held="held" if held else None,
            trainer_best="the trainer's best" if best else None,
        ),
        st.integers(0, 5000),
        st.integers(0, 60 * 24 * 30),
        st.integers(0, 10**6),
        st.booleans() | st.just(True),
        st.sampled_from([False] * 9 + [True]),
        st.sampled_from([False] * 9 + [True]),
        st.none() | st.floats(0, 10, allow_nan=False),
        st.sampled_from([False] * 9 + [True]),
        st.sampled_from([False] * 9 + [True]),
    ),
    max_size=40,
    unique_by=lambda c: c.name,
)
rules_strategy = st.builds(
    Rules,
    keep_last=st.integers(1, 6),
    keep_every_steps=st.none() | st.integers(1, 1000),
    keep_every_interval=st.none() | st.integers(1, 72).map(lambda h: timedelta(hours=h)),
    keep_best=st.none()
    | st.builds(Best, st.just("eval_loss"), st.sampled_from(["Min", "Max"]), st.integers(1, 3)),
    max_age=st.none() | st.integers(1, 24 * 30).map(lambda h: timedelta(hours=h)),
    max_total_size=st.none() | st.integers(0, 10**7),
    min_age=st.integers(0, 120).map(lambda m: timedelta(minutes=m)),
    protect_keep_last=st.booleans(),
)
caps = st.none() | st.integers(0, 20)


@settings(max_examples=3000)
@given(checkpoints, rules_strategy, caps)
def test_nothing_anyone_needs_is_ever_deleted(
    cps: list[Checkpoint], rules: Rules, cap: int | None
) -> None:
    p = plan(cps, rules, now=NOW, max_deletions=cap)
    gone = deleted(p)
    complete = sorted((c for c in cps if c.complete), key=order_key)
    if complete:
        assert complete[-1].name not in gone, "the highest-step complete checkpoint is kept"
        latest = max(complete, key=lambda c: (c.created, *order_key(c)))
        assert latest.name not in gone, "the most recently written complete one is kept"
    for c in cps:
        needed = c.pinned or c.resume_point or c.held or c.trainer_best
        if not c.complete or NOW - c.created < rules.min_age or needed:
            assert c.name not in gone
    if rules.protect_keep_last:
        assert not gone & {c.name for c in complete[-rules.keep_last :]}
        by_time = sorted(complete, key=lambda c: (c.created, *order_key(c)))
        assert not gone & {c.name for c in by_time[-rules.keep_last :]}, "newest in time too"
    assert len(p.decisions) == len(cps)
    if cap is not None:
        assert len(gone) <= cap


@settings(max_examples=3000)
@given(checkpoints, rules_strategy)
def test_the_kept_set_satisfies_every_rule(cps: list[Checkpoint], rules: Rules) -> None:
    p = plan(cps, rules, now=NOW)
    kept = {d.checkpoint.name for d in p.keep}
    size_trimmed = {d.checkpoint.name for d in p.delete if d.rule == "MaxTotalSize"}
    complete = sorted((c for c in cps if c.complete), key=order_key, reverse=True)

    def fresh(c: Checkpoint) -> bool:
        return rules.max_age is None or NOW - c.created <= rules.max_age

    wanted = {c.name for c in complete[: rules.keep_last]}
    if rules.keep_every_steps:
        wanted |= {
            c.name
            for c in complete
            if c.step is not None and c.step % rules.keep_every_steps == 0 and fresh(c)
        }
    if rules.keep_every_interval:
        first: dict[int, Checkpoint] = {}
        for c in sorted(complete, key=lambda c: (c.created, c.name)):
            first.setdefault((c.created - EPOCH) // rules.keep_every_interval, c)
        wanted |= {c.name for c in first.values() if fresh(c)}
    if rules.keep_best:
        best = rules.keep_best
        sign = 1 if best.order == "Min" else -1
        scored = sorted(
            (c for c in complete if best.metric in c.metrics),
            key=lambda c: (sign * c.metrics[best.metric], *order_key(c)),
        )
        wanted |= {c.name for c in scored[: best.count] if fresh(c)}
        if not scored:  # it cannot rank: whatever it would judge may be the best
            unranked = {c.name for c in complete if fresh(c)}
            assert unranked <= kept, "nothing keepBest would judge is deleted"
    # Every rule's pick is kept, unless maxTotalSize had to drop it to fit.
    assert wanted - kept <= size_trimmed
    if rules.max_total_size is not None:
        held = (*PROTECTIONS, "KeepBestUnranked")
        protected = sum(d.checkpoint.size for d in p.keep if d.rule in held)
        assert p.bytes_retained <= max(rules.max_total_size, protected)
    else:
        assert not size_trimmed
    # Nothing is deleted that a rule would keep and the size limit did not force out.
    for d in p.delete:
        assert d.checkpoint.name not in wanted or d.rule == "MaxTotalSize"


@settings(max_examples=3000)
@given(checkpoints, rules_strategy)
def test_applying_the_policy_twice_deletes_nothing_more(
    cps: list[Checkpoint], rules: Rules
) -> None:
    first = plan(cps, rules, now=NOW)
    again = plan([d.checkpoint for d in first.keep], rules, now=NOW)
    assert not again.delete
