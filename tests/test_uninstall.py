"""`trainwarden release-all` (issue 26 item 4): before an uninstall, everything one operator
instance holds is released, and nothing else is touched. The decision (uninstall.py) is
checked against a model over generated clusters; the shell (release_all_command.py)
against the fake API server: what it patches, its Events, its idempotence, its dry run,
the Kueue route, a conflict."""

import argparse
import asyncio
import io
import json
import re
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from fakekube import FakeKube
from trainwarden import uninstall
from trainwarden.api.v1alpha1.names import (
    CORDONED_BY,
    HELD_AT,
    HELD_BY,
    HOLD_GATE,
    HOLD_REASON,
    IDLE_NODE_LABEL,
    INSTANCE_LABEL,
    RECLAIMED_BY,
    SUSPEND_REASON,
    SUSPENDED_BY,
)
from trainwarden.core.kueue import API_VERSION as KUEUE_API
from trainwarden.core.kueue import JOB_UID
from trainwarden.core.patches import apply_merge_patch
from trainwarden.core.workloads import KUEUE_QUEUE, label_value
from trainwarden.release_all_command import release_all, run
from trainwarden.testing.kueue import WorkloadBuilder

JSON = dict[str, Any]
API = "trainwarden.dev/v1alpha1"
LONG = "b" * 70  # a budget name longer than a label value: its label is hashed
NAMES = ["a", "b", "c", LONG]
INSTANCES = [None, "x", "y"]
UIDS = [f"u{i}" for i in range(8)]


def _meta(name: str, instance: str | None) -> JSON:
    return {"name": name, "labels": {INSTANCE_LABEL: instance} if instance else {}}


def budget(name: str, instance: str | None = None, suspended: tuple[str, ...] = ()) -> JSON:
    refs = [{"ref": {"kind": "Job", "name": u, "uid": u}} for u in suspended]
    return {
        "apiVersion": API,
        "kind": "TrainingBudget",
        "metadata": _meta(name, instance),
        "status": {"suspended": [{**r, "suspendedAt": "2026-01-01T00:00:00Z"} for r in refs]},
    }


def idle_policy(name: str, instance: str | None = None, idle: tuple[str, ...] = ()) -> JSON:
    return {
        "apiVersion": API,
        "kind": "IdleReclaimPolicy",
        "metadata": _meta(name, instance),
        "status": {"idleNodes": [{"name": n, "since": "2026-01-01T00:00:00Z"} for n in idle]},
    }


def job(
    uid: str,
    *,
    suspend: bool = True,
    labels: JSON | None = None,
    annotations: JSON | None = None,
    namespace: str = "team",
) -> JSON:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": f"job-{uid}",
            "namespace": namespace,
            "uid": uid,
            "resourceVersion": "1",
            "labels": dict(labels or {}),
            "annotations": dict(annotations or {}),
        },
        "spec": {"suspend": suspend},
    }


def pod(uid: str, gates: list[str], annotations: JSON | None = None) -> JSON:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"pod-{uid}",
            "namespace": "team",
            "uid": uid,
            "resourceVersion": "1",
            "annotations": dict(annotations or {}),
        },
        "spec": {"schedulingGates": [{"name": g} for g in gates]},
    }


def node(
    name: str, *, cordoned_by: str | None, unschedulable: bool = True, labelled: bool = True
) -> JSON:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "uid": f"uid-{name}",
            "resourceVersion": "1",
            "labels": {IDLE_NODE_LABEL: "true", "zone": "a"} if labelled else {"zone": "a"},
            "annotations": {CORDONED_BY: cordoned_by} if cordoned_by else {},
        },
        "spec": {"unschedulable": unschedulable},
    }


HELD = {HELD_BY: "a", HOLD_REASON: "exhausted", HELD_AT: "2026-01-01T00:00:00Z"}


# --- the decision, against a model --------------------------------------------------------

maybe_name = st.sampled_from([None, *NAMES, "other"])


@st.composite
def clusters(draw: st.DrawFn) -> tuple[str | None, JSON]:
    instance = draw(st.sampled_from(INSTANCES))
    budgets = [
        budget(n, draw(st.sampled_from(INSTANCES)), tuple(draw(st.sets(st.sampled_from(UIDS)))))
        for n in draw(st.sets(st.sampled_from(NAMES)))
    ]
    names = st.sampled_from([*NAMES, "other"])
    node_names = st.sets(st.sampled_from([f"n{i}" for i in range(5)]))
    policies = [
        idle_policy(n, draw(st.sampled_from(INSTANCES)), tuple(sorted(draw(node_names))))
        for n in draw(st.sets(names))
    ]
    jobs = []
    for uid in draw(st.lists(st.sampled_from(UIDS), unique=True)):
        labels, annotations = {}, {}
        if (held := draw(maybe_name)) is not None:
            annotations[HELD_BY] = held
        if (by := draw(maybe_name)) is not None:
            labels[SUSPENDED_BY] = label_value(by) if draw(st.booleans()) else by[:63]
        for key in draw(st.sets(st.sampled_from([KUEUE_QUEUE, RECLAIMED_BY]))):
            labels[key] = "q"
        jobs.append(job(uid, suspend=draw(st.booleans()), labels=labels, annotations=annotations))
    pods = []
    for i in range(draw(st.integers(0, 4))):
        gates = draw(st.lists(st.sampled_from([HOLD_GATE, "example.com/other"]), unique=True))
        held = draw(maybe_name)
        pods.append(pod(f"p{i}", gates, {HELD_BY: held} if held else {}))
        if draw(st.booleans()):
            pods[-1]["metadata"]["labels"] = {draw(st.sampled_from([KUEUE_QUEUE, "app"])): "v"}
    nodes = [
        node(
            f"n{i}",
            cordoned_by=draw(maybe_name),
            unschedulable=draw(st.booleans()),
            labelled=draw(st.booleans()),
        )
        for i in range(draw(st.integers(0, 4)))
    ]
    world = {"budgets": budgets, "policies": policies, "jobs": jobs, "pods": pods, "nodes": nodes}
    return instance, world


def _governed(objs: list[JSON], instance: str | None) -> set[str]:
    return {
        o["metadata"]["name"]
        for o in objs
        if o["metadata"].get("labels", {}).get(INSTANCE_LABEL) == instance
    }


def _model(instance: str | None, w: JSON) -> set[tuple[str, str, str]]:
    """(verb, uid, policy) of every release owed, written from the rule, not the code."""
    budgets = _governed(w["budgets"], instance)
    idle = _governed(w["policies"], instance)
    record = {
        b["metadata"]["name"]: {s["ref"]["uid"] for s in b["status"]["suspended"]}
        for b in w["budgets"]
        if b["metadata"]["name"] in budgets
    }
    owed = set()
    for j in w["jobs"]:
        meta, held = j["metadata"], j["metadata"]["annotations"].get(HELD_BY)
        foreign = {KUEUE_QUEUE, SUSPENDED_BY, RECLAIMED_BY} & set(meta["labels"])
        if held in budgets and j["spec"]["suspend"] and not foreign:
            owed.add(("start", meta["uid"], held))
            continue
        for b in budgets:
            mine = meta["labels"].get(SUSPENDED_BY) == label_value(b)
            if mine and j["spec"]["suspend"] and meta["uid"] in record[b]:
                owed.add(("resume", meta["uid"], b))
    for p in w["pods"]:
        held, labels = p["metadata"]["annotations"].get(HELD_BY), p["metadata"].get("labels", {})
        gated = {"name": HOLD_GATE} in p["spec"]["schedulingGates"]
        if held in budgets and gated and KUEUE_QUEUE not in labels:
            owed.add(("start", p["metadata"]["uid"], held))
    reported = {
        p["metadata"]["name"]: {i["name"] for i in p["status"]["idleNodes"]} for p in w["policies"]
    }
    others = set().union(*(r for p, r in reported.items() if p not in idle))
    for n in w["nodes"]:
        name, labelled = n["metadata"]["name"], IDLE_NODE_LABEL in n["metadata"]["labels"]
        if (mark := n["metadata"]["annotations"].get(CORDONED_BY)) in idle:
            owed.add(("uncordon", n["metadata"]["uid"], mark))
            continue
        by = sorted(p for p in idle if name in reported[p])
        if labelled and by and name not in others:
            owed.add(("unlabel", n["metadata"]["uid"], by[0]))
    return owed


def _changed(before: JSON, after: JSON) -> set[str]:
    """The dotted paths (two levels deep) a patch changed."""
    paths = set()
    for top in set(before) | set(after):
        a, b = before.get(top), after.get(top)
        if isinstance(a, dict) and isinstance(b, dict):
            paths |= {f"{top}.{k}" for k in set(a) | set(b) if a.get(k) != b.get(k)}
        elif a != b:
            paths.add(top)
    return paths


@settings(max_examples=1000, deadline=None)
@given(clusters())
def test_every_release_is_owed_by_the_instance_and_nothing_else_is_touched(
    drawn: tuple[str | None, JSON],
) -> None:
    """Invariant: every action targets an object whose mark names one of the instance's
    policies and, for a resume, whose uid that budget records; every such object gets one
    action; a patch changes only the suspend field or our gate or the cordon, and marks."""
    instance, w = drawn
    actions = uninstall.release(
        instance, w["budgets"], w["policies"], w["jobs"], w["pods"], w["nodes"]
    )
    got = [(a.verb, a.uid, a.policy) for a in actions]
    assert len(got) == len(set(got))
    assert set(got) == _model(instance, w)
    for a in actions:
        patch = uninstall.patch(a)
        if patch is None:
            assert a.verb == "resume"
            continue
        after = apply_merge_patch(a.obj, patch)
        allowed = {"metadata.annotations", "metadata.labels", "metadata.resourceVersion"}
        allowed |= {
            "start": {"spec.suspend", "spec.schedulingGates"},
            "uncordon": {"spec.unschedulable"},
            "unlabel": set(),
        }[a.verb]
        assert _changed(dict(a.obj), after) <= allowed
        if a.verb == "unlabel":
            assert after["metadata"]["labels"] == {"zone": "a"}
        elif a.verb == "uncordon":
            assert after["spec"]["unschedulable"] is False
            assert after["metadata"]["labels"] == {"zone": "a"}
            assert CORDONED_BY not in after["metadata"]["annotations"]
        elif a.obj["kind"] == "Pod":
            kept = [g for g in a.obj["spec"]["schedulingGates"] if g["name"] != HOLD_GATE]
            assert after["spec"]["schedulingGates"] == kept
        else:
            assert after["spec"]["suspend"] is False
        assert not {HELD_BY, HOLD_REASON, HELD_AT} & set(after["metadata"].get("annotations", {}))


# --- the shell, against the fake API server -----------------------------------------------


def _world() -> FakeKube:
    return FakeKube(
        [
            budget("a", suspended=("s1", "s3")),
            budget("other", instance="x", suspended=("s2",)),
            idle_policy("idle", idle=("n4", "n5")),
            idle_policy("theirs", instance="x", idle=("n5",)),
            job("h1", annotations=HELD),  # held by our budget: started
            job("h2", annotations={**HELD, HELD_BY: "other"}),  # another instance's hold
            job("s1", labels={SUSPENDED_BY: "a"}, annotations={SUSPEND_REASON: "over"}),
            job("s2", labels={SUSPENDED_BY: "other"}),  # another instance's suspension
            job("s3", suspend=False, labels={SUSPENDED_BY: "a"}),  # resumed by someone since
            job("s4", labels={SUSPENDED_BY: "a"}),  # labelled, not recorded: forged
            job("own"),  # suspended by its owner
            pod("p1", [HOLD_GATE, "example.com/other"], HELD),
            pod("p2", ["example.com/other"]),
            node("n1", cordoned_by="idle"),
            node("n2", cordoned_by=None),  # an admin's cordon
            node("n3", cordoned_by="someone"),
            node("n4", cordoned_by=None, unschedulable=False),  # labelled idle, not cordoned
            node("n5", cordoned_by=None, unschedulable=False),  # another instance reports it
        ]
    )


def _run(kube: FakeKube, instance: str | None = None, *, dry_run: bool = False) -> tuple[int, str]:
    """The exit code and what it printed."""
    out = io.StringIO()
    return asyncio.run(release_all(kube, instance, dry_run=dry_run, out=out)), out.getvalue()


def test_release_all_releases_exactly_the_instances_holds_suspensions_and_cordons() -> None:
    kube = _world()
    code, out = _run(kube)
    assert code == 0
    assert out.splitlines() == [
        "start Job/team/job-h1 (TrainingBudget a)",
        "resume Job/team/job-s1 (TrainingBudget a)",
        "start Pod/team/pod-p1 (TrainingBudget a)",
        "uncordon Node/n1 (IdleReclaimPolicy idle)",
        "unlabel Node/n4 (IdleReclaimPolicy idle)",
    ]
    patched = {(w.kind, w.name) for w in kube.writes if w.verb == "patch"}
    assert patched == {
        ("Job", "job-h1"),
        ("Job", "job-s1"),
        ("Pod", "pod-p1"),
        ("Node", "n1"),
        ("Node", "n4"),
    }
    h1, s1 = (
        kube.read("batch/v1", "Job", "team", "job-h1"),
        kube.read("batch/v1", "Job", "team", "job-s1"),
    )
    assert h1 is not None
    assert s1 is not None
    assert h1["spec"]["suspend"] is False
    assert HELD_BY not in h1["metadata"]["annotations"]
    assert s1["spec"]["suspend"] is False
    assert SUSPENDED_BY not in s1["metadata"]["labels"]
    p1 = kube.read("v1", "Pod", "team", "pod-p1")
    assert p1 is not None
    assert p1["spec"]["schedulingGates"] == [{"name": "example.com/other"}]
    n1, n2 = kube.read("v1", "Node", None, "n1"), kube.read("v1", "Node", None, "n2")
    assert n1 is not None
    assert n2 is not None
    assert n1["spec"]["unschedulable"] is False
    assert IDLE_NODE_LABEL not in n1["metadata"]["labels"]
    assert n2["spec"]["unschedulable"] is True
    n4, n5 = kube.read("v1", "Node", None, "n4"), kube.read("v1", "Node", None, "n5")
    assert n4 is not None
    assert n5 is not None
    assert n4["metadata"]["labels"] == {"zone": "a"}
    assert n5["metadata"]["labels"][IDLE_NODE_LABEL] == "true"
    for kind, name in patched:
        said = [(e.reason, e.message) for e in kube.events_for(kind, name)]
        assert said == [("ReleasedOnUninstall", uninstall.REASON)]
    # Idempotent: a second run finds nothing and says so.
    assert _run(kube) == (
        0,
        "nothing to release: the default instance holds, suspends and cordons nothing\n",
    )
    assert len([w for w in kube.writes if w.verb == "patch"]) == 5


def test_another_instance_releases_only_its_own() -> None:
    kube = _world()
    code, out = _run(kube, "x")
    assert code == 0
    assert out.splitlines() == [
        "start Job/team/job-h2 (TrainingBudget other)",
        "resume Job/team/job-s2 (TrainingBudget other)",
    ]


def test_dry_run_lists_exactly_what_it_would_do_and_changes_nothing() -> None:
    kube = _world()
    code, out = _run(kube, dry_run=True)
    assert code == 0
    assert out.startswith("would ")
    assert not kube.writes
    assert not kube.events
    assert _run(kube) == (0, re.sub(r"(?m)^would ", "", out))


def test_a_changed_object_is_not_released_and_the_exit_code_says_so() -> None:
    kube = _world()
    kube.on_next(
        "patch",
        "Job",
        lambda f: f.edit("batch/v1", "Job", "team", "job-h1", {"metadata": {"labels": {"x": "y"}}}),
        name="job-h1",
    )
    code, out = _run(kube)
    assert code == 1
    assert "not done: start Job/team/job-h1" in out
    assert kube.events_for("Job", "job-h1") == []


def _kueue_world(deactivated_by: str) -> FakeKube:
    """A Kueue-managed Job budget `a` suspended through its Workload; the Workload's
    suspended-by label says who deactivated it."""
    kube = _world()
    marks = {SUSPENDED_BY: "a", KUEUE_QUEUE: "q"}
    listed = kube.put(job("s1", labels=marks, annotations={SUSPEND_REASON: "over"}))
    workload = WorkloadBuilder("job-s1-w", "team").owned_by(listed).active(False)
    workload.labels({JOB_UID: listed["metadata"]["uid"], SUSPENDED_BY: deactivated_by})
    kube.put(workload.build())
    return kube


def test_a_kueue_managed_suspension_is_resumed_through_its_workload_as_the_budget_does() -> None:
    kube = _kueue_world("a")
    code, out = _run(kube)
    assert code == 0
    assert "resume Job/team/job-s1 through its Kueue Workload (TrainingBudget a)" in out
    workload = kube.read(KUEUE_API, "Workload", "team", "job-s1-w")
    s1 = kube.read("batch/v1", "Job", "team", "job-s1")
    assert workload is not None
    assert s1 is not None
    assert workload["spec"]["active"] is True
    assert SUSPENDED_BY not in workload["metadata"]["labels"]
    assert SUSPENDED_BY not in s1["metadata"]["labels"]
    assert s1["spec"]["suspend"] is True  # Kueue starts it once admitted again


def test_a_workload_someone_else_deactivated_stays_deactivated() -> None:
    kube = _kueue_world("someone")
    code, out = _run(kube)
    assert code == 1
    assert "deactivated by someone else" in out
    workload = kube.read(KUEUE_API, "Workload", "team", "job-s1-w")
    assert workload is not None
    assert workload["spec"]["active"] is False
    assert not kube.writes_to("Workload")


def _operator(kube: FakeKube) -> None:
    """The chart's Deployment and one pod of it (and the hook's own pod, not of it)."""
    selector = {"app.kubernetes.io/name": "trainwarden", "app.kubernetes.io/instance": "tw"}
    kube.put(
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "tw", "namespace": "tw-system"},
            "spec": {"replicas": 2, "selector": {"matchLabels": selector}},
        }
    )
    for name, labels in (
        ("tw-1", selector),
        ("hook", {"app.kubernetes.io/component": "uninstall"}),
    ):
        kube.put(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": name, "namespace": "tw-system", "labels": labels},
            }
        )


def test_the_operator_is_scaled_to_zero_and_its_pods_gone_before_anything_is_released() -> None:
    kube = _world()
    _operator(kube)
    kube.on_next("list", "Pod", lambda f: f.drop("v1", "Pod", "tw-system", "tw-1"), times=2)
    args = argparse.Namespace(
        stop_operator="tw-system/tw", stop_timeout=10.0, instance=None, output="table"
    )
    assert asyncio.run(run(kube, argparse.Namespace(**vars(args), dry_run=False))) == 0
    first = kube.writes[0]
    assert (first.kind, first.subresource, first.body) == (
        "Deployment",
        "scale",
        {"spec": {"replicas": 0}},
    )
    assert kube.read("v1", "Pod", "tw-system", "hook") is not None  # not the operator's
    assert len([w for w in kube.writes if w.verb == "patch"]) == 6  # the scale and 5 releases


def test_an_operator_that_does_not_stop_releases_nothing() -> None:
    kube = _world()
    _operator(kube)
    args = argparse.Namespace(
        stop_operator="tw-system/tw", stop_timeout=0.2, instance=None, output="table"
    )
    assert asyncio.run(run(kube, argparse.Namespace(**vars(args), dry_run=False))) == 1
    assert [w.kind for w in kube.writes] == ["Deployment"]


@pytest.mark.parametrize("form", ["json", "yaml"])
def test_o_json_and_yaml_give_one_document_of_the_same_releases(form: str) -> None:
    code, out = asyncio.run(_document(_world(), form))
    assert code == 0
    found = json.loads(out) if form == "json" else yaml.safe_load(out)
    assert found["dryRun"] is True
    assert found["instance"] == ""
    assert [(r["verb"], r["kind"], r.get("namespace"), r["name"]) for r in found["releases"]] == [
        ("start", "Job", "team", "job-h1"),
        ("resume", "Job", "team", "job-s1"),
        ("start", "Pod", "team", "pod-p1"),
        ("uncordon", "Node", None, "n1"),
        ("unlabel", "Node", None, "n4"),
    ]
    assert {r["result"] for r in found["releases"]} == {"would"}
    assert found["releases"][3]["policyKind"] == "IdleReclaimPolicy"


async def _document(kube: FakeKube, form: str) -> tuple[int, str]:
    out = io.StringIO()
    code = await release_all(kube, None, dry_run=True, out=out, output=form)
    return code, out.getvalue()
