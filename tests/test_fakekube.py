"""The fake API server behaves as the real one where reconcilers depend on it: identity and
versions, merge patches and preconditions, subresources, deletion, selectors, faults."""

import asyncio
import base64
from collections.abc import Coroutine
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fakekube import FakeKube, Forbidden, RecordedEvent, Write
from test_patches import RFC7386_EXAMPLES, json_objects
from trainwarden.adapters import workloads
from trainwarden.adapters.kube import JSON, Blocked, Conflict, Gone, Kube, Unreadable
from trainwarden.api.v1alpha1 import API_VERSION
from trainwarden.controllers.status import LastWrite, write_status
from trainwarden.core.patches import apply_merge_patch
from trainwarden.testing.apiserver import NotServed
from trainwarden.testing.selectors import matches, parse_selector

T = TypeVar("T")
NS = "team-a"
relaxed = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])


def run(call: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(call)


def job(name: str = "train", **spec: Any) -> JSON:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": NS, "labels": {"team": "a"}},
        "spec": {"suspend": False, **spec},
    }


def configmap(data: Any) -> JSON:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "cm", "namespace": NS},
        "data": data,
    }


def stored_job(fake: FakeKube, name: str = "train") -> JSON:
    found = fake.read("batch/v1", "Job", NS, name)
    assert found is not None
    return found


def test_the_fake_implements_the_port() -> None:
    kube: Kube = FakeKube()  # mypy checks the structural match
    assert kube is not None


# --- create, identity, copies -----------------------------------------------------------------


def test_create_assigns_identity_versions_and_the_clocks_time() -> None:
    clock = [datetime(2026, 3, 1, 12, 0, tzinfo=UTC)]
    fake = FakeKube(now=lambda: clock[0])
    first = run(fake.create(job("a")))
    clock[0] += timedelta(minutes=5)
    second = run(fake.create(configmap({"k": "v"})))
    assert first is not None
    assert second is not None
    assert first["metadata"]["creationTimestamp"] == "2026-03-01T12:00:00Z"
    assert second["metadata"]["creationTimestamp"] == "2026-03-01T12:05:00Z"
    assert first["metadata"]["generation"] == 1
    assert first["metadata"]["uid"] != second["metadata"]["uid"]
    versions = [int(o["metadata"]["resourceVersion"]) for o in (first, second)]
    assert versions[0] < versions[1], "one global counter across kinds"
    assert isinstance(first["metadata"]["resourceVersion"], str)


def test_create_of_an_existing_name_is_none_and_logged() -> None:
    fake = FakeKube([job()])
    assert run(fake.create(job())) is None
    assert fake.writes[-1].outcome == "AlreadyExists"


def test_create_drops_status_of_kinds_with_a_status_subresource() -> None:
    fake = FakeKube()
    created = run(fake.create({**job(), "status": {"active": 1}}))
    assert created is not None
    assert "status" not in created


def test_create_rules_for_names_namespaces_and_secrets() -> None:
    fake = FakeKube()
    node = run(
        fake.create(
            {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n", "namespace": "x"}}
        )
    )
    assert node is not None
    assert "namespace" not in node["metadata"], "cluster-scoped"
    with pytest.raises(ValueError, match="Namespace is required"):
        run(fake.create({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}}))
    event = run(
        fake.create(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"generateName": "x-", "namespace": NS},
            }
        )
    )
    assert event is not None
    assert event["metadata"]["name"].startswith("x-")
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s", "namespace": NS}}
    created = run(fake.create({**secret, "stringData": {"key": "s3cr3t"}}))
    assert created is not None
    assert "stringData" not in created
    assert base64.b64decode(created["data"]["key"]) == b"s3cr3t"


def test_nothing_returned_aliases_the_store() -> None:
    body = job()
    fake = FakeKube()
    created = run(fake.create(body))
    assert created is not None
    body["spec"]["suspend"] = True
    created["spec"]["suspend"] = True
    got = run(fake.get("batch/v1", "Job", NS, "train"))
    assert got is not None
    got["metadata"]["labels"]["team"] = "b"
    run(fake.list("batch/v1", "Job"))[0]["spec"]["x"] = 1
    patched = run(fake.merge_patch("batch/v1", "Job", NS, "train", {"spec": {"parallelism": 2}}))
    patched["spec"]["parallelism"] = 9
    assert stored_job(fake)["spec"] == {"suspend": False, "parallelism": 2}
    assert stored_job(fake)["metadata"]["labels"] == {"team": "a"}


# --- merge patch -------------------------------------------------------------------------------


@pytest.mark.parametrize(("original", "patch", "result"), RFC7386_EXAMPLES)
def test_the_rfc_examples_through_the_fake(original: Any, patch: Any, result: Any) -> None:
    fake = FakeKube([configmap(original)])
    written = run(fake.merge_patch("v1", "ConfigMap", NS, "cm", {"data": patch}))
    assert written.get("data") == result


@relaxed
@given(json_objects, json_objects)
def test_a_patch_does_what_apply_merge_patch_says(data: JSON, patch: JSON) -> None:
    fake = FakeKube([configmap(data)])
    written = run(fake.merge_patch("v1", "ConfigMap", NS, "cm", {"data": patch}))
    assert written.get("data") == apply_merge_patch(data, patch)


def test_a_patch_cannot_change_identity() -> None:
    fake = FakeKube([job()])
    before = stored_job(fake)["metadata"]
    hostile = {
        "name": "x",
        "namespace": "y",
        "generation": 7,
        "creationTimestamp": "2000-01-01T00:00:00Z",
    }
    after = run(
        fake.merge_patch("batch/v1", "Job", NS, "train", {"kind": "Pod", "metadata": hostile})
    )
    assert after["kind"] == "Job"
    for name in ("name", "namespace", "uid", "generation", "creationTimestamp"):
        assert after["metadata"][name] == before[name]


def test_resource_version_and_uid_in_a_patch_are_preconditions() -> None:
    fake = FakeKube([job()])
    read = stored_job(fake)["metadata"]
    fake.edit("batch/v1", "Job", NS, "train", {"metadata": {"labels": {"x": "1"}}})
    stale = {"metadata": {"resourceVersion": read["resourceVersion"]}, "spec": {"suspend": True}}
    with pytest.raises(Conflict, match=f"Job {NS}/train changed since it was read"):
        run(fake.merge_patch("batch/v1", "Job", NS, "train", stale))
    with pytest.raises(Conflict):
        run(fake.merge_patch("batch/v1", "Job", NS, "train", {"metadata": {"uid": "other"}}))
    assert stored_job(fake)["spec"]["suspend"] is False
    assert [w.outcome for w in fake.writes] == ["Conflict", "Conflict"]
    fresh = {"metadata": {"resourceVersion": stored_job(fake)["metadata"]["resourceVersion"]}}
    assert run(fake.merge_patch("batch/v1", "Job", NS, "train", fresh))["spec"]["suspend"] is False


def test_patching_a_missing_object_is_gone() -> None:
    with pytest.raises(Gone, match=f"Job {NS}/train no longer exists"):
        run(FakeKube().merge_patch("batch/v1", "Job", NS, "train", {"spec": {}}))


def test_generation_tracks_spec_and_resource_version_every_change() -> None:
    fake = FakeKube([job()])

    def patch(body: JSON, subresource: str | None = None) -> tuple[int, int]:
        meta = run(fake.merge_patch("batch/v1", "Job", NS, "train", body, subresource=subresource))[
            "metadata"
        ]
        return meta["generation"], int(meta["resourceVersion"])

    rv = int(stored_job(fake)["metadata"]["resourceVersion"])
    assert patch({"metadata": {"annotations": {"a": "1"}}}) == (1, rv + 1)
    assert patch({"status": {"active": 1}}, "status") == (1, rv + 2)
    assert patch({"spec": {"suspend": True}}) == (2, rv + 3)
    assert patch({"spec": {"suspend": True}}) == (2, rv + 3), "a no-op bumps nothing"
    assert fake.writes[-1].outcome == "unchanged"


def test_status_belongs_to_the_status_subresource() -> None:
    fake = FakeKube([{**job(), "status": {"active": 1}}])
    main = run(
        fake.merge_patch(
            "batch/v1", "Job", NS, "train", {"spec": {"suspend": True}, "status": {"active": 0}}
        )
    )
    assert main["status"] == {"active": 1}
    assert main["spec"]["suspend"] is True
    body = {
        "metadata": {"labels": {"x": "y"}},
        "spec": {"suspend": False},
        "status": {"active": 0, "failed": 1},
    }
    status = run(fake.merge_patch("batch/v1", "Job", NS, "train", body, subresource="status"))
    assert status["status"] == {"active": 0, "failed": 1}
    assert status["spec"]["suspend"] is True, "the status subresource writes only status"
    assert status["metadata"]["labels"] == {"team": "a"}, "metadata too is ignored there"


def test_kinds_without_a_status_subresource() -> None:
    thing = {
        "apiVersion": "example.com/v1",
        "kind": "Thing",
        "metadata": {"name": "t", "namespace": NS},
    }
    fake = FakeKube([thing])
    written = run(fake.merge_patch("example.com/v1", "Thing", NS, "t", {"status": {"ok": True}}))
    assert written["status"] == {"ok": True}
    assert written["metadata"]["generation"] == 2, "status is desired state without a subresource"
    with pytest.raises(NotServed):
        run(fake.merge_patch("example.com/v1", "Thing", NS, "t", {}, subresource="status"))
    custom = FakeKube([thing], status_subresource={("example.com/v1", "Thing")})
    ignored = run(custom.merge_patch("example.com/v1", "Thing", NS, "t", {"status": {"ok": True}}))
    assert "status" not in ignored


def test_scale_subresource() -> None:
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "d", "namespace": NS},
        "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "d"}}},
        "status": {"replicas": 3},
    }
    fake = FakeKube([deployment])
    scale = run(
        fake.merge_patch(
            "apps/v1", "Deployment", NS, "d", {"spec": {"replicas": 0}}, subresource="scale"
        )
    )
    stored = fake.read("apps/v1", "Deployment", NS, "d")
    assert stored is not None
    assert (scale["apiVersion"], scale["kind"]) == ("autoscaling/v1", "Scale")
    assert scale["spec"] == {"replicas": 0}
    assert scale["status"] == {"replicas": 3, "selector": "app=d"}
    assert scale["metadata"]["resourceVersion"] == stored["metadata"]["resourceVersion"]
    assert stored["spec"]["replicas"] == 0
    assert stored["metadata"]["generation"] == 2
    stale = {"metadata": {"resourceVersion": "1"}, "spec": {"replicas": 2}}
    with pytest.raises(Conflict):
        run(fake.merge_patch("apps/v1", "Deployment", NS, "d", stale, subresource="scale"))
    with pytest.raises(ValueError, match="non-negative"):
        run(
            fake.merge_patch(
                "apps/v1", "Deployment", NS, "d", {"spec": {"replicas": -1}}, subresource="scale"
            )
        )
    fake.put(job())
    with pytest.raises(NotServed):
        run(fake.merge_patch("batch/v1", "Job", NS, "train", {"spec": {}}, subresource="scale"))


# --- delete and evict ------------------------------------------------------------------------


def test_delete_exactly_what_was_read() -> None:
    fake = FakeKube([job()])
    meta = stored_job(fake)["metadata"]
    with pytest.raises(Conflict):
        run(
            fake.delete(
                "batch/v1",
                "Job",
                NS,
                "train",
                uid="other",
                resource_version=meta["resourceVersion"],
            )
        )
    with pytest.raises(Conflict):
        run(fake.delete("batch/v1", "Job", NS, "train", uid=meta["uid"], resource_version="0"))
    run(
        fake.delete(
            "batch/v1",
            "Job",
            NS,
            "train",
            uid=meta["uid"],
            resource_version=meta["resourceVersion"],
        )
    )
    assert fake.read("batch/v1", "Job", NS, "train") is None
    with pytest.raises(Gone):
        run(fake.delete("batch/v1", "Job", NS, "train", uid=meta["uid"], resource_version="1"))
    assert fake.writes[-2].body == {
        "preconditions": {"uid": meta["uid"], "resourceVersion": meta["resourceVersion"]}
    }


def test_finalizers_hold_a_deleted_object_until_removed() -> None:
    fake = FakeKube([{**job(), "metadata": {**job()["metadata"], "finalizers": ["x/y"]}}])
    meta = stored_job(fake)["metadata"]
    run(
        fake.delete(
            "batch/v1",
            "Job",
            NS,
            "train",
            uid=meta["uid"],
            resource_version=meta["resourceVersion"],
        )
    )
    assert stored_job(fake)["metadata"]["deletionTimestamp"] == "2026-01-01T00:00:00Z"
    run(fake.merge_patch("batch/v1", "Job", NS, "train", {"metadata": {"finalizers": None}}))
    assert fake.read("batch/v1", "Job", NS, "train") is None


def pod(name: str = "p") -> JSON:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": NS}}


def test_evict() -> None:
    fake = FakeKube([pod("p"), pod("protected")])
    p, protected = (fake.read("v1", "Pod", NS, n) for n in ("p", "protected"))
    assert p is not None
    assert protected is not None
    fake.block_eviction(NS, "protected")
    with pytest.raises(Blocked, match="PodDisruptionBudget"):
        run(
            fake.evict(
                NS,
                "protected",
                uid=protected["metadata"]["uid"],
                resource_version=protected["metadata"]["resourceVersion"],
            )
        )
    with pytest.raises(Conflict):
        run(fake.evict(NS, "p", uid=p["metadata"]["uid"], resource_version="0"))
    run(
        fake.evict(
            NS, "p", uid=p["metadata"]["uid"], resource_version=p["metadata"]["resourceVersion"]
        )
    )
    assert fake.read("v1", "Pod", NS, "p") is None
    run(fake.evict(NS, "p", uid="any", resource_version="1"))  # already gone: not an error
    assert [w.outcome for w in fake.writes_to("Pod", verb="evict")] == [
        "Blocked",
        "Conflict",
        "changed",
        "unchanged",
    ]
    fake.allow_eviction(NS, "protected")
    run(
        fake.evict(
            NS,
            "protected",
            uid=protected["metadata"]["uid"],
            resource_version=protected["metadata"]["resourceVersion"],
        )
    )
    assert fake.store == {}


# --- reads: served, forbidden, selectors -----------------------------------------------------


def test_kinds_not_served_and_forbidden() -> None:
    fake = FakeKube([job()], served={("batch/v1", "Job"), ("v1", "Pod")})
    assert run(fake.get("kubeflow.org/v1", "PyTorchJob", NS, "x")) is None
    assert run(fake.list("kubeflow.org/v1", "PyTorchJob")) == []
    with pytest.raises(NotServed):
        run(
            fake.create(
                {
                    "apiVersion": "ray.io/v1",
                    "kind": "RayJob",
                    "metadata": {"name": "r", "namespace": NS},
                }
            )
        )
    fake.unserve("batch/v1", "Job")
    assert run(fake.get("batch/v1", "Job", NS, "train")) is None
    fake.serve("batch/v1", "Job")
    assert run(fake.get("batch/v1", "Job", NS, "train")) is not None
    fake.forbid("batch/v1", "Job", "get", "list")
    assert run(fake.get("batch/v1", "Job", NS, "train")) is None, "403 on get reads as unknown"
    with pytest.raises(Forbidden):
        run(fake.list("batch/v1", "Job"))
    fake.forbid("v1", "Pod")
    with pytest.raises(Forbidden):
        run(fake.create(pod()))


def test_list_by_namespace_and_selector_in_key_order() -> None:
    def labelled(name: str, ns: str, **labels: str) -> JSON:
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": ns, "labels": labels},
        }

    fake = FakeKube(
        [
            labelled("b", "x", team="a"),
            labelled("a", "y", team="b"),
            labelled("a", "x", team="a", gpu="8"),
        ]
    )

    def names(**kw: Any) -> list[str]:
        return [
            f"{p['metadata']['namespace']}/{p['metadata']['name']}"
            for p in run(fake.list("v1", "Pod", **kw))
        ]

    assert names() == ["x/a", "x/b", "y/a"]
    assert names(namespace="x") == ["x/a", "x/b"]
    assert names(selector="team=a,!gpu") == ["x/b"]
    assert names(selector="team in (a, b),gpu") == ["x/a"]
    assert all(p["kind"] == "Pod" for p in run(fake.list("v1", "Pod")))
    with pytest.raises(ValueError, match="selector"):
        run(fake.list("v1", "Pod", selector="team=a,"))


LABELS = {"team": "a", "tier": "gpu", "trainwarden.dev/budget": "b1", "empty": ""}


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ("", True),
        ("team=a", True),
        ("team==a", True),
        ("team = a", True),
        ("team!=a", False),
        ("missing!=a", True),
        ("team", True),
        ("!team", False),
        ("!missing", True),
        ("team in (a,b)", True),
        ("team in (b)", False),
        ("team notin (b,c)", True),
        ("missing notin (a)", True),
        ("missing in (a)", False),
        ("trainwarden.dev/budget=b1,tier=gpu", True),
        ("trainwarden.dev/budget=b1,tier=cpu", False),
        ("empty=", True),
        ("empty in (a,)", True),
    ],
)
def test_selector_semantics(selector: str, expected: bool) -> None:
    assert matches(selector, LABELS) is expected


@pytest.mark.parametrize(
    "selector",
    [
        "team=a,",
        ",team",
        "team in ()",
        "team in a",
        "team in (a",
        "team a",
        "Bad_/x",
        "=a",
        "t=a b",
        "!",
        "team=(a)",
    ],
)
def test_invalid_selectors_are_rejected(selector: str) -> None:
    with pytest.raises(ValueError, match=r".+"):
        parse_selector(selector)


label_maps = st.dictionaries(st.sampled_from(["k", "j"]), st.sampled_from(["a", "b", "c", ""]))


@relaxed
@given(label_maps, st.sampled_from(["a", "b"]), st.sampled_from(["a", "c"]))
def test_selector_operators_relate_as_kubernetes_defines(
    labels: dict[str, str], v: str, w: str
) -> None:
    assert matches(f"k={v}", labels) == matches(f"k in ({v})", labels)
    assert matches(f"k!={v}", labels) == (not matches(f"k={v}", labels))
    assert matches(f"k notin ({v},{w})", labels) == (not matches(f"k in ({w},{v})", labels))
    assert matches("k", labels) == (not matches("!k", labels))
    assert matches(f"k={v},j", labels) == (matches(f"k={v}", labels) and matches("j", labels))


# --- events and secrets ----------------------------------------------------------------------


def test_events_are_recorded_and_never_raise() -> None:
    fake = FakeKube([job()])
    obj = stored_job(fake)
    run(fake.event(obj, type_="Warning", reason="Suspended", message="x" * 2000, action="Suspend"))
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1", "uid": "u"}}
    run(fake.event(node, type_="Normal", reason="Cordoned", message="idle", action="Cordon"))
    fake.fail_next("event", "Job", RuntimeError("apiserver down"))
    run(fake.event(obj, type_="Normal", reason="Lost", message="", action="Warn"))
    fake.forbid("v1", "Event")
    run(fake.event(obj, type_="Normal", reason="AlsoLost", message="", action="Warn"))
    [suspended] = fake.events_for("Job", "train")
    assert suspended == RecordedEvent(
        "batch/v1",
        "Job",
        NS,
        "train",
        obj["metadata"]["uid"],
        "Warning",
        "Suspended",
        "x" * 1024,
        "Suspend",
        at=datetime.now(UTC),
    )
    assert fake.reasons() == ["Suspended", "Cordoned"]
    assert fake.reasons("Node", "n1") == ["Cordoned"]
    assert fake.events_for("Node", "n1")[0].namespace is None


def test_secrets_decode_or_say_why_not() -> None:
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s3", "namespace": NS}}
    fake = FakeKube(
        [{**secret, "data": {"a": base64.b64encode(b"1").decode()}, "stringData": {"b": "2"}}]
    )
    assert run(fake.secret(NS, "s3", ("a", "b"))) == {"a": "1", "b": "2"}
    with pytest.raises(Unreadable, match=f"Secret {NS}/s3 has no key c, d"):
        run(fake.secret(NS, "s3", ("a", "c", "d")))
    with pytest.raises(Unreadable, match=f"Secret {NS}/other does not exist"):
        run(fake.secret(NS, "other", ("a",)))
    fake.forbid("v1", "Secret", "get")
    with pytest.raises(Unreadable, match=r"may not read Secret .* grant it by name"):
        run(fake.secret(NS, "s3", ("a",)))


# --- the write log and fault injection, with the real workload adapter ---------------------


def test_the_write_log_says_exactly_what_was_sent() -> None:
    fake = FakeKube([job()])
    read = stored_job(fake)
    run(workloads.suspend(fake, read, {"trainwarden.dev/suspended-by": "b"}, {"why": "spent"}))
    [write] = fake.writes
    assert write == Write(
        "patch",
        "batch/v1",
        "Job",
        NS,
        "train",
        None,
        {
            "spec": {"suspend": True},
            "metadata": {
                "resourceVersion": read["metadata"]["resourceVersion"],
                "labels": {"trainwarden.dev/suspended-by": "b"},
                "annotations": {"why": "spent"},
            },
        },
        "changed",
    )
    assert stored_job(fake)["spec"]["suspend"] is True


def test_a_concurrent_change_between_read_and_write_is_a_conflict() -> None:
    fake = FakeKube([job()])
    read = stored_job(fake)
    fake.on_next(
        "patch",
        "Job",
        lambda f: f.edit("batch/v1", "Job", NS, "train", {"spec": {"parallelism": 4}}),
    )
    with pytest.raises(Conflict):
        run(workloads.suspend(fake, read, {}, {}))
    assert stored_job(fake)["spec"] == {"suspend": False, "parallelism": 4}
    fake.on_next("patch", "Job", lambda f: f.drop("batch/v1", "Job", NS, "train"))
    with pytest.raises(Gone):
        run(workloads.suspend(fake, stored_job(fake), {}, {}))


def test_fail_next_raises_then_lets_calls_through() -> None:
    fake = FakeKube([job("a"), job("b")])
    fake.fail_next("patch", "Job", Conflict, times=2, name="a")
    fake.fail_next("get", "Job", TimeoutError("slow"))
    fake.fail_next("patch", "Job", Gone, subresource="status")
    with pytest.raises(TimeoutError, match="slow"):
        run(fake.get("batch/v1", "Job", NS, "a"))
    assert run(fake.get("batch/v1", "Job", NS, "a")) is not None
    run(fake.merge_patch("batch/v1", "Job", NS, "b", {"spec": {"parallelism": 1}}))
    for _ in range(2):
        with pytest.raises(Conflict, match="injected: patch Job"):
            run(fake.merge_patch("batch/v1", "Job", NS, "a", {"spec": {"parallelism": 1}}))
    with pytest.raises(Gone):
        run(fake.merge_patch("batch/v1", "Job", NS, "a", {"status": {}}, subresource="status"))
    run(fake.merge_patch("batch/v1", "Job", NS, "a", {"spec": {"parallelism": 1}}))
    assert [(w.name, w.outcome) for w in fake.writes] == [
        ("b", "changed"),
        ("a", "Conflict"),
        ("a", "Conflict"),
        ("a", "Gone"),
        ("a", "changed"),
    ]


def test_seeded_objects_keep_their_status_and_edits_bump_versions() -> None:
    fake = FakeKube([{**job(), "status": {"active": 1}}])
    before = stored_job(fake)
    assert before["status"] == {"active": 1}
    after = fake.edit("batch/v1", "Job", NS, "train", {"status": {"succeeded": 1}})
    assert after["status"] == {"active": 1, "succeeded": 1}
    assert int(after["metadata"]["resourceVersion"]) > int(before["metadata"]["resourceVersion"])
    assert after["metadata"]["generation"] == 1
    assert fake.writes == [], "another actor's change is not the code's write"


def test_a_status_write_is_conditional_on_the_version_read() -> None:
    budget = {
        "apiVersion": API_VERSION,
        "kind": "TrainingBudget",
        "metadata": {"name": "b"},
        "spec": {"limits": {"acceleratorHours": 1}},
    }
    fake = FakeKube([budget])
    read = fake.read(API_VERSION, "TrainingBudget", None, "b")
    assert read is not None
    last = LastWrite()
    run(write_status(fake, "TrainingBudget", read, last, {"percent": 50.0}))
    assert last.written is not None
    assert last.written["status"] == {"percent": 50.0}
    assert last.written["metadata"]["generation"] == 1, "a status write is not a new spec"
    [write] = fake.writes
    assert write.subresource == "status"
    assert write.body["metadata"] == {"resourceVersion": read["metadata"]["resourceVersion"]}
    with pytest.raises(Conflict):
        run(write_status(fake, "TrainingBudget", read, last, {"percent": 60.0}))


def test_server_side_apply_of_status_merges_map_lists_by_key_and_keeps_the_rest() -> None:
    """What Kueue's check controllers rely on: applying one entry of
    status.admissionChecks leaves the others (and spec, and conditions) as they were."""
    kueue = "kueue.x-k8s.io/v1beta2"
    fake = FakeKube()
    stored = fake.put(
        {
            "apiVersion": kueue,
            "kind": "Workload",
            "metadata": {"name": "wl", "namespace": NS},
            "spec": {"active": True},
            "status": {
                "conditions": [{"type": "QuotaReserved", "status": "True"}],
                "admissionChecks": [
                    {"name": "ours", "state": "Pending", "message": ""},
                    {"name": "theirs", "state": "Ready", "message": "ok"},
                ],
            },
        }
    )
    entry = {"name": "ours", "state": "Ready", "message": "paid"}
    body = {
        "apiVersion": kueue,
        "kind": "Workload",
        "metadata": {"name": "wl", "namespace": NS},
        "status": {"admissionChecks": [entry]},
        "spec": {"active": False},  # ignored: the status subresource writes status only
    }
    applied = run(fake.apply(body, field_manager="me", subresource="status"))
    assert applied["spec"] == {"active": True}
    assert applied["status"]["conditions"] == stored["status"]["conditions"]
    assert applied["status"]["admissionChecks"] == [
        entry,
        {"name": "theirs", "state": "Ready", "message": "ok"},
    ]
    stale = body | {"metadata": {**body["metadata"], "resourceVersion": "1"}}
    with pytest.raises(Conflict):
        run(fake.apply(stale, field_manager="me", subresource="status"))
