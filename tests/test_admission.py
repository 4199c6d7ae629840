"""The admission decision: what a new workload in an exhausted budget's scope becomes.

The patch is applied here as the API server applies a JSON patch (RFC 6902 add/remove),
so the tests see the object that would be stored.
"""

import copy
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trainwarden.api.v1alpha1.budget import TrainingBudgetSpec
from trainwarden.api.v1alpha1.names import EXPECTED_DURATION, HELD_BY, HOLD_REASON
from trainwarden.core.admission import GATE, BudgetView, admit, budget_view, how_held
from trainwarden.core.workloads import is_suspended
from trainwarden.testing.builders import (
    BudgetBuilder,
    JobBuilder,
    JobSetBuilder,
    PodBuilder,
    PyTorchJobBuilder,
    RayJobBuilder,
)

NOW = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)
NS, LABELS = "team-a", {"team": "a"}
JSON = dict[str, Any]


def apply(obj: JSON, patch: tuple[JSON, ...]) -> JSON:
    """RFC 6902 add and remove, as the API server applies a webhook's patch."""
    out = copy.deepcopy(obj)
    for op in patch:
        *parents, last = [
            p.replace("~1", "/").replace("~0", "~") for p in op["path"][1:].split("/")
        ]
        node = out
        for part in parents:
            node = node[int(part)] if isinstance(node, list) else node[part]
        if op["op"] == "remove":
            del node[last]
        elif isinstance(node, list):
            node.insert(len(node) if last == "-" else int(last), op["value"])
        else:
            node[last] = op["value"]
    return out


def view(builder: BudgetBuilder, *, until: timedelta | None = timedelta(minutes=5)) -> BudgetView:
    body = builder.build()
    body["metadata"]["generation"] = 3
    body["status"] = {
        "percent": 102.5,
        "mostConstrained": "acceleratorHours",
        "remaining": {"acceleratorHours": 0.0},
        "periodEnd": "2026-12-05T00:00:00Z",
    }
    if until is not None:
        body["status"]["admission"] = {
            "holding": True,
            "holdUntil": (NOW + until).isoformat(),
            "observedGeneration": 3,
        }
    found = budget_view(body)
    assert found is not None
    return found


def team_budget(name: str = "team-a") -> BudgetBuilder:
    return BudgetBuilder(name).namespaces(NS).accelerator_hours(10).enforce()


def test_a_job_in_a_holding_budget_is_created_suspended_and_marked() -> None:
    job = JobBuilder("train", NS).gpus(8).annotations({EXPECTED_DURATION: "6h"}).build()
    verdict = admit(job, LABELS, [view(team_budget())], NOW)
    stored = apply(job, verdict.patch)
    assert verdict.outcome == "held"
    assert verdict.held_by == "team-a"
    assert is_suspended(stored)
    assert stored["metadata"]["annotations"][HELD_BY] == "team-a"
    reason = stored["metadata"]["annotations"][HOLD_REASON]
    assert reason == verdict.warnings[0], "kubectl shows the same message"
    assert "TrainingBudget team-a is exhausted (102.5% of acceleratorHours used" in reason
    assert "resets at 2026-12-05T00:00:00+00:00" in reason
    assert "8 nvidia.com/gpu for 6h" in reason
    assert "48 accelerator-hours" in reason


def test_every_suspendable_kind_is_held_through_its_own_field() -> None:
    budgets = [view(team_budget())]
    for builder in (
        JobSetBuilder("js", NS).replicated_job("w"),
        PyTorchJobBuilder("pt", NS).replica("Worker"),
        RayJobBuilder("rj", NS),
    ):
        obj = builder.build()
        stored = apply(obj, admit(obj, LABELS, budgets, NOW).patch)
        assert is_suspended(stored), obj["kind"]
        assert stored["spec"] == {**obj["spec"], **stored["spec"]}, "nothing else changes"


def test_a_bare_pod_waits_behind_a_gate_beside_its_own() -> None:
    pod = PodBuilder("debug", NS).gpus(1).build()
    pod["spec"]["schedulingGates"] = [{"name": "example.com/other"}]
    stored = apply(pod, admit(pod, LABELS, [view(team_budget())], NOW).patch)
    assert stored["spec"]["schedulingGates"] == [{"name": "example.com/other"}, {"name": GATE}]
    plain = PodBuilder("p", NS).build()
    assert apply(plain, admit(plain, LABELS, [view(team_budget())], NOW).patch)["spec"][
        "schedulingGates"
    ] == [{"name": GATE}]


def test_what_is_never_held() -> None:
    """Kueue's workloads (its AdmissionCheck holds them), pods and Jobs a controller
    runs (their parent is held: a running Job is never left half-started), and work
    that arrives suspended (someone else's suspension)."""
    owner = {"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": "u", "controller": True}
    jobset = {**owner, "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet"}
    cronjob = {**owner, "kind": "CronJob"}
    never = [
        JobBuilder("kueue", NS).queue("lq").build(),
        PodBuilder("of-a-job", NS).build() | {},
        JobBuilder("suspended", NS).suspended().build(),
        PyTorchJobBuilder("suspended", NS).suspended().build(),
    ]
    never[1]["metadata"]["ownerReferences"] = [owner]
    child = JobBuilder("child", NS).build()
    child["metadata"]["ownerReferences"] = [jobset]
    never.append(child)
    for obj in never:
        verdict = admit(obj, LABELS, [view(team_budget())], NOW)
        assert (verdict.outcome, apply(obj, verdict.patch)) == ("ignored", obj), obj["metadata"]
    scheduled = JobBuilder("nightly", NS).build()
    scheduled["metadata"]["ownerReferences"] = [cronjob]
    assert how_held(scheduled) == "suspend", "a CronJob's Job is held like any Job"


@pytest.mark.parametrize(
    ("api_version", "kind"),
    [("v1", "ConfigMap"), ("example.com/v1", "Anything"), ("apps/v1", "Deployment")],
)
def test_a_pod_whose_controller_is_not_a_pod_controller_is_held(
    api_version: str, kind: str
) -> None:
    """Issue 25 (a): a controller reference is the pod creator's to write. Naming a
    ConfigMap (or any kind that does not create pods) made a bare pod unholdable."""
    pod = PodBuilder("sneaky", NS).build()
    owner = {"apiVersion": api_version, "kind": kind, "name": "x", "uid": "u", "controller": True}
    pod["metadata"]["ownerReferences"] = [owner]
    verdict = admit(pod, LABELS, [view(team_budget())], NOW)
    assert verdict.outcome == "held"
    assert apply(pod, verdict.patch)["spec"]["schedulingGates"] == [{"name": GATE}]


def test_a_hold_lapses_at_its_deadline_and_with_a_new_spec() -> None:
    job = JobBuilder("train", NS).build()
    budget = view(team_budget(), until=timedelta(seconds=30))
    assert admit(job, LABELS, [budget], NOW).outcome == "held"
    assert admit(job, LABELS, [budget], NOW + timedelta(seconds=30)).outcome == "allowed"
    raised = team_budget().build()
    raised["metadata"]["generation"] = 4  # the limit raised since the hold was decided
    raised["status"] = {
        "admission": {"holding": True, "holdUntil": "2026-12-05T00:00:00Z", "observedGeneration": 3}
    }
    stale = budget_view(raised)
    assert stale is not None
    assert stale.hold_until is None
    assert budget_view({"spec": {"mode": "Sometimes"}}) is None, "an invalid spec holds nothing"


def test_dry_run_only_warns_and_allow_lets_work_start() -> None:
    job = JobBuilder("train", NS).build()
    dry = admit(job, LABELS, [view(team_budget().dry_run())], NOW)
    assert dry.outcome == "would-hold"
    assert apply(job, dry.patch) == job
    assert "would be held (the budget is in DryRun)" in dry.warnings[0]
    allowing = team_budget().field("spec.enforcement.newWorkloads", "Allow")
    assert admit(job, LABELS, [view(allowing)], NOW).outcome == "allowed"


def test_out_of_scope_work_and_copied_marks() -> None:
    """Another team's Job starts; a manifest copied from a Job held by one of our budgets
    loses the hold marks (they are the operator's record of what it holds); a hold just
    made by another instance's webhook (a budget that is not ours) is left alone."""
    job = JobBuilder("train", "team-b").annotations({HELD_BY: "team-a", "keep": "me"}).build()
    verdict = admit(job, {"team": "b"}, [view(team_budget())], NOW)
    stored = apply(job, verdict.patch)
    assert verdict.outcome == "allowed"
    assert stored["metadata"]["annotations"] == {"keep": "me"}
    copied = JobBuilder("copy", NS).suspended().annotations({HELD_BY: "team-a"}).build()
    kept = apply(copied, admit(copied, LABELS, [view(team_budget())], NOW).patch)
    assert HELD_BY not in kept["metadata"]["annotations"]
    theirs = JobBuilder("theirs", NS).suspended().annotations({HELD_BY: "demo-budget"}).build()
    assert admit(theirs, LABELS, [view(team_budget())], NOW).patch == ()


def test_the_first_enforcing_budget_by_name_holds_dry_runs_add_warnings() -> None:
    job = JobBuilder("train", NS).build()
    budgets = [view(team_budget("z")), view(team_budget("b")), view(team_budget("a").dry_run())]
    verdict = admit(job, LABELS, budgets, NOW)
    assert verdict.held_by == "b"
    assert len(verdict.warnings) == 2
    assert "TrainingBudget a" in verdict.warnings[1]


def test_a_selector_scope_is_matched_against_the_pods_labels() -> None:
    scoped = BudgetBuilder("gpu-team").namespaces(NS).selector({"tier": "gpu"})
    budget = view(scoped.accelerator_hours(1).enforce())
    worker = PodBuilder("w").labels({"tier": "gpu"})
    held = JobSetBuilder("js", NS).replicated_job("workers", template=worker).build()
    other = JobSetBuilder("js2", NS).replicated_job("workers").build()
    assert admit(held, LABELS, [budget], NOW).outcome == "held"
    assert admit(other, LABELS, [budget], NOW).outcome == "allowed"


scalars = st.none() | st.booleans() | st.integers() | st.text(max_size=6)
json_values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)
fields = st.sampled_from(
    [
        "suspend",
        "template",
        "replicatedJobs",
        "runPolicy",
        "schedulingGates",
        "parallelism",
        "annotations",
        "labels",
        "ownerReferences",
        "namespace",
        "podSets",
        "rayClusterSpec",
    ]
)


@given(
    st.sampled_from(["Job", "Pod", "JobSet", "PyTorchJob", "RayJob", "Workload", "Deployment"]),
    st.dictionaries(fields, json_values, max_size=4),
    st.dictionaries(fields, json_values, max_size=3),
)
def test_whatever_a_tenant_submits_is_answered_never_raised(
    kind: str, spec: JSON, meta: JSON
) -> None:
    obj = JobBuilder("x", NS).build()
    obj["kind"], obj["spec"] = kind, {**obj["spec"], **spec}
    obj["metadata"].update(meta)
    verdict = admit(obj, LABELS, [view(team_budget())], NOW)
    assert verdict.outcome in ("held", "would-hold", "allowed", "ignored")


def test_the_view_reads_a_spec_the_api_accepts() -> None:
    spec = TrainingBudgetSpec.model_validate(team_budget().build()["spec"])
    assert spec.enforcement.new_workloads == "Hold", "holding is the default"
