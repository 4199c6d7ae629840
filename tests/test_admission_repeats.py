"""Repeat runs noticed before they start (issue 28 item 5): new work declaring the config
hash and data version of a finished run's receipt in its namespace is warned about, the
earlier run named; held where a covering budget in Enforce says repeats: Hold, unless
the submitter says the repeat is intended."""

from datetime import timedelta
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from test_admission import LABELS, NOW, NS, apply, team_budget, view
from trainwarden.admission.review import Snapshot, review_response
from trainwarden.api.v1alpha1.names import (
    DATA_VERSION,
    HELD_BY,
    PARAMS,
    REPEAT_HELD_BY,
    REPEAT_INTENDED,
    REPEAT_OF,
)
from trainwarden.core import ledger
from trainwarden.core.admission import GATE, BudgetView, admit
from trainwarden.core.ledger import Earlier
from trainwarden.core.workloads import is_suspended
from trainwarden.testing.builders import JobBuilder, PodBuilder

DECLARED = {PARAMS: "lr=0.1,bs=32", DATA_VERSION: "v3"}
HASH = ledger.config_hash({"bs": "32", "lr": "0.1"}, "v3", None)
EARLIER = Earlier(
    NS, "job-train-1a2b", "Job/train", "Succeeded", 41.5, HASH, "v3", "2026-12-03T10:00:00Z"
)


def job(**more: str) -> dict[str, Any]:
    return JobBuilder("again", NS).gpus(2).annotations({**DECLARED, **more}).build()


def roomy(repeats: str = "Warn", *, enforce: bool = True) -> BudgetView:
    """A budget with room (it holds nothing for being exhausted)."""
    builder = team_budget().repeats(repeats)
    return view(builder if enforce else builder.dry_run(), until=None)


class Ledger:
    """A view holding one earlier run."""

    def current(self) -> bool:
        return True

    def budgets(self) -> list[BudgetView]:
        return [roomy()]

    def namespace_labels(self, name: str) -> dict[str, str]:
        return LABELS

    def earlier_run(self, key: tuple[str, str, str]) -> Earlier | None:
        return EARLIER if key == EARLIER.key else None

    def earlier_runs(self, namespace: str) -> dict[tuple[str, str, str], Earlier]:
        return {EARLIER.key: EARLIER} if namespace == NS else {}


def test_a_repeat_is_warned_with_the_earlier_run_named_and_marked() -> None:
    obj = job()
    verdict = admit(obj, LABELS, [roomy()], NOW, EARLIER)
    assert verdict.outcome == "repeat"
    (said,) = verdict.warnings
    assert said == (
        f"trainwarden: Job {NS}/again repeats a finished run: RunReceipt job-train-1a2b "
        "(Job/train, Succeeded, cost 41.50, finished 2026-12-03T10:00:00Z) declared the same "
        f"config hash {HASH} and data version v3"
    )
    stored = apply(obj, verdict.patch)
    assert stored["metadata"]["annotations"][REPEAT_OF] == "job-train-1a2b"
    assert not is_suspended(stored)


def test_the_webhook_looks_the_repeat_up_by_what_the_work_declares() -> None:
    for view_ in (Ledger(), Snapshot(Ledger(), NS)):
        request = {"uid": "u1", "operation": "CREATE", "namespace": NS, "object": job()}
        answer, outcome = review_response({"request": request}, view_, NOW)
        assert outcome == "repeat"
        assert "RunReceipt job-train-1a2b" in answer["response"]["warnings"][0]
        other = JobBuilder("new", NS).gpus(2).annotations({**DECLARED, DATA_VERSION: "v4"})
        request["object"] = other.build()
        answer, outcome = review_response({"request": request}, view_, NOW)
        assert outcome == "allowed"
        assert "warnings" not in answer["response"]


def test_a_budget_with_repeats_hold_in_enforce_holds_the_repeat_until_its_submitter_starts_it() -> (
    None
):
    obj = job()
    verdict = admit(obj, LABELS, [roomy("Hold")], NOW, EARLIER)
    assert (verdict.outcome, verdict.held_by) == ("repeat-held", "team-a")
    stored = apply(obj, verdict.patch)
    assert is_suspended(stored)
    marks = stored["metadata"]["annotations"]
    assert (marks[REPEAT_OF], marks[REPEAT_HELD_BY]) == ("job-train-1a2b", "team-a")
    assert HELD_BY not in marks  # no budget starts it: its submitter does
    assert "start it yourself" in verdict.warnings[0]


def test_a_bare_pod_repeat_is_held_behind_the_gate() -> None:
    pod = PodBuilder("solo", NS).gpus(1).annotations(DECLARED).build()
    stored = apply(pod, admit(pod, LABELS, [roomy("Hold")], NOW, EARLIER).patch)
    assert stored["spec"]["schedulingGates"] == [{"name": GATE}]


def test_an_intended_repeat_or_a_dry_run_budget_only_warns() -> None:
    obj = job(**{REPEAT_INTENDED: "true"})
    verdict = admit(obj, LABELS, [roomy("Hold")], NOW, EARLIER)
    assert verdict.outcome == "repeat"
    assert not is_suspended(apply(obj, verdict.patch))
    dry = admit(job(), LABELS, [roomy("Hold", enforce=False)], NOW, EARLIER)
    assert dry.outcome == "repeat"
    assert dry.warnings[0].endswith("would hold it (repeats: Hold, DryRun)")


def test_an_exhausted_budget_s_hold_stands_and_the_repeat_is_said_beside_it() -> None:
    obj = job()
    verdict = admit(obj, LABELS, [view(team_budget().repeats("Hold"))], NOW, EARLIER)
    assert verdict.outcome == "held"
    stored = apply(obj, verdict.patch)
    marks = stored["metadata"]["annotations"]
    assert (marks[HELD_BY], marks[REPEAT_OF]) == ("team-a", "job-train-1a2b")
    assert REPEAT_HELD_BY not in marks
    assert any("repeats a finished run" in w for w in verdict.warnings)


def test_a_copied_manifest_loses_marks_of_a_repeat_it_no_longer_is() -> None:
    obj = job(**{REPEAT_OF: "job-old", REPEAT_HELD_BY: "team-a"})
    stored = apply(obj, admit(obj, LABELS, [roomy()], NOW, None).patch)
    assert REPEAT_OF not in stored["metadata"]["annotations"]
    assert REPEAT_HELD_BY not in stored["metadata"]["annotations"]


def _receipt(name: str, finished: str, **experiment: Any) -> dict[str, Any]:
    spec = {
        "workload": {"apiVersion": "batch/v1", "kind": "Job", "name": name, "namespace": NS},
        "outcome": "Failed",
        "cost": 3,
        "finishedAt": finished,
        "experiment": experiment,
    }
    return {"metadata": {"name": f"job-{name}", "namespace": NS, "uid": name}, "spec": spec}


def test_the_cache_keeps_receipts_that_declared_both_and_answers_with_the_newest() -> None:
    from trainwarden.admission.view import RECEIPTS_SOURCE, AdmissionView
    from trainwarden.cache.cluster import ClusterCache

    cache = ClusterCache()
    sink = cache.receipt_sink()
    both = {"configHash": HASH, "dataVersion": "v3"}
    bodies = {
        "a": _receipt("a", "2026-12-01T00:00:00Z", **both),
        "b": _receipt("b", "2026-12-02T00:00:00Z", **both),
        "c": _receipt("c", "2026-12-03T00:00:00Z", configHash=HASH),  # no data version
        "d": {"metadata": {"name": "junk"}, "spec": {"experiment": "x"}},
    }
    records = {uid: ledger.earlier(body) for uid, body in bodies.items()}
    assert records["c"] is None
    assert records["d"] is None
    adm = AdmissionView(cache)
    assert adm.earlier_run(EARLIER.key) is None  # not listed yet: nothing is a repeat
    sink.replace(RECEIPTS_SOURCE, records)
    assert set(cache.receipts) == {"a", "b"}
    found = adm.earlier_run(EARLIER.key)
    assert found is not None
    assert (found.receipt, found.workload, found.cost) == ("job-b", "Job/b", 3.0)
    assert adm.earlier_runs(NS) == {EARLIER.key: found}
    sink.apply(RECEIPTS_SOURCE, "DELETED", "b", records["b"])
    assert adm.earlier_run(EARLIER.key) == records["a"]
    sink.interrupted(RECEIPTS_SOURCE, NOW, "watch failed")
    assert adm.earlier_run(EARLIER.key) is None  # stale: nothing is a repeat


def test_the_estimate_shows_the_repeat_as_the_webhook_would_say_it() -> None:
    from trainwarden import estimates
    from trainwarden.estimate_inputs import Manifest

    older = _receipt("old", "2026-12-01T00:00:00Z", configHash=HASH, dataVersion="v3")
    older["spec"]["result"] = {"metric": "eval_loss", "final": 0.41234, "best": 0.38}
    newer = _receipt("new", "2026-12-02T00:00:00Z", configHash=HASH, dataVersion="v3")
    newer["spec"]["result"] = {"metric": "eval_loss", "final": 0.41234, "best": 0.38}
    other = JobBuilder("fresh", NS).gpus(2).annotations({**DECLARED, DATA_VERSION: "v4"})
    built = estimates.build(
        [Manifest("job.yaml", 1, job()), Manifest("job.yaml", 2, other.build())],
        [],
        {NS: LABELS},
        default_namespace=NS,
        now=NOW,
        budget_source="test",
        receipts=[older, newer],
    )
    repeat, fresh = built["workloads"]
    assert repeat["repeats"]["receipt"] == "job-new"
    assert fresh["repeats"] is None
    assert built["repeats"] == 1
    text = estimates.table(built)
    assert (
        "  repeat: repeats a finished run: RunReceipt job-new (Job/new, Failed, cost 3.00" in text
    )
    assert text.rstrip().endswith("1 repeat a finished run")


MARKS = {
    "trainwarden.dev/held-by": "team-a",  # this instance's budget: a copy, removed
    "trainwarden.dev/hold-reason": "copied",
    REPEAT_OF: "job-old",
    REPEAT_HELD_BY: "team-a",
    "team.example/owner": "kim",
}


@settings(max_examples=1000, deadline=None)
@given(
    kind=st.sampled_from(["Job", "Pod"]),
    carried=st.one_of(
        st.none(), st.sets(st.sampled_from(sorted(MARKS))).map(lambda k: {m: MARKS[m] for m in k})
    ),
    repeats=st.sampled_from(["Warn", "Hold"]),
    enforce=st.booleans(),
    exhausted=st.booleans(),
    repeat=st.booleans(),
    intended_=st.booleans(),
)
def test_the_stored_object_carries_exactly_the_marks_of_the_decision(
    kind: str,
    carried: dict[str, str] | None,
    repeats: str,
    enforce: bool,
    exhausted: bool,
    repeat: bool,
    intended_: bool,
) -> None:
    """Whatever annotations a manifest arrives with (none at all, copies of every mark),
    the repeat's marks and a budget's hold marks compose into one valid patch: the stored
    object is held exactly when a budget holds it or repeats: Hold does, marked repeat-of
    exactly when it repeats, repeat-held-by exactly when the repeat hold is the hold, and
    keeps every annotation that is not a mark."""
    builder = JobBuilder("again", NS) if kind == "Job" else PodBuilder("again", NS)
    obj = builder.gpus(1).build()
    annotations = {**(carried or {}), **DECLARED}
    if intended_:
        annotations[REPEAT_INTENDED] = "true"
    obj["metadata"]["annotations"] = annotations
    if carried is None and not repeat:
        del obj["metadata"]["annotations"]
    budget = team_budget().repeats(repeats)
    budget = budget if enforce else budget.dry_run()
    seen = view(budget, until=timedelta(minutes=5) if exhausted else None)
    verdict = admit(obj, LABELS, [seen], NOW, EARLIER if repeat else None)
    stored = apply(obj, verdict.patch)
    marks = stored["metadata"].get("annotations") or {}
    budget_hold = exhausted and enforce
    repeat_hold = repeat and repeats == "Hold" and enforce and not intended_ and not budget_hold
    held = is_suspended(stored) if kind == "Job" else bool(stored["spec"].get("schedulingGates"))
    assert held == (budget_hold or repeat_hold)
    assert (marks.get(REPEAT_OF) == "job-train-1a2b") == repeat
    assert (REPEAT_OF in marks) == repeat
    assert (REPEAT_HELD_BY in marks) == repeat_hold
    assert ("trainwarden.dev/held-by" in marks) == budget_hold
    assert marks.get("team.example/owner") == (carried or {}).get("team.example/owner")
    assert verdict.outcome == (
        "held" if budget_hold else "repeat-held" if repeat_hold else "repeat" if repeat
        else "would-hold" if exhausted else "allowed"
    )  # fmt: skip


def test_the_cache_keeps_at_most_its_cap_of_receipts(monkeypatch: Any) -> None:
    from trainwarden.cache import cluster

    monkeypatch.setattr(cluster, "MAX_RECEIPTS", 2)
    cache = cluster.ClusterCache()
    sink = cache.receipt_sink()
    both = {"configHash": HASH, "dataVersion": "v3"}
    bodies = [_receipt(n, f"2026-12-0{i + 1}T00:00:00Z", **both) for i, n in enumerate("abc")]
    sink.replace("runreceipts", {b["metadata"]["uid"]: ledger.earlier(b) for b in bodies})
    assert len(cache.receipts) == 2
    sink.apply("runreceipts", "DELETED", "a", ledger.earlier(bodies[0]))
    sink.apply("runreceipts", "ADDED", "c", ledger.earlier(bodies[2]))
    assert set(cache.receipts) == {"b", "c"}
