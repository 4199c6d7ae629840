"""The API server enforces the generated schema; the operator reports what it cannot."""

import copy
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from harness import ROOT, Cluster, Operator, start_operator, wait_for

SAMPLES = sorted((ROOT / "crds" / "samples").glob("*.yaml"))

BUDGET: dict[str, Any] = {
    "apiVersion": "trainwarden.dev/v1alpha1",
    "kind": "TrainingBudget",
    "metadata": {"name": "invalid"},
    "spec": {
        "scope": {"namespaces": ["vision"]},
        "limits": {"acceleratorHours": 100},
        "period": {"type": "Monthly"},
    },
}


@pytest.fixture(scope="module")
def operator(
    cluster: Cluster, crds: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Operator]:
    """conftest's operator, with the VolumeReclaimPolicy controller on (the chart's
    volumeReclaim.enabled), so that every sample kind is evaluated."""
    running = start_operator(
        cluster.kubeconfig,
        tmp_path_factory.mktemp("operator") / "operator.log",
        prometheus_url=cluster.prometheus_url,
        args=("--volume-reclaim",),
    )
    yield running
    running.stop()


def with_spec(kind: str, **spec: Any) -> dict[str, Any]:
    base = copy.deepcopy(BUDGET)
    base["kind"] = kind
    base["spec"] = spec
    return base


def budget(path: str, value: Any) -> dict[str, Any]:
    """BUDGET with one field set (or removed, for value None) at a dotted path under spec."""
    manifest = copy.deepcopy(BUDGET)
    *parents, leaf = path.split(".")
    node = manifest["spec"]
    for part in parents:
        node = node.setdefault(part, {})
    if value is None:
        del node[leaf]
    else:
        node[leaf] = value
    return manifest


INVALID = [
    ("wrong type", budget("limits.acceleratorHours", "lots"), "spec.limits.acceleratorHours"),
    ("negative limit", budget("limits.acceleratorHours", -5), "spec.limits.acceleratorHours"),
    ("unknown enum", budget("period.type", "Fortnightly"), "spec.period.type"),
    ("missing required field", budget("limits", None), "spec.limits"),
    (
        "bad duration",
        budget("enforcement.gracePeriod", "5 minutes"),
        "spec.enforcement.gracePeriod",
    ),
    ("zero duration", budget("period", {"type": "Rolling", "window": "0h"}), "spec.period.window"),
    ("empty scope", budget("scope", {"namespaces": []}), "spec.scope"),
    ("empty selector", budget("scope", {"namespaceSelector": {}}), "spec.scope.namespaceSelector"),
    ("no limit at all", budget("limits", {}), "spec.limits"),
    ("warn above enforce", budget("thresholds", {"warn": 120, "enforce": 100}), "spec.thresholds"),
    ("rolling without window", budget("period", {"type": "Rolling"}), "spec.period"),
    ("cost without rates", budget("limits", {"cost": 10}), "spec"),
    (
        "threshold over 100 %",
        with_spec("IdleReclaimPolicy", scope={"namespaces": ["a"]}, signal={"threshold": 150}),
        "spec.signal.threshold",
    ),
    (
        "keepLast of zero",
        with_spec(
            "CheckpointPolicy",
            scope={"namespaces": ["a"]},
            storage={"pvc": {"path": "/ckpt"}},
            retention={"keepLast": 0},
        ),
        "spec.retention.keepLast",
    ),
    (
        "no checkpoint storage",
        with_spec("CheckpointPolicy", scope={"namespaces": ["a"]}, storage={}),
        "spec.storage",
    ),
]


@pytest.mark.parametrize(("mistake", "manifest", "field"), INVALID, ids=[m[0] for m in INVALID])
def test_invalid_policy_is_rejected_naming_the_field(
    cluster: Cluster, crds: None, mistake: str, manifest: dict[str, Any], field: str
) -> None:
    manifest = copy.deepcopy(manifest)
    manifest["metadata"]["name"] = f"invalid-{uuid.uuid4().hex[:6]}"
    output = cluster.kubectl("create", "-f", "-", stdin=json.dumps(manifest), check=False)
    assert "is invalid" in output, f"{mistake}: the API server accepted it: {output}"
    assert field in output, f"{mistake}: message does not name {field}: {output}"
    print(f"\n[{mistake}] {output.strip()}")


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.name)
def test_sample_applies_and_becomes_ready(cluster: Cluster, operator: Operator, path: Path) -> None:
    cluster.kubectl("apply", "-f", str(path))
    doc = yaml.safe_load(path.read_text())
    api = client.CustomObjectsApi(cluster.api)
    plural = {
        "TrainingBudget": "trainingbudgets",
        "IdleReclaimPolicy": "idlereclaimpolicies",
        "CheckpointPolicy": "checkpointpolicies",
        "VolumeReclaimPolicy": "volumereclaimpolicies",
    }[doc["kind"]]

    def ready() -> dict[str, Any] | None:
        obj = api.get_cluster_custom_object(
            "trainwarden.dev", "v1alpha1", plural, doc["metadata"]["name"]
        )
        conditions = obj.get("status", {}).get("conditions", [])
        match = [c for c in conditions if c["type"] == "Ready" and c["status"] == "True"]
        if match and match[0]["observedGeneration"] == obj["metadata"]["generation"]:
            return match[0]
        return None

    condition = wait_for(ready, timeout=30, what=f"{doc['kind']} Ready=True")
    assert condition["reason"] == "Accepted"


def test_semantic_mistake_is_reported_in_status_and_as_an_event(
    cluster: Cluster, operator: Operator
) -> None:
    """A time zone the schema cannot check is accepted by the API, then reported."""
    name = f"mars-{uuid.uuid4().hex[:6]}"
    manifest = budget("period", {"type": "Daily", "timeZone": "Mars/Olympus"})
    manifest["metadata"]["name"] = name
    cluster.kubectl("create", "-f", "-", stdin=json.dumps(manifest))
    api = client.CustomObjectsApi(cluster.api)

    def not_ready() -> dict[str, Any] | None:
        obj = api.get_cluster_custom_object("trainwarden.dev", "v1alpha1", "trainingbudgets", name)
        conditions = obj.get("status", {}).get("conditions", [])
        return next(
            (c for c in conditions if c["type"] == "Ready" and c["status"] == "False"), None
        )

    condition = wait_for(not_ready, timeout=30, what="Ready=False on the budget")
    assert condition["reason"] == "InvalidSpec"
    assert "spec.period.timeZone: unknown time zone 'Mars/Olympus'" in condition["message"]

    core = client.CoreV1Api(cluster.api)
    event = wait_for(
        lambda: next(
            (
                e
                for e in core.list_event_for_all_namespaces(
                    field_selector=f"involvedObject.name={name}"
                ).items
                if e.reason == "InvalidSpec"
            ),
            None,
        ),
        timeout=30,
        what="an InvalidSpec event on the budget",
    )
    assert event.type == "Warning"

    # Fixing the spec makes it Ready again, at the new generation.
    cluster.kubectl(
        "patch", "tb", name, "--type=merge", "-p", '{"spec":{"period":{"timeZone":"Asia/Tokyo"}}}'
    )

    def ready_again() -> bool:
        obj = api.get_cluster_custom_object("trainwarden.dev", "v1alpha1", "trainingbudgets", name)
        return any(
            c["type"] == "Ready"
            and c["status"] == "True"
            and c["observedGeneration"] == obj["metadata"]["generation"]
            for c in obj.get("status", {}).get("conditions", [])
        )

    wait_for(ready_again, timeout=30, what="Ready=True after the fix")
    cluster.kubectl("delete", "tb", name)


def test_printer_columns_and_explain(cluster: Cluster, operator: Operator) -> None:
    for path in SAMPLES:
        cluster.kubectl("apply", "-f", str(path))
    table = cluster.kubectl("get", "tb,irp,cpp")
    print("\n" + table)
    assert "MODE" in table
    assert "READY" in table
    assert "vision-team" in table
    assert "notebooks" in table
    assert "hf-runs" in table
    explained = cluster.kubectl("explain", "trainingbudget.spec")
    print(explained)
    assert "limits per period" in explained
    assert "scope picks the workloads charged to this budget" in explained
