"""Builders of the cluster around the workloads: namespaces, nodes with accelerators,
volumes and their snapshots, Secrets, disruption budgets."""

import base64
from collections.abc import Mapping
from datetime import datetime
from typing import Self

from trainwarden.api.v1alpha1.names import (
    SNAPSHOT_METRIC,
    SNAPSHOT_PIN,
    SNAPSHOT_RESUME_POINT,
    SNAPSHOT_STEP,
)
from trainwarden.testing.apiserver import rfc3339
from trainwarden.testing.base import ObjectBuilder
from trainwarden.testing.pods import GPU

GPU_PRODUCT = "nvidia.com/gpu.product"
KWOK_NODE = "kwok.x-k8s.io/node"
SNAPSHOTS = "snapshot.storage.k8s.io/v1"


class NamespaceBuilder(ObjectBuilder):
    def __init__(self, name: str) -> None:
        super().__init__("v1", "Namespace", name)


class NodeBuilder(ObjectBuilder):
    """`NodeBuilder("gpu-a100-0").gpus(8).product("NVIDIA-A100").cpu("64").build()`:
    capacity and allocatable alike."""

    def __init__(self, name: str) -> None:
        super().__init__("v1", "Node", name)
        self._obj["spec"] = {}
        self._obj["status"] = {"capacity": {}, "allocatable": {}}

    def resources(self, resources: Mapping[str, str] | None = None, /, **more: str) -> Self:
        for part in ("capacity", "allocatable"):
            self._obj["status"][part].update({**(resources or {}), **more})
        return self

    def gpus(self, count: int, *, resource: str = GPU) -> Self:
        return self.resources({resource: str(count)})

    def cpu(self, quantity: str) -> Self:
        return self.resources(cpu=quantity)

    def memory(self, quantity: str) -> Self:
        return self.resources(memory=quantity)

    def pods(self, count: int) -> Self:
        return self.resources(pods=str(count))

    def product(self, name: str) -> Self:
        """The GPU model label budgets' rates and idle reports select on."""
        return self.labels({GPU_PRODUCT: name})

    def taint(self, key: str, value: str | None = None, effect: str = "NoSchedule") -> Self:
        taint = {"key": key, "effect": effect, **({"value": value} if value is not None else {})}
        self._obj["spec"].setdefault("taints", []).append(taint)
        return self

    def unschedulable(self, cordoned: bool = True) -> Self:
        return self.field("spec.unschedulable", cordoned)

    def kwok(self) -> Self:
        """Simulated by kwok (the e2e cluster's fake nodes)."""
        return self.annotations({KWOK_NODE: "fake"})


class PVCBuilder(ObjectBuilder):
    """A PersistentVolumeClaim of 1Gi ReadWriteOnce unless told otherwise."""

    def __init__(self, name: str, namespace: str | None = None) -> None:
        super().__init__("v1", "PersistentVolumeClaim", name, namespace)
        self._obj["spec"] = {"accessModes": ["ReadWriteOnce"]}
        self.size("1Gi")

    def size(self, quantity: str) -> Self:
        return self.field("spec.resources", {"requests": {"storage": quantity}})

    def access_modes(self, *modes: str) -> Self:
        return self.field("spec.accessModes", list(modes))

    def storage_class(self, name: str) -> Self:
        """An empty name binds only to volumes without a class (no dynamic provisioning)."""
        return self.field("spec.storageClassName", name)

    def volume(self, name: str) -> Self:
        """Bound to (or reserving) the PersistentVolume `name`."""
        return self.field("spec.volumeName", name)

    def bound(self) -> Self:
        return self.field("status.phase", "Bound")


class PersistentVolumeBuilder(ObjectBuilder):
    """A PersistentVolume, e.g. a hostPath one reserved for a claim on one node."""

    def __init__(self, name: str) -> None:
        super().__init__("v1", "PersistentVolume", name)
        self._obj["spec"] = {
            "accessModes": ["ReadWriteOnce"],
            "persistentVolumeReclaimPolicy": "Retain",
            "storageClassName": "",
        }
        self.size("1Gi")

    def size(self, quantity: str) -> Self:
        return self.field("spec.capacity", {"storage": quantity})

    def reclaim_policy(self, policy: str) -> Self:
        return self.field("spec.persistentVolumeReclaimPolicy", policy)

    def storage_class(self, name: str) -> Self:
        return self.field("spec.storageClassName", name)

    def host_path(self, path: str, *, type_: str = "DirectoryOrCreate") -> Self:
        return self.field("spec.hostPath", {"path": path, "type": type_})

    def claim(self, namespace: str, name: str) -> Self:
        """Reserved for the claim namespace/name."""
        return self.field("spec.claimRef", {"namespace": namespace, "name": name})

    def on_nodes(self, key: str, *values: str) -> Self:
        """Only nodes whose label `key` is one of `values` can use it."""
        expression = {"key": key, "operator": "In", "values": list(values)}
        terms = [{"matchExpressions": [expression]}]
        return self.field("spec.nodeAffinity", {"required": {"nodeSelectorTerms": terms}})


class SecretBuilder(ObjectBuilder):
    """`SecretBuilder("store", "ns").data(accessKeyId="k", secretAccessKey="s")`"""

    def __init__(self, name: str, namespace: str | None = None) -> None:
        super().__init__("v1", "Secret", name, namespace)

    def data(self, values: Mapping[str, str] | None = None, /, **more: str) -> Self:
        """Values stored base64-encoded in data, as the API server returns them."""
        data = self._obj.setdefault("data", {})
        for key, value in {**(values or {}), **more}.items():
            data[key] = base64.b64encode(value.encode()).decode()
        return self

    def string_data(self, values: Mapping[str, str] | None = None, /, **more: str) -> Self:
        """Values in stringData, as a person writes them (the API server moves them)."""
        self._obj.setdefault("stringData", {}).update({**(values or {}), **more})
        return self


class VolumeSnapshotBuilder(ObjectBuilder):
    """A VolumeSnapshot of a PVC with the annotations CheckpointPolicy reads."""

    def __init__(self, name: str, namespace: str | None = None) -> None:
        super().__init__(SNAPSHOTS, "VolumeSnapshot", name, namespace)
        self._obj["spec"] = {"source": {"persistentVolumeClaimName": "checkpoints"}}

    def source(self, pvc: str) -> Self:
        return self.field("spec.source", {"persistentVolumeClaimName": pvc})

    def snapshot_class(self, name: str) -> Self:
        return self.field("spec.volumeSnapshotClassName", name)

    def step(self, step: int) -> Self:
        return self.annotations({SNAPSHOT_STEP: str(step)})

    def metric(self, name: str, value: float) -> Self:
        return self.annotations({f"{SNAPSHOT_METRIC}{name}": str(value)})

    def pinned(self) -> Self:
        return self.annotations({SNAPSHOT_PIN: "true"})

    def resume_point(self) -> Self:
        return self.annotations({SNAPSHOT_RESUME_POINT: "true"})

    def ready(self, taken: datetime, *, ready: bool = True, size: str = "1Gi") -> Self:
        """Cut at `taken` (readyToUse once the CSI driver finished), as the snapshot
        controller records it."""
        status = {
            "readyToUse": ready,
            "creationTime": rfc3339(taken),
            "restoreSize": size,
            "boundVolumeSnapshotContentName": f"snapcontent-{self._meta()['name']}",
        }
        return self.field("status", status)


class VolumeSnapshotClassBuilder(ObjectBuilder):
    def __init__(self, name: str, *, driver: str = "hostpath.csi.example.com") -> None:
        super().__init__(SNAPSHOTS, "VolumeSnapshotClass", name)
        self._obj.update(driver=driver, deletionPolicy="Delete")

    def deletion_policy(self, policy: str) -> Self:
        """Delete (pruning destroys the physical snapshot) or Retain."""
        return self.field("deletionPolicy", policy)


class PodDisruptionBudgetBuilder(ObjectBuilder):
    def __init__(self, name: str, namespace: str | None = None) -> None:
        super().__init__("policy/v1", "PodDisruptionBudget", name, namespace)
        self._obj["spec"] = {}

    def min_available(self, count: int) -> Self:
        return self.field("spec.minAvailable", count)

    def max_unavailable(self, count: int) -> Self:
        return self.field("spec.maxUnavailable", count)

    def match_labels(self, labels: Mapping[str, str] | None = None, /, **more: str) -> Self:
        return self.field("spec.selector", {"matchLabels": {**(labels or {}), **more}})
