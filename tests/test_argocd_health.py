"""The Argo CD health checks the chart ships (helm/trainwarden/gitops/argocd-health.yaml),
run as written, in Lua 5.1 as Argo CD runs them, against the statuses the reconcilers
write on the fake API server: what Argo CD would say of each kind (docs/gitops.md)."""

from collections.abc import Mapping
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from lupa import lua51

from test_checkpoint_reconcile import CKPT, CPP, Checkpoints
from test_checkpoint_reconcile import policy as checkpoint_policy
from test_holds import TB, Budgets, spend, team
from test_idle_reconcile import IRP, NS, Idle
from test_idle_reconcile import policy as idle_policy
from test_receipt_controller import Setup as Receipts
from test_receipt_controller import busy_pod, finish, job_ran
from test_volumes_reconcile import VRP, Policy, claim
from test_volumes_reconcile import policy as volume_policy
from trainwarden.adapters.kube import Refused
from trainwarden.cache.cluster import Interruption
from trainwarden.controllers.status import report_interrupted
from trainwarden.testing.builders import JobBuilder, NamespaceBuilder, PodBuilder, PVCBuilder
from world import JSON, World, run

SNIPPET = Path(__file__).resolve().parent.parent / "helm/trainwarden/gitops/argocd-health.yaml"
KEY = "resource.customizations.health.trainwarden.dev_{}"
KINDS = (
    "TrainingBudget",
    "IdleReclaimPolicy",
    "CheckpointPolicy",
    "VolumeReclaimPolicy",
    "RunReceipt",
)


def scripts() -> dict[str, str]:
    configmap = yaml.safe_load(SNIPPET.read_text())
    assert (configmap["kind"], configmap["metadata"]["name"]) == ("ConfigMap", "argocd-cm")
    return dict(configmap["data"])


def health(obj: Mapping[str, Any]) -> tuple[str, str]:
    """Argo CD's verdict on `obj`: its kind's script run with `obj` as the global."""
    lua = lua51.LuaRuntime()
    lua.globals().obj = lua.table_from(dict(obj), recursive=True)
    verdict = lua.execute(scripts()[KEY.format(obj["kind"])])
    return str(verdict["status"]), str(verdict["message"] or "")


def test_the_snippet_checks_exactly_the_five_kinds() -> None:
    assert sorted(scripts()) == sorted(KEY.format(k) for k in KINDS)


@pytest.mark.parametrize(
    "policy",
    [team("b", 100).build(), idle_policy().build(), checkpoint_policy().pvc(labels=CKPT).build()],
    ids=["TrainingBudget", "IdleReclaimPolicy", "CheckpointPolicy"],
)
def test_a_policy_not_evaluated_yet_is_progressing(policy: JSON) -> None:
    world = World()
    created = world.put(policy)
    assert "status" not in created
    assert health(created) == ("Progressing", "waiting for trainwarden to evaluate this spec")


def budget_world(hours: float, spent_gpus: int) -> tuple[World, Budgets]:
    world = World()
    world.put(NamespaceBuilder(NS).build())
    spend(world, spent_gpus, 1.0)
    return world, Budgets(world, team("b", hours))


@pytest.mark.parametrize(
    ("hours", "expected", "says"),
    [
        (100, "Healthy", "8.0% of acceleratorHours used; enforce at 100%"),
        (9, "Healthy", "Warning, ThresholdReached: 88.9% of acceleratorHours used; warn at 80%"),
        (4, "Healthy", "Exhausted, LimitReached: 200.0% of acceleratorHours used"),
    ],
)
def test_a_budget_within_warned_or_spent_is_healthy_and_says_which(
    hours: float, expected: str, says: str
) -> None:
    """Exhausted is the budget doing its job (its Jobs show Suspended in Argo CD)."""
    world, budgets = budget_world(hours, spent_gpus=8)
    budgets.evaluate("b")
    status, message = health(world.read(*TB, None, "b"))
    assert status == expected
    assert message.startswith(says), message


def test_an_invalid_budget_is_progressing_until_judged_then_degraded_saying_why() -> None:
    world, budgets = budget_world(100, spent_gpus=8)
    budgets.evaluate("b")
    world.fake.edit(*TB, None, "b", {"spec": {"limits": {"acceleratorHours": -1}}})
    edited = world.read(*TB, None, "b")
    assert edited["metadata"]["generation"] > edited["status"]["observedGeneration"]
    assert health(edited)[0] == "Progressing", "status is of the previous spec"
    budgets.evaluate("b")
    status, message = health(world.read(*TB, None, "b"))
    assert status == "Degraded"
    assert message.startswith("InvalidSpec: the policy does nothing until its spec is fixed")
    assert "acceleratorHours" in message


def test_a_budget_whose_cluster_view_is_interrupted_is_degraded_saying_since_when() -> None:
    """Nothing is evaluated or enforced until the watch is listed again."""
    world, budgets = budget_world(100, spent_gpus=8)
    budgets.evaluate("b")
    body = world.read(*TB, None, "b")
    since = world.now - timedelta(seconds=60)
    interruption = Interruption("pods", since, "watch failed: 410 Gone")
    run(report_interrupted(world.fake, body, interruption, budgets.memory["b"], world.now))
    status, message = health(world.read(*TB, None, "b"))
    assert status == "Degraded"
    assert message.startswith("ClusterViewInterrupted: the operator has not seen every change")
    assert "(watch failed: 410 Gone)" in message


def idle_world() -> World:
    world = World()
    world.put(NamespaceBuilder(NS).build())
    job = world.put(JobBuilder("train", NS).gpus(8).build())
    started = world.now - timedelta(hours=1)
    world.put(PodBuilder("train-0", NS).gpus(8).owned_by(job).started(started).build())
    return world


def test_an_idle_policy_without_metrics_is_degraded_with_the_conditions_message() -> None:
    world = idle_world()
    idle = Idle(world, idle_policy())
    idle.utilization.values[(NS, "train-0")] = 50.0
    idle.evaluate()
    assert health(world.read(*IRP, None, "idle")) == (
        "Healthy",
        "spec is valid; the policy is active",
    )
    idle.utilization.down = True
    world.advance(10)
    idle.evaluate()
    assert health(world.read(*IRP, None, "idle")) == (
        "Degraded",
        "PrometheusUnavailable: prometheus: connection refused;"
        " no pod is judged idle until it answers",
    )
    idle.utilization.down = False
    idle.utilization.values = {("gpu-operator", "nvidia-dcgm-exporter-x7k2p"): 1.0}
    world.advance(10)
    idle.evaluate()
    status, message = health(world.read(*IRP, None, "idle"))
    assert status == "Degraded"
    assert message.startswith("NoSeriesForGovernedPods: "), message
    assert "gpu-operator/nvidia-dcgm-exporter-x7k2p" in message


def checkpoint_world() -> World:
    world = World()
    world.put(NamespaceBuilder(NS).build())
    world.put(PVCBuilder("ckpt", NS).labels(CKPT).build())
    return world


def test_a_checkpoint_policy_invalid_paused_unable_or_pruning() -> None:
    world = checkpoint_world()
    bad = checkpoint_policy("bad").pvc(labels=CKPT).unchecked()
    bad["spec"]["schedule"] = {"cron": "0 3 * * *", "timeZone": "Mars/Olympus_Mons"}
    Checkpoints(world, bad).evaluate()
    status, message = health(world.read(*CPP, None, "bad"))
    assert (status, message.split(":")[0]) == ("Degraded", "InvalidSpec")
    assert "Mars/Olympus_Mons" in message

    paused = Checkpoints(world, checkpoint_policy("paused").pvc(labels=CKPT))
    paused.paused = "paused by ConfigMap trainwarden/switch"
    paused.evaluate()
    assert health(world.read(*CPP, None, "paused")) == (
        "Suspended",
        "KillSwitch: paused by ConfigMap trainwarden/switch",
    )

    unable = Checkpoints(world, checkpoint_policy("dirs").pvc(labels=CKPT), settings=None)
    unable.evaluate()
    status, message = health(world.read(*CPP, None, "dirs"))
    assert (status, message.split(":")[0]) == ("Degraded", "NoPrunerImage")
    assert "--pruner-image" in message

    active = Checkpoints(world, checkpoint_policy("hf").pvc(labels=CKPT))
    active.evaluate()
    assert health(world.read(*CPP, None, "hf")) == (
        "Healthy",
        "pruning PVC directories (pruner Jobs) on schedule",
    )


def test_a_checkpoint_policy_whose_pruner_was_refused_is_degraded() -> None:
    world = checkpoint_world()
    refused = Checkpoints(world, checkpoint_policy("hf").pvc(labels=CKPT))

    def refuse(_: object) -> None:
        raise Refused("Job team-a/x: denied by the confinement policy")

    world.fake.on_next("create", "Job", refuse)
    refused.evaluate()
    status, message = health(world.read(*CPP, None, "hf"))
    assert (status, message.split(":")[0]) == ("Degraded", "PrunerFailed")
    assert "denied by the confinement policy" in message


def test_a_receipt_is_a_healthy_record_of_its_run_whatever_the_outcome() -> None:
    world = World()
    world.put(NamespaceBuilder(NS).build())
    receipts = Receipts(world, busy_pod(0.5))
    job = job_ran(world, hours=2.0)
    world.advance(10)
    finish(world, job, phase="Failed")
    receipts.process()
    (written,) = receipts.receipts()
    assert "status" not in written, "a record: nothing to observe"
    assert health(written) == (
        "Healthy",
        "Failed after 2h10s, 4.0 accelerator-hours held",
    )


def test_a_volume_policy_is_healthy_until_a_snapshot_fails() -> None:
    world = World()
    world.put(NamespaceBuilder(NS).build())
    claim(world, "orphan")
    p = Policy(world, volume_policy().snapshot("csi-snap", timeout="2m"))
    assert health(world.read(*VRP, None, p.name))[0] == "Progressing"
    p.evaluate()
    assert health(world.read(*VRP, None, p.name)) == (
        "Healthy",
        "1 claims watched, 0 planned, 0 deleted",
    )
    for _ in range(40):
        world.advance(30)
        p.evaluate()
    verdict, message = health(world.read(*VRP, None, p.name))
    assert verdict == "Degraded"
    assert message.startswith("SnapshotNotReady: not deleted: team-a/orphan")
