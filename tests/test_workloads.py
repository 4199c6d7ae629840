"""The workload kinds table and trainwarden's marks."""

from trainwarden.adapters.workloads import label_value
from trainwarden.api.v1alpha1.names import CHECKPOINT_PIN
from trainwarden.core.reads import CODE
from trainwarden.core.workloads import (
    OwnerRef,
    WorkloadFacts,
    is_suspended,
    top_level,
    workload_facts,
)


def test_each_kind_reads_its_own_suspend_field() -> None:
    job = {"apiVersion": "batch/v1", "kind": "Job", "spec": {"suspend": True}}
    ptj = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "spec": {"runPolicy": {"suspend": True}},
    }
    ptj_running = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "spec": {"suspend": True}}
    pod = {"apiVersion": "v1", "kind": "Pod", "spec": {}}
    assert is_suspended(job)
    assert is_suspended(ptj)
    assert not is_suspended(ptj_running), "PyTorchJob suspends through runPolicy, not spec"
    assert not is_suspended(pod), "a pod has no suspend field: it is never 'suspended'"


def test_label_values_fit_kubernetes_limits() -> None:
    assert label_value("team-a") == "team-a"
    long = "b" * 200
    assert len(label_value(long)) <= 63
    assert label_value(long) != label_value("b" * 199)


def _facts(kind: str, uid: str, owner: tuple[str, str] | None = None) -> WorkloadFacts:
    api = {
        "Job": "batch/v1",
        "CronJob": "batch/v1",
        "JobSet": "jobset.x-k8s.io/v1alpha2",
        "RayCluster": "ray.io/v1",
    }
    refs = []
    if owner is not None:
        refs = [
            {
                "apiVersion": api[owner[0]],
                "kind": owner[0],
                "name": owner[1],
                "uid": owner[1],
                "controller": True,
            }
        ]
    return workload_facts(
        {
            "apiVersion": api[kind],
            "kind": kind,
            "metadata": {"name": uid, "namespace": "ns", "uid": uid, "ownerReferences": refs},
        },
        CODE,
    )


def test_a_pod_is_charged_to_the_top_level_workload_the_cache_knows() -> None:
    cache = {
        "js": _facts("JobSet", "js"),
        "child": _facts("Job", "child", ("JobSet", "js")),
        "plain": _facts("Job", "plain"),
        "orphan": _facts("Job", "orphan", ("JobSet", "unknown")),
        "other": _facts("Job", "other", ("CronJob", "unknown")),
    }
    found = top_level(OwnerRef("batch/v1", "Job", "child", "child"), "ns", cache.get)
    assert found is not None
    assert found.kind == "JobSet"
    plain = top_level(OwnerRef("batch/v1", "Job", "plain", "plain"), "ns", cache.get)
    assert plain is not None
    assert plain.uid == "plain"
    orphan = top_level(OwnerRef("batch/v1", "Job", "orphan", "orphan"), "ns", cache.get)
    assert orphan is None, "run by a JobSet not in the cache yet: unknown, never the child Job"
    other = top_level(OwnerRef("batch/v1", "Job", "other", "other"), "ns", cache.get)
    assert other is not None
    assert other.uid == "other", "an owner of a kind trainwarden does not suspend: the Job"
    assert top_level(OwnerRef("batch/v1", "Job", "gone", "gone"), "ns", cache.get) is None
    assert top_level(None, "ns", cache.get) is None


def test_workload_facts_keep_only_what_matters_and_survive_garbage() -> None:
    facts = workload_facts(
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {
                "name": "j",
                "namespace": "ns",
                "uid": "u",
                "creationTimestamp": "last Tuesday",
                "labels": {"team": "a", "trainwarden.dev/suspended-by": "b"},
                "annotations": {
                    "huge": "x" * 10_000,
                    "trainwarden.dev/note": "unread",
                    CHECKPOINT_PIN: "y" * 5000,
                },
            },
            "spec": {"suspend": True},
            "status": {
                "conditions": [{"type": "Complete", "status": "True", "lastTransitionTime": 7}]
            },
        },
        CODE,
    )
    assert facts.suspended
    assert dict(facts.labels) == {"trainwarden.dev/suspended-by": "b"}
    assert set(facts.annotations) == {CHECKPOINT_PIN}, "only what the code reads"
    assert len(facts.annotations[CHECKPOINT_PIN]) == 1024
    assert facts.finished_at is None
    assert facts.created.year == 1970
