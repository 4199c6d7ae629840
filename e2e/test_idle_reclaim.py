"""IdleReclaimPolicy end to end: real Jobs and pods on kwok GPU nodes, utilization from the
DCGM stand-in through the real Prometheus, the operator warning and then reclaiming.

One world is set up per module (all pods start together), and each test checks one
promise about it; the clock runs for all of them at once, so the module takes about as long
as its slowest case (the lease).
"""

import threading
import time
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from kubernetes import client

from harness import (
    Cluster,
    Operator,
    create_policy,
    delete_policies_of,
    events_for,
    get_policy,
    gpu_job,
    holds,
    idle_policy_manifest,
    last_evaluated,
    pod_template,
    publish_utilization,
    wait_for,
)

PLURAL = "idlereclaimpolicies"
WINDOW = timedelta(seconds=30)
GRACE = timedelta(seconds=15)
LEASE = timedelta(seconds=45)
IDLE_SINCE = "trainwarden.dev/idle-since"
WARNED_AT = "trainwarden.dev/idle-warned-at"


@dataclass
class World:
    cluster: Cluster
    enforce_ns: str
    dry_ns: str
    pods: dict[str, str] = field(default_factory=dict)
    """Scenario -> pod name."""
    published: dict[str, datetime] = field(default_factory=dict)
    started: dict[str, datetime] = field(default_factory=dict)
    recovered_at: datetime | None = None

    @property
    def policy(self) -> str:
        return f"{self.enforce_ns}-idle"

    @property
    def dry_policy(self) -> str:
        return f"{self.dry_ns}-idle"

    def job(self, name: str, namespace: str | None = None) -> client.V1Job:
        batch = client.BatchV1Api(self.cluster.api)
        return batch.read_namespaced_job(name, namespace or self.enforce_ns)

    def pod(self, scenario: str, namespace: str | None = None) -> client.V1Pod | None:
        core = client.CoreV1Api(self.cluster.api)
        try:
            pod: client.V1Pod = core.read_namespaced_pod(
                self.pods[scenario], namespace or self.enforce_ns
            )
        except client.ApiException as error:
            if error.status == 404:
                return None
            raise
        return pod

    def reasons(self, involved: str, namespace: str | None = None) -> set[str]:
        events = events_for(self.cluster, namespace or self.enforce_ns, involved)
        return {e.reason for e in events}

    def status(self, name: str | None = None) -> dict[str, Any]:
        status: dict[str, Any] = get_policy(self.cluster, PLURAL, name or self.policy).get(
            "status", {}
        )
        return status

    def listed(self, scenario: str, name: str | None = None) -> dict[str, Any] | None:
        pod = self.pods[scenario]
        return next((p for p in self.status(name).get("idlePods", []) if p["name"] == pod), None)


def _make_namespace(cluster: Cluster) -> str:
    name = f"tw-{uuid.uuid4().hex[:6]}"
    client.CoreV1Api(cluster.api).create_namespace(
        client.V1Namespace(metadata=client.V1ObjectMeta(name=name))
    )
    return name


def _start(world: World, namespace: str, scenario: str, manifest: dict[str, Any]) -> None:
    core = client.CoreV1Api(world.cluster.api)
    if manifest["kind"] == "Job":
        client.BatchV1Api(world.cluster.api).create_namespaced_job(namespace, manifest)
        selector = f"job-name={manifest['metadata']['name']}"
    else:
        core.create_namespaced_pod(namespace, manifest)
        selector = f"scenario={scenario}"

    def running() -> client.V1Pod | None:
        pods = core.list_namespaced_pod(namespace, label_selector=selector).items
        found = [p for p in pods if p.status.phase == "Running"]
        return found[0] if found else None

    pod = wait_for(running, timeout=60, what=f"the {scenario} pod running")
    world.pods[scenario] = pod.metadata.name
    world.started[scenario] = pod.status.start_time


@pytest.fixture(scope="module")
def world(cluster: Cluster, operator: Operator) -> Iterator[World]:
    world = World(cluster, _make_namespace(cluster), _make_namespace(cluster))
    ns, dry = world.enforce_ns, world.dry_ns
    for scenario in ("idle", "busy", "recovers", "no-metrics"):
        _start(world, ns, scenario, gpu_job(scenario))
    _start(
        world,
        ns,
        "exempt",
        gpu_job("exempt", annotations={"trainwarden.dev/exempt": "true"}),
    )
    notebook = {
        "apiVersion": "v1",
        "kind": "Pod",
        **pod_template(labels={"scenario": "notebook", "workload": "interactive"}),
    }
    notebook["metadata"]["name"] = "notebook"
    _start(world, ns, "notebook", notebook)
    # An idle bare pod that a PodDisruptionBudget protects: the eviction must be refused.
    client.PolicyV1Api(cluster.api).create_namespaced_pod_disruption_budget(
        ns,
        {
            "metadata": {"name": "protected"},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"scenario": "protected"}}},
        },
    )
    protected = {
        "apiVersion": "v1",
        "kind": "Pod",
        **pod_template(labels={"scenario": "protected"}),
    }
    protected["metadata"]["name"] = "protected"
    _start(world, ns, "protected", protected)
    _start(world, dry, "dry-idle", gpu_job("dry-idle"))

    levels = {"idle": 1, "busy": 80, "recovers": 1, "exempt": 1, "notebook": 70, "protected": 1}
    for scenario, percent in levels.items():
        # The idle and busy pods' series arrive as GPU Operator's ServiceMonitor scrapes them
        # (honorLabels false: exported_namespace/exported_pod), the others as they are.
        view = "serviceMonitor" if scenario in ("idle", "busy") else "honorLabels"
        publish_utilization(cluster, ns, world.pods[scenario], percent, view=view)
        world.published[scenario] = datetime.now(UTC)
    publish_utilization(cluster, dry, world.pods["dry-idle"], 1)
    world.published["dry-idle"] = datetime.now(UTC)

    lease: dict[str, Any] = {
        "maxLifetime": f"{int(LEASE.total_seconds())}s",
        "selector": {"matchLabels": {"workload": "interactive"}},
    }
    create_policy(
        cluster,
        PLURAL,
        idle_policy_manifest(world.policy, ns, exemptions={"allowOptOut": True}, lease=lease),
    )
    create_policy(cluster, PLURAL, idle_policy_manifest(world.dry_policy, dry, mode="DryRun"))

    def recover() -> None:
        """Like a person who sees the warning and gets back to work."""
        try:
            wait_for(
                lambda: (
                    (p := world.pod("recovers")) and WARNED_AT in (p.metadata.annotations or {})
                ),
                timeout=120,
                every=0.2,
                what="the recovering pod warned",
            )
        except AssertionError:
            return  # the test of recovery reports it
        publish_utilization(cluster, ns, world.pods["recovers"], 90)
        world.recovered_at = datetime.now(UTC)

    threading.Thread(target=recover, daemon=True).start()
    yield world
    for namespace in (ns, dry):
        delete_policies_of(cluster, namespace)
        client.CoreV1Api(cluster.api).delete_namespace(namespace)


def _annotations(pod: client.V1Pod | None) -> dict[str, str]:
    return dict((pod.metadata.annotations or {}) if pod else {})


def _parse(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def test_idle_training_pod_is_warned_then_its_job_suspended(world: World) -> None:
    warned_pod = wait_for(
        lambda: (p := world.pod("idle")) and WARNED_AT in _annotations(p) and p,
        timeout=90,
        every=0.2,
        what="the idle pod's warning annotation",
    )
    warned = _parse(_annotations(warned_pod)[WARNED_AT])
    assert _annotations(warned_pod)["trainwarden.dev/idle-policy"] == world.policy
    for involved in (world.pods["idle"], "idle"):  # the pod and its Job
        wait_for(
            lambda obj=involved: "IdleAccelerators" in world.reasons(obj),
            timeout=10,
            what=f"the IdleAccelerators Event on {involved}",
        )
    assert not world.job("idle").spec.suspend, "warned first, not yet acted on"

    wait_for(lambda: world.job("idle").spec.suspend, timeout=60, every=0.1, what="Job suspended")
    suspended = datetime.now(UTC)
    job = world.job("idle")
    assert job.metadata.labels["trainwarden.dev/reclaimed-by"] == world.policy
    assert "below 5%" in job.metadata.annotations["trainwarden.dev/reclaim-reason"]
    assert "trainwarden.dev/suspended-by" not in (job.metadata.labels or {}), (
        "no budget may resume what an idle policy suspended"
    )
    window_elapsed = world.published["idle"] + WINDOW
    print(
        f"\nidle window elapsed -> warning: {(warned - window_elapsed).total_seconds():+.1f}s; "
        f"grace ended -> Job suspended: {(suspended - (warned + GRACE)).total_seconds():+.1f}s"
    )
    assert suspended >= warned + GRACE - timedelta(seconds=1), "a full grace period"
    status = wait_for(
        lambda: (s := world.status()) and s.get("actionsTaken", 0) >= 1 and s,
        timeout=30,
        what="the reclaim in status",
    )
    assert status["acceleratorHoursReclaimed"] > 0
    wait_for(
        lambda: "IdleReclaimed" in world.reasons("idle"),
        timeout=10,
        what="the IdleReclaimed Event on the Job",
    )


def test_busy_pod_is_never_touched(world: World) -> None:
    wait_for(lambda: world.job("idle").spec.suspend, timeout=120, what="the idle case to finish")
    assert not world.job("busy").spec.suspend
    assert WARNED_AT not in _annotations(world.pod("busy"))
    assert world.listed("busy") is None


def test_recovery_during_grace_spares_the_pod(world: World) -> None:
    wait_for(lambda: world.recovered_at, timeout=120, what="the recovering pod warned at all")

    def withdrawn() -> bool:
        pod = world.pod("recovers")
        assert pod is not None, "the recovering pod is gone: its Job was reclaimed"
        return WARNED_AT not in _annotations(pod)

    wait_for(withdrawn, timeout=60, what="the warning withdrawn")
    wait_for(
        lambda: "IdleWarningWithdrawn" in world.reasons(world.pods["recovers"]),
        timeout=10,
        what="the IdleWarningWithdrawn Event",
    )
    holds(
        lambda: not world.job("recovers").spec.suspend,
        duration=GRACE.total_seconds() + 5,
        what="the recovered Job running",
    )


def test_exempt_pod_is_spared_and_reported(world: World) -> None:
    listed = wait_for(
        lambda: (p := world.listed("exempt")) and p["state"] == "Exempt" and p,
        timeout=90,
        what="the exempt pod reported as Exempt",
    )
    assert "trainwarden.dev/exempt: true" in listed["message"]
    wait_for(lambda: world.job("idle").spec.suspend, timeout=120, what="the idle case to finish")
    assert not world.job("exempt").spec.suspend
    assert WARNED_AT not in _annotations(world.pod("exempt"))


def test_pod_without_metrics_is_unknown_not_idle(world: World) -> None:
    listed = wait_for(
        lambda: world.listed("no-metrics"), timeout=60, what="the pod without metrics listed"
    )
    assert listed["state"] == "Unknown"
    assert world.status()["podsUnknown"] >= 1
    wait_for(lambda: world.job("idle").spec.suspend, timeout=120, what="the idle case to finish")
    assert not world.job("no-metrics").spec.suspend
    assert WARNED_AT not in _annotations(world.pod("no-metrics"))


def test_lease_expires_a_busy_interactive_pod(world: World) -> None:
    wait_for(
        lambda: (p := world.pod("notebook")) is None or p.metadata.deletion_timestamp is not None,
        timeout=120,
        what="the bare notebook pod evicted at the end of its lease",
    )
    events = {e.reason: e for e in events_for(world.cluster, world.enforce_ns, "notebook")}
    warned, evicted = events["IdleAccelerators"], events["IdleReclaimed"]
    assert "lease of 45s expired" in warned.message
    started = world.started["notebook"]
    after_start = (warned.first_timestamp - started).total_seconds()
    print(
        f"\nlease {LEASE.total_seconds():.0f}s, busy at 70 %: warned {after_start:.0f}s after "
        f"start, evicted {(evicted.first_timestamp - started).total_seconds():.0f}s after start"
    )
    assert after_start >= LEASE.total_seconds() - 1, "not before the lease ends"
    assert evicted.first_timestamp >= warned.first_timestamp + GRACE - timedelta(seconds=1)


def test_pod_disruption_budget_blocks_the_eviction(world: World) -> None:
    pending = wait_for(
        lambda: [
            line
            for line in world.status().get("pendingActions", [])
            if "Pod/" in line and "protected" in line and "PodDisruptionBudget" in line
        ],
        timeout=120,
        what="the blocked eviction reported",
    )
    assert pending[0].startswith("deferred")
    pod = world.pod("protected")
    assert pod is not None
    assert pod.metadata.deletion_timestamp is None, "the PodDisruptionBudget is respected"


def test_dry_run_changes_nothing(world: World) -> None:
    status = wait_for(
        lambda: (
            (s := world.status(world.dry_policy))
            and any("would suspend Job" in line for line in s.get("pendingActions", []))
            and s
        ),
        timeout=120,
        what="DryRun reporting what it would do",
    )
    line = next(x for x in status["pendingActions"] if "would suspend" in x)
    assert f"Job/{world.dry_ns}/dry-idle" in line
    assert status.get("actionsTaken", 0) == 0
    assert not world.job("dry-idle", world.dry_ns).spec.suspend
    pod = world.pod("dry-idle", world.dry_ns)
    assert pod is not None
    assert not any(k.startswith("trainwarden.dev/") for k in _annotations(pod))
    wait_for(
        lambda: "WouldReclaim" in world.reasons(world.dry_policy, "default"),
        timeout=10,
        what="the WouldReclaim Event on the policy",
    )


def test_prometheus_status_and_metrics(world: World, operator: Operator) -> None:
    status = world.status()
    condition = next(c for c in status["conditions"] if c["type"] == "MetricsAvailable")
    assert condition["status"] == "True"
    assert status["podsWatched"] >= 5
    with urllib.request.urlopen(operator.metrics_url, timeout=5) as response:
        text = response.read().decode()
    assert f'trainwarden_idle_metrics_available{{policy="{world.policy}"}} 1.0' in text
    assert f'trainwarden_idle_pods{{policy="{world.policy}",state="Unknown"}}' in text


def cordoned_idle_node(world: World, suffix: str) -> tuple[str, str]:
    """A GPU node no pod uses, and an Enforce policy (`<namespace>-<suffix>`) that cordons
    and labels it once idle: both names, once it has."""
    core = client.CoreV1Api(world.cluster.api)
    tag = uuid.uuid4().hex[:6]
    name = f"tw-idle-node-{tag}"
    capacity = {"cpu": "8", "memory": "64Gi", "pods": "110", "nvidia.com/gpu": "8"}
    core.create_node(
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": name,
                "annotations": {"kwok.x-k8s.io/node": "fake"},
                "labels": {"trainwarden.dev/e2e-node": tag},
            },
            # Tainted, so no other test's pod lands on it.
            "spec": {"taints": [{"key": "e2e", "value": tag, "effect": "NoSchedule"}]},
            "status": {"allocatable": capacity, "capacity": capacity},
        }
    )
    policy = f"{world.enforce_ns}-{suffix}"
    idle_nodes = {
        "after": "5s",
        "cordon": True,
        "label": True,
        "nodeSelector": {"matchLabels": {"trainwarden.dev/e2e-node": tag}},
    }
    manifest = idle_policy_manifest(
        policy, world.enforce_ns, action="NotifyOnly", idleNodes=idle_nodes
    )
    manifest["spec"]["scope"] = {"namespaces": [f"{world.enforce_ns}-none"]}
    create_policy(world.cluster, PLURAL, manifest)
    node = wait_for(
        lambda: (n := core.read_node(name)) and n.spec.unschedulable and n,
        timeout=60,
        what="the idle node cordoned",
    )
    assert node.metadata.labels["trainwarden.dev/idle-node"] == "true"
    assert node.metadata.annotations["trainwarden.dev/cordoned-by"] == policy
    listed = wait_for(lambda: world.status(policy).get("idleNodes"), timeout=30, what="idleNodes")
    assert [n["name"] for n in listed] == [name]
    return name, policy


def test_a_deleted_policy_lifts_its_cordon_and_label_and_leaves_an_admin_cordon(
    world: World,
) -> None:
    core = client.CoreV1Api(world.cluster.api)
    name, policy = cordoned_idle_node(world, "gone")
    other, admin = cordoned_idle_node(world, "stays")[0], f"tw-admin-{uuid.uuid4().hex[:6]}"
    core.create_node(
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": admin, "annotations": {"kwok.x-k8s.io/node": "fake"}},
            "spec": {"unschedulable": True},
        }
    )
    try:
        client.CustomObjectsApi(world.cluster.api).delete_cluster_custom_object(
            "trainwarden.dev", "v1alpha1", PLURAL, policy
        )
        deleted = time.monotonic()
        wait_for(
            lambda: not core.read_node(name).spec.unschedulable,
            timeout=30,
            what="the deleted policy's cordon lifted",
        )
        print(f"\nuncordoned {time.monotonic() - deleted:.1f}s after the policy's deletion")
        lifted = core.read_node(name).metadata
        assert "trainwarden.dev/cordoned-by" not in (lifted.annotations or {})
        assert "trainwarden.dev/idle-node" not in (lifted.labels or {})
        assert core.read_node(other).spec.unschedulable, "another policy's cordon stays"
        assert core.read_node(admin).spec.unschedulable, "an admin's cordon stays"
        reasons = {e.reason for e in events_for(world.cluster, "default", name)}
        assert {"IdleNodeUncordon", "IdleNodeUnlabel"} <= reasons, reasons
    finally:
        for node in (name, other, admin):
            core.delete_node(node)


def test_idle_node_is_cordoned_and_labelled_and_a_user_uncordon_wins(
    world: World, operator: Operator
) -> None:
    core = client.CoreV1Api(world.cluster.api)
    custom = client.CustomObjectsApi(world.cluster.api)
    name, policy = cordoned_idle_node(world, "nodes")
    try:
        core.patch_node(name, {"spec": {"unschedulable": False}})
        for i in range(2):  # two evaluations after the user's uncordon
            last = last_evaluated(operator, "IdleReclaimPolicy", policy)
            poke = {"metadata": {"annotations": {"e2e.trainwarden.dev/poke": str(i)}}}
            custom.patch_cluster_custom_object("trainwarden.dev", "v1alpha1", PLURAL, policy, poke)
            wait_for(
                lambda last=last: last_evaluated(operator, "IdleReclaimPolicy", policy) > last,
                timeout=30,
                what="an evaluation",
            )
        assert not core.read_node(name).spec.unschedulable, "the user's uncordon wins"
    finally:
        core.delete_node(name)


def test_a_deployment_is_scaled_down_only_once_all_its_pods_are_idle(
    cluster: Cluster, operator: Operator, namespace: str
) -> None:
    apps = client.AppsV1Api(cluster.api)
    core = client.CoreV1Api(cluster.api)
    template = pod_template(labels={"app": "notebook-server"})
    template["spec"]["restartPolicy"] = "Always"
    apps.create_namespaced_deployment(
        namespace,
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "notebook-server"},
            "spec": {
                "replicas": 2,
                "selector": {"matchLabels": {"app": "notebook-server"}},
                "template": template,
            },
        },
    )
    pods = wait_for(
        lambda: (
            (
                p := [
                    x.metadata.name
                    for x in core.list_namespaced_pod(
                        namespace, label_selector="app=notebook-server"
                    ).items
                    if x.status.phase == "Running"
                ]
            )
            and len(p) == 2
            and sorted(p)
        ),
        timeout=60,
        what="both replicas running",
    )
    publish_utilization(cluster, namespace, pods[0], 1)
    publish_utilization(cluster, namespace, pods[1], 50)  # one replica still in use
    policy = f"{namespace}-idle"
    create_policy(cluster, PLURAL, idle_policy_manifest(policy, namespace, action="ScaleDown"))
    status = wait_for(
        lambda: (
            (s := get_policy(cluster, PLURAL, policy).get("status", {}))
            and any("1 of 2 pods" in line for line in s.get("pendingActions", []))
            and s
        ),
        timeout=120,
        what="the reclaim held back while one replica is busy",
    )
    assert apps.read_namespaced_deployment("notebook-server", namespace).spec.replicas == 2
    assert status["actionsTaken"] == 0
    publish_utilization(cluster, namespace, pods[1], 1)
    wait_for(
        lambda: apps.read_namespaced_deployment("notebook-server", namespace).spec.replicas == 0,
        timeout=120,
        what="the Deployment scaled down once both replicas were idle",
    )
    deployment = apps.read_namespaced_deployment("notebook-server", namespace)
    assert deployment.metadata.annotations["trainwarden.dev/scaled-down-from"] == "2"
    assert deployment.metadata.labels["trainwarden.dev/reclaimed-by"] == policy


def test_series_that_name_no_governed_pod_are_reported_not_silent(
    cluster: Cluster, operator: Operator
) -> None:
    """A governed pod past its warm-up with no series of its own (the exporter scraped so
    that its series name itself, or not at all): MetricsAvailable=False naming what the
    query found instead, a Warning Event; True once the pod's series arrive, here as GPU
    Operator's ServiceMonitor has them (exported_namespace/exported_pod)."""
    world = World(cluster, _make_namespace(cluster), "")
    ns = world.enforce_ns
    try:
        _start(world, ns, "unseen", gpu_job("unseen"))
        create_policy(cluster, PLURAL, idle_policy_manifest(world.policy, ns))

        def metrics_available() -> dict[str, Any] | None:
            status = world.status() or {}
            return next(
                (c for c in status.get("conditions", []) if c["type"] == "MetricsAvailable"),
                None,
            )

        found = wait_for(
            lambda: (c := metrics_available()) and c["status"] == "False" and c,
            timeout=60,
            what="MetricsAvailable=False for a pod no series names",
        )
        assert found["reason"] == "NoSeriesForGovernedPods", found
        assert "no series names any of the 1 governed" in found["message"], found
        wait_for(
            lambda: "NoSeriesForGovernedPods" in world.reasons(world.policy, "default"),
            timeout=10,
            what="the Warning Event on the policy",
        )
        publish_utilization(cluster, ns, world.pods["unseen"], 50, view="serviceMonitor")
        wait_for(
            lambda: (c := metrics_available()) and c["status"] == "True",
            timeout=60,
            what="MetricsAvailable=True once the pod's series arrive",
        )
    finally:
        delete_policies_of(cluster, ns)
        client.CoreV1Api(cluster.api).delete_namespace(ns)
