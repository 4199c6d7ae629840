"""What one admission review may cost: `admit` reads at most what estimate.py's caps allow,
and each pod template once (issue 25: a 2.6 MiB JobSet of 9,000 replicated jobs took the
webhook's only thread 0.3 s, every one of 12 at once delaying every small review)."""

import base64
import datetime as dt
import functools
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trainwarden.admission.review import review_response
from trainwarden.admission.view import AdmissionView
from trainwarden.core import estimate
from trainwarden.core.estimate import MAX_CONTAINERS, MAX_ENTRIES, MAX_TEMPLATES, too_costly
from trainwarden.testing.builders import BudgetBuilder, JobBuilder
from webhook_views import fed_view

NOW = dt.datetime(2026, 12, 4, 12, 0, tzinfo=dt.UTC)
NAMESPACE = "ns-a"


def budget(name: str, *, dry_run: bool = False) -> dict[str, Any]:
    builder = BudgetBuilder(name).namespaces(NAMESPACE).accelerator_hours(1)
    body = (builder.dry_run() if dry_run else builder.enforce()).build()
    body["metadata"].update(uid=f"uid-{name}", generation=1)
    body["status"] = {"admission": {"holding": True, "holdUntil": "2026-12-04T12:05:00Z",
                                    "observedGeneration": 1}}  # fmt: skip
    return body


def view(*budgets: dict[str, Any]) -> AdmissionView:
    return fed_view(budgets, {NAMESPACE: {}})


def jobset(replicated: int, containers: int = 1) -> dict[str, Any]:
    pod = JobBuilder("x").gpus(1).build()["spec"]["template"]
    pod["spec"]["containers"] = pod["spec"]["containers"] * containers
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "big", "namespace": NAMESPACE},
        "spec": {
            "replicatedJobs": [
                {"name": f"rj{i}", "replicas": 1, "template": {"spec": {"template": pod}}}
                for i in range(replicated)
            ]
        },
    }


def review(obj: dict[str, Any]) -> dict[str, Any]:
    return {"request": {"uid": "r-1", "operation": "CREATE", "namespace": NAMESPACE, "object": obj}}


@pytest.fixture
def templates_read(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every pod template `demand` reads, by name, in order."""
    read: list[str] = []
    group = estimate._group

    def counted(name: str, count: int, template: object) -> estimate.PodGroup:
        read.append(name)
        return group(name, count, template)

    monkeypatch.setattr(estimate, "_group", counted)
    return read


def test_a_review_too_costly_to_read_is_let_through_unread(templates_read: list[str]) -> None:
    """9,000 replicated jobs (the 2.6 MiB review): not one template read, allowed with a
    warning that says why, its hold marks removed all the same."""
    big = jobset(9000)
    big["metadata"]["annotations"] = {"trainwarden.dev/held-by": "team"}
    answer, outcome = review_response(review(big), view(budget("team")), NOW)
    response = answer["response"]
    assert (outcome, response["allowed"]) == ("too-costly", True)
    assert templates_read == [], "nothing of it was read"
    assert response["warnings"] == [
        f"trainwarden: JobSet {NAMESPACE}/big was not checked against budgets: "
        f"more than {MAX_TEMPLATES} pod templates"
    ]
    patch = json.loads(base64.b64decode(response["patch"]))
    assert patch == [{"op": "remove", "path": "/metadata/annotations/trainwarden.dev~1held-by"}]


def test_each_template_is_read_once_per_review(templates_read: list[str]) -> None:
    """Held by one budget, warned by three DryRun ones: its 8 templates read once, not
    once for the scopes and again for each budget's message."""
    budgets = [budget("a-enforce"), *(budget(f"dry-{i}", dry_run=True) for i in range(3))]
    answer, outcome = review_response(review(jobset(8)), view(*budgets), NOW)
    assert outcome == "held"
    assert len(answer["response"]["warnings"]) == 4
    assert templates_read == [f"rj{i}" for i in range(8)]


def test_the_caps_are_more_than_real_workloads_have() -> None:
    assert too_costly(jobset(MAX_TEMPLATES)) is None
    assert too_costly(jobset(MAX_TEMPLATES + 1)) == f"more than {MAX_TEMPLATES} pod templates"
    assert too_costly(jobset(4, MAX_CONTAINERS // 4)) is None
    assert too_costly(jobset(4, MAX_CONTAINERS // 4 + 1)) == (
        f"more than {MAX_CONTAINERS} containers"
    )
    job = JobBuilder("labelled", NAMESPACE).build()
    job["metadata"]["labels"] = {f"l{i}": "v" for i in range(MAX_ENTRIES + 1)}
    assert too_costly(job) == f"more than {MAX_ENTRIES} labels, annotations and resource quantities"


# --- the counts, generated ---------------------------------------------------------------

KINDS = ("Pod", "Job", "JobSet", "PyTorchJob", "RayJob", "Workload")


@functools.cache
def _entries(prefix: str, count: int) -> dict[str, str]:
    """One dict per size, shared by every template that has it: cheap to generate."""
    return {f"{prefix}{j}": "1" for j in range(count)}


@st.composite
def manifests(draw: st.DrawFn) -> tuple[dict[str, Any], int, int, int]:
    """A manifest of any kind trainwarden estimates, and by a plain walk: its pod
    templates, containers, and the entries `demand` would read."""
    kind = draw(st.sampled_from(KINDS))
    count = 1 if kind in ("Pod", "Job") else draw(st.integers(0, MAX_TEMPLATES + 3))
    sizes = st.integers(0, 3) | st.sampled_from([MAX_CONTAINERS // 8, MAX_ENTRIES // 8])
    templates, containers, entries = [], 0, 0
    for _ in range(count):
        labels, inits, apps = draw(sizes), draw(st.integers(0, 2)), draw(sizes)
        requests = _entries("r", draw(sizes))
        app = {"name": "c", "resources": {"requests": requests, "limits": {"nvidia.com/gpu": 1}}}
        pod = {"containers": [app] * apps, "initContainers": [{"name": "i"}] * inits}
        containers += apps + inits
        entries += labels + apps * (len(requests) + 1)
        templates.append({"metadata": {"labels": _entries("l", labels)}, "spec": pod})
    meta = {"name": "m", "annotations": _entries("a", draw(sizes))}
    entries += len(meta["annotations"])
    return _manifest(kind, meta, templates), count, containers, entries


def _manifest(kind: str, meta: dict[str, Any], templates: list[dict[str, Any]]) -> dict[str, Any]:
    if kind == "Pod":  # its own metadata is its template's
        meta = {**meta, "labels": templates[0]["metadata"]["labels"]}
        return {"kind": "Pod", "metadata": meta, "spec": templates[0]["spec"]}
    if kind == "Job":
        return {"kind": "Job", "metadata": meta, "spec": {"template": templates[0]}}
    if kind == "JobSet":
        jobs = [{"name": f"j{i}", "template": {"spec": {"template": t}}}
                for i, t in enumerate(templates)]  # fmt: skip
        return {"kind": "JobSet", "metadata": meta, "spec": {"replicatedJobs": jobs}}
    if kind == "PyTorchJob":
        roles = {f"Role{i}": {"replicas": 1, "template": t} for i, t in enumerate(templates)}
        return {"kind": "PyTorchJob", "metadata": meta, "spec": {"pytorchReplicaSpecs": roles}}
    if kind == "RayJob":
        head, *workers = templates or [{}]
        groups = [{"groupName": f"g{i}", "template": t} for i, t in enumerate(workers)]
        cluster = {"headGroupSpec": {"template": head}, "workerGroupSpecs": groups}
        return {"kind": "RayJob", "metadata": meta, "spec": {"rayClusterSpec": cluster}}
    sets = [{"name": f"p{i}", "count": 1, "template": t} for i, t in enumerate(templates)]
    return {"kind": "Workload", "metadata": meta, "spec": {"podSets": sets}}


@settings(max_examples=1000, deadline=None)
@given(manifests())
def test_a_manifest_is_too_costly_exactly_when_it_is_over_a_cap(
    generated: tuple[dict[str, Any], int, int, int],
) -> None:
    """Counted without walking past a cap, the caps decide as a plain count would; and
    what passes is read whole by `demand`, template by template."""
    manifest, templates, containers, entries = generated
    if manifest["kind"] == "Pod":
        entries += len(manifest["metadata"].get("labels", {}))  # the pod's labels, its template's
    if manifest["kind"] == "RayJob" and templates == 0:
        templates = 1  # the head group, even when absent
    over = templates > MAX_TEMPLATES or containers > MAX_CONTAINERS or entries > MAX_ENTRIES
    found = too_costly(manifest)
    assert (found is not None) == over, (found, templates, containers, entries)
    if found is None:
        assert len(estimate.demand(manifest).groups) == templates
