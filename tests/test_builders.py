"""The test builders make the shapes the operator reads: policies round-trip through the API
models (and invalid ones fail at build time), workloads read as the core reads them."""

import asyncio
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

import pytest
from pydantic import ValidationError

from fakekube import FakeKube
from trainwarden.adapters import workloads
from trainwarden.api.v1alpha1 import CheckpointPolicySpec, IdleReclaimPolicySpec, TrainingBudgetSpec
from trainwarden.controllers.base import PolicyController
from trainwarden.core.keep import Keep
from trainwarden.core.locations import training_job
from trainwarden.core.nodes import node_facts
from trainwarden.core.pods import OwnerRef, controller_owner, effective_requests, snapshot
from trainwarden.core.reads import CODE
from trainwarden.core.workloads import is_suspended
from trainwarden.storage.snapshots import read as read_snapshot
from trainwarden.testing.builders import (
    BudgetBuilder,
    CheckpointPolicyBuilder,
    DeploymentBuilder,
    IdlePolicyBuilder,
    JobBuilder,
    JobSetBuilder,
    NamespaceBuilder,
    NodeBuilder,
    PersistentVolumeBuilder,
    PodBuilder,
    PVCBuilder,
    PyTorchJobBuilder,
    RayClusterBuilder,
    RayJobBuilder,
    SecretBuilder,
    StatefulSetBuilder,
    VolumeSnapshotBuilder,
)

T = datetime(2026, 5, 1, 9, 0, tzinfo=UTC)
NS = "research"
KEEP = CODE | Keep(
    pod_labels=frozenset({"team"}), node_labels=frozenset({"nvidia.com/gpu.product"})
)


# --- policies ---------------------------------------------------------------------------------


def test_a_budget_is_the_manifest_the_e2e_harness_writes_by_hand() -> None:
    built = (
        BudgetBuilder("research-gpu-daily")
        .enforce()
        .namespaces(NS)
        .period("Daily")
        .accelerator_hours(0.005)
        .grace("0s")
        .build()
    )
    assert built == {
        "apiVersion": "trainwarden.dev/v1alpha1",
        "kind": "TrainingBudget",
        "metadata": {"name": "research-gpu-daily"},
        "spec": {
            "mode": "Enforce",
            "scope": {"namespaces": [NS]},
            "period": {"type": "Daily"},
            "limits": {"acceleratorHours": 0.005},
            "enforcement": {"gracePeriod": "0s"},
        },
    }


def test_every_budget_field_round_trips_through_the_model() -> None:
    builder = (
        BudgetBuilder("vision")
        .namespace_selector({"team": "vision"}, expressions=[("tier", "In", ["gpu"])])
        .selector({"trainwarden.dev/budget": "vision"})
        .period("Monthly", time_zone="Europe/Paris")
        .accelerator_hours(2000)
        .accelerator_hours(500, resource="nvidia.com/gpu")
        .cpu_core_hours(100)
        .memory_gib_hours(400)
        .cost(6000, currency="EUR")
        .accelerator_rate(3.9, node_labels={"nvidia.com/gpu.product": "H100"})
        .accelerator_rate(1.8, resource="nvidia.com/gpu")
        .cpu_core_rate(0.01)
        .memory_gib_rate(0.002)
        .thresholds(warn=70, enforce=110)
        .grace(timedelta(minutes=10))
        .order("Largest", "Newest")
        .resume("Never")
        .max_suspensions_per_minute(3)
        .accelerators("nvidia.com/gpu")
        .attribution_labels("team")
        .history_limit(3)
        .labels(env="test")
    )
    built = builder.build()
    spec = TrainingBudgetSpec.model_validate(built["spec"])
    assert spec == builder.model().spec
    assert spec.limits.accelerator_hours_by_resource == {"nvidia.com/gpu": 500}
    assert spec.enforcement.grace_period == timedelta(minutes=10)
    assert built["spec"]["enforcement"]["gracePeriod"] == "10m"
    assert built["metadata"]["labels"] == {"env": "test"}
    assert spec.rates is not None
    assert spec.rates.accelerator_hour[0].node_selector == {"nvidia.com/gpu.product": "H100"}


def test_the_idle_and_checkpoint_policies_of_the_e2e_tests_and_samples() -> None:
    idle = (
        IdlePolicyBuilder("notebooks")
        .enforce()
        .namespaces(NS)
        .signal(threshold=5, window="30s", resolution="10s", warmup="5s", query="U")
        .grace("15s")
        .action("ScaleDown")
        .lease("72h", labels={"workload": "interactive"})
        .allow_opt_out(max_keep="12h")
        .exempt_priority_classes("production")
        .idle_nodes(after="5s", cordon=True, label=True, node_labels={"e2e": "x"})
        .max_actions_per_minute(2)
        .estimate_horizon("2h")
        .node_labels("nvidia.com/gpu.product")
        .accelerators("amd.com/gpu")
    )
    assert IdleReclaimPolicySpec.model_validate(idle.build()["spec"]) == idle.model().spec
    assert idle.build()["spec"]["idleNodes"]["nodeSelector"] == {"matchLabels": {"e2e": "x"}}
    checkpoints = (
        CheckpointPolicyBuilder("hf-runs")
        .namespaces("vision", NS)
        .pvc("/checkpoints", labels={"checkpoints": "hf"}, from_workload_annotation=False)
        .snapshots({"checkpoints": "snap"}, allow_delete=True)
        .s3("http://s3.local:9000", "ckpts", secret=(NS, "store"), prefix="runs", region="eu")
        .layout("Glob", glob="ckpt-*", step_pattern=r"ckpt-(\d+)")
        .keep_last(3)
        .keep_every(steps=5000)
        .keep_best("eval_loss", order="Min", count=2)
        .max_age("14d")
        .max_total_size("2Ti")
        .min_age("15m")
        .after_completion(keep_last=1, keep_best="eval_loss", delay="2h")
        .cron("0 3 * * *", time_zone="Europe/Berlin")
        .max_deletions_per_run(100)
    )
    built = checkpoints.build()
    assert CheckpointPolicySpec.model_validate(built["spec"]) == checkpoints.model().spec
    assert built["spec"]["storage"]["s3"]["credentials"] == {"namespace": NS, "name": "store"}
    assert built["spec"]["afterCompletion"]["keepBest"] == {"metric": "eval_loss"}


@pytest.mark.parametrize(
    ("builder", "field"),
    [
        (BudgetBuilder("b").namespaces(NS), "spec.limits"),
        (BudgetBuilder("b").accelerator_hours(1), "spec.scope"),
        (BudgetBuilder("b").namespaces("Not_A_Namespace").accelerator_hours(1), "namespaces"),
        (BudgetBuilder("b").namespaces(NS).accelerator_hours(-1), "acceleratorHours"),
        (BudgetBuilder("b").namespaces(NS).accelerator_hours(1).grace("5x"), "gracePeriod"),
        (BudgetBuilder("b").namespaces(NS).accelerator_hours(1).period("Fortnightly"), "type"),
        (
            BudgetBuilder("b").namespaces(NS).accelerator_hours(1).period("Daily", time_zone="X"),
            "timeZone",
        ),
        (BudgetBuilder("b").namespaces(NS).accelerator_hours(1).order("Random"), "order"),
        (IdlePolicyBuilder("i").namespaces(NS).action("Explode"), "action"),
        (IdlePolicyBuilder("i").namespaces(NS).signal(window="1m", resolution="1m"), "signal"),
        (IdlePolicyBuilder("i").namespaces(NS).signal(threshold=101), "threshold"),
        (CheckpointPolicyBuilder("c").namespaces(NS), "storage"),
        (CheckpointPolicyBuilder("c").namespaces(NS).pvc().layout("Glob"), "layout"),
        (CheckpointPolicyBuilder("c").namespaces(NS).pvc().keep_every(), "keepEvery"),
        (CheckpointPolicyBuilder("c").namespaces(NS).pvc().cron("61 * * * *"), "schedule"),
        (CheckpointPolicyBuilder("c").namespaces(NS).s3("ftp://x", "b", secret=("a", "b")), "s3"),
    ],
)
def test_an_invalid_builder_call_fails_at_build_time(builder: Any, field: str) -> None:
    with pytest.raises(ValidationError, match=field):
        builder.build()


def test_unchecked_keeps_a_deliberately_invalid_policy_as_written() -> None:
    builder = (
        BudgetBuilder("typo")
        .namespaces(NS)
        .accelerator_hours(50)
        .period("Daily", time_zone="Europe/Pariss")
    )
    assert builder.unchecked()["spec"]["period"] == {"type": "Daily", "timeZone": "Europe/Pariss"}
    negative = builder.field("spec.limits.acceleratorHours", -10).field("spec.period", None)
    assert negative.unchecked()["spec"] == {
        "scope": {"namespaces": [NS]},
        "limits": {"acceleratorHours": -10},
    }


def test_a_policy_of_an_instance_is_governed_by_that_instance_alone() -> None:
    labelled = BudgetBuilder("b").namespaces(NS).accelerator_hours(1).instance("demo").build()
    plain = BudgetBuilder("b").namespaces(NS).accelerator_hours(1).build()
    assert labelled["metadata"]["labels"] == {"trainwarden.dev/instance": "demo"}

    def governs(instance: str | None, policy: dict[str, Any]) -> bool:
        # ours() reads only the controller's instance: any object with one stands in.
        return PolicyController.ours(SimpleNamespace(instance=instance), policy)  # type: ignore[arg-type]

    assert governs("demo", labelled)
    assert not governs(None, labelled)
    assert not governs("other", labelled)
    assert governs(None, plain)
    assert not governs("demo", plain)


def test_build_returns_a_fresh_dict_each_time() -> None:
    builder = BudgetBuilder("b").namespaces(NS).accelerator_hours(1)
    first = builder.build()
    first["spec"]["scope"]["namespaces"].append("other")
    first["metadata"]["name"] = "x"
    assert builder.build()["spec"]["scope"]["namespaces"] == [NS]
    pod = PodBuilder("p", NS)
    pod.build()["spec"]["containers"].clear()
    assert pod.build()["spec"]["containers"]


# --- pods and workloads -----------------------------------------------------------------------


def test_a_pod_reads_as_accounting_reads_it() -> None:
    job = JobBuilder("train", NS).uid("job-uid").build()
    pod = (
        PodBuilder("train-0", NS)
        .gpus(8)
        .cpu("4")
        .memory("16Gi")
        .labels(team="vision")
        .owned_by(job)
        .node("gpu-a100-0")
        .priority(100, class_name="high")
        .started(T)
        .finished(T + timedelta(hours=2), "Failed")
        .build()
    )
    assert effective_requests(pod["spec"]) == {
        "nvidia.com/gpu": 8,
        "cpu": 4,
        "memory": 16 * 2**30,
    }
    seen = snapshot(pod, KEEP)
    assert (seen.start, seen.end, seen.outcome) == (T, T + timedelta(hours=2), "Failed")
    assert seen.labels == {"team": "vision"}
    assert controller_owner(pod) == OwnerRef("batch/v1", "Job", "train", "job-uid")
    assert pod["spec"]["nodeName"] == "gpu-a100-0"
    assert (pod["spec"]["priority"], pod["spec"]["priorityClassName"]) == (100, "high")


def test_a_running_pod_has_no_end_and_an_owner_needs_a_uid() -> None:
    seen = snapshot(PodBuilder("p", NS).gpus(1).started(T).build(), KEEP)
    assert (seen.start, seen.end, seen.outcome) == (T, None, "Running")
    with pytest.raises(ValueError, match="no uid"):
        PodBuilder("p", NS).owned_by(JobBuilder("j", NS).build())


def test_the_e2e_jobs_shape() -> None:
    job = (
        JobBuilder("idle", NS)
        .labels(team="a")
        .pod_labels(team="a")
        .pod_annotations({"trainwarden.dev/exempt": "true"})
        .suspended(False)
        .backoff_limit(0)
        .gpus(1)
        .cpu("1")
        .termination_grace(0)
        .build()
    )
    assert job["spec"]["suspend"] is False
    assert job["spec"]["backoffLimit"] == 0
    template = job["spec"]["template"]
    assert template["metadata"] == {
        "labels": {"team": "a"},
        "annotations": {"trainwarden.dev/exempt": "true"},
    }
    assert template["spec"] == {
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": 0,
        "containers": [
            {
                "name": "trainer",
                "image": "example.invalid/trainer:1",
                "resources": {
                    "requests": {"cpu": "1", "nvidia.com/gpu": "1"},
                    "limits": {"nvidia.com/gpu": "1"},
                },
            }
        ],
    }


def test_a_manifest_without_a_namespace_gets_it_where_it_is_created() -> None:
    for builder in (JobBuilder("j"), PodBuilder("p"), DeploymentBuilder("d"), PVCBuilder("c")):
        assert "namespace" not in builder.build()["metadata"]
    assert JobBuilder("j", NS).build()["metadata"]["namespace"] == NS


def test_the_e2e_trainers_shape() -> None:
    """The real trainer on the real node (non-root), and kwok's simulated exits."""
    job = (
        JobBuilder("train")
        .image("localhost/trainwarden:1", pull_policy="Never")
        .args("demo-trainer", "--max-steps=150")
        .run_as(65532, group=65532)
        .resume_from("checkpoint-100")
        .build()
    )
    spec = job["spec"]["template"]["spec"]
    assert spec["securityContext"] == {
        "runAsNonRoot": True,
        "runAsUser": 65532,
        "runAsGroup": 65532,
    }
    assert spec["containers"][0]["imagePullPolicy"] == "Never"
    assert spec["containers"][0]["args"] == ["demo-trainer", "--max-steps=150"]
    assert training_job(job).annotations == {"trainwarden.dev/resume-from": "checkpoint-100"}
    assert PodBuilder("p").run_as(1000).build()["spec"]["securityContext"] == {
        "runAsNonRoot": True,
        "runAsUser": 1000,
    }
    done = JobBuilder("done").completes_after("40s").build()["spec"]["template"]["metadata"]
    crash = PodBuilder("crash").fails_after("15s").build()["metadata"]
    assert done["annotations"] == {"sim.trainwarden.dev/complete-after": "40s"}
    assert crash["annotations"] == {"sim.trainwarden.dev/fail-after": "15s"}


def test_a_job_suspends_finishes_and_names_its_checkpoints() -> None:
    job = (
        JobBuilder("train", NS)
        .suspended()
        .parallelism(2)
        .completions(4)
        .active_deadline(3600)
        .queue("gpu")
        .budget("research")
        .checkpoint_path("checkpoints:/runs/a")
        .claim("checkpoints")
        .started(T)
        .succeeded(T + timedelta(hours=1))
        .build()
    )
    assert is_suspended(job)
    assert workloads.kueue_managed(job)
    assert training_job(job).finished_at == T + timedelta(hours=1)
    assert training_job(job).annotations == {
        "trainwarden.dev/checkpoint-path": "checkpoints:/runs/a"
    }
    assert job["metadata"]["labels"]["trainwarden.dev/budget"] == "research"
    assert job["spec"]["template"]["spec"]["volumes"][0]["persistentVolumeClaim"] == {
        "claimName": "checkpoints"
    }
    failed = JobBuilder("f", NS).failed(T).build()
    assert training_job(failed).finished_at == T


def test_every_suspendable_kind_reads_as_suspended() -> None:
    pod = PodBuilder("unused", NS).gpus(2)
    for builder in (
        JobSetBuilder("js", NS).replicated_job("workers", replicas=2, template=pod),
        PyTorchJobBuilder("ptj", NS).replica("Master").replica("Worker", replicas=3),
        RayJobBuilder("rj", NS).entrypoint("python x.py"),
    ):
        assert not is_suspended(builder.build())
        assert is_suspended(builder.suspended().build())
    jobset = JobSetBuilder("js", NS).replicated_job("w", template=pod).build()
    template = jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
    assert effective_requests(template["spec"]) == {"nvidia.com/gpu": 2}


def test_owner_chains_resolve_through_the_fake() -> None:
    fake = FakeKube()
    rayjob = fake.put(RayJobBuilder("rj", NS).build())
    cluster = fake.put(RayClusterBuilder("rj-cluster", NS).owned_by(rayjob).workers("w").build())
    pod = PodBuilder("rj-head", NS).owned_by(cluster).build()
    owner = controller_owner(pod)
    assert owner is not None
    top = asyncio.run(workloads.top_level(fake, NS, owner))
    assert top is not None
    assert (top["kind"], top["metadata"]["name"]) == ("RayJob", "rj")


def test_an_owner_chain_read_through_the_api_trusts_uids_not_names_and_skips_suspended() -> None:
    """What an idle reclaim acts on: a Job run by a suspended JobSet is the Job (the
    JobSet's suspension evidently does not stop it); a reference whose uid is not the
    named object's is not followed."""
    fake = FakeKube()
    jobset = fake.put(JobSetBuilder("js", NS).suspended().build())
    job = fake.put(JobBuilder("child", NS).owned_by(jobset).build())
    top = asyncio.run(
        workloads.top_level(fake, NS, OwnerRef("batch/v1", "Job", "child", job["metadata"]["uid"]))
    )
    assert top is not None
    assert top["metadata"]["name"] == "child"
    other = fake.put(JobBuilder("other", NS).build())
    wrong = OwnerRef("batch/v1", "Job", "other", "not-its-uid")
    assert asyncio.run(workloads.top_level(fake, NS, wrong)) is None
    assert other["metadata"]["uid"] != "not-its-uid"


def test_deployments_and_statefulsets_scale_through_the_fake() -> None:
    fake = FakeKube()
    deployment = fake.put(DeploymentBuilder("nb", NS).replicas(2).ready(2).gpus(1).build())
    assert deployment["spec"]["template"]["metadata"]["labels"] == {"app": "nb"}
    assert deployment["spec"]["template"]["spec"]["restartPolicy"] == "Always"
    scaled = asyncio.run(workloads.scale_down(fake, deployment, {}, {}))
    assert scaled["spec"]["replicas"] == 0
    assert scaled["metadata"]["annotations"]["trainwarden.dev/scaled-down-from"] == "2"
    sts = StatefulSetBuilder("db", NS).build()
    assert (sts["kind"], sts["spec"]["serviceName"], sts["spec"]["replicas"]) == (
        "StatefulSet",
        "db",
        1,
    )


# --- the cluster ------------------------------------------------------------------------------


def test_nodes_namespaces_and_volumes() -> None:
    node = (
        NodeBuilder("gpu-a100-0")
        .gpus(8)
        .cpu("64")
        .memory("512Gi")
        .pods(110)
        .product("NVIDIA-A100")
        .taint("e2e", "x")
        .unschedulable()
        .kwok()
        .build()
    )
    facts = node_facts(node, KEEP)
    assert facts.accelerators(["nvidia.com/gpu"]) == 8
    assert facts.unschedulable
    assert facts.labels == {"nvidia.com/gpu.product": "NVIDIA-A100"}
    assert node["status"]["capacity"] == node["status"]["allocatable"]
    assert node["spec"]["taints"] == [{"key": "e2e", "effect": "NoSchedule", "value": "x"}]
    namespace = NamespaceBuilder(NS).labels(team="research").build()
    assert namespace == {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": NS, "labels": {"team": "research"}},
    }
    pv = PersistentVolumeBuilder(f"{NS}-checkpoints").host_path("/x").claim(NS, "checkpoints")
    pv.on_nodes("trainwarden.dev/real-node", "true")
    pvc = PVCBuilder("checkpoints", NS).storage_class("").volume(f"{NS}-checkpoints").bound()
    assert pv.build()["spec"]["claimRef"] == {"namespace": NS, "name": "checkpoints"}
    assert pvc.build()["spec"]["resources"] == {"requests": {"storage": "1Gi"}}


def test_secrets_read_back_through_the_fake() -> None:
    fake = FakeKube(
        [SecretBuilder("store", NS).data(accessKeyId="k").string_data(secretAccessKey="s").build()]
    )
    keys = ("accessKeyId", "secretAccessKey")
    assert asyncio.run(fake.secret(NS, "store", keys)) == {
        "accessKeyId": "k",
        "secretAccessKey": "s",
    }


def test_a_snapshot_reads_as_a_checkpoint() -> None:
    built = (
        VolumeSnapshotBuilder("snap-500", NS)
        .labels(checkpoints="snap")
        .source("checkpoints")
        .snapshot_class("retain")
        .step(500)
        .metric("eval_loss", 0.31)
        .pinned()
        .resume_point()
        .ready(T)
        .build()
    )
    found = read_snapshot(built, deletion_policy="Retain", allow_delete=False)
    assert found is not None
    checkpoint = found.checkpoint
    assert (checkpoint.step, checkpoint.metrics, checkpoint.created) == (
        500,
        {"eval_loss": 0.31},
        T,
    )
    assert checkpoint.complete
    assert checkpoint.pinned
    assert checkpoint.resume_point
    assert (found.source_pvc, found.class_name) == ("checkpoints", "retain")
