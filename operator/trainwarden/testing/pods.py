"""Pods, and the pod template every workload builder shares.

The default pod is the e2e tests' simulated trainer: one container "trainer", an image
that is never pulled, restartPolicy Never. Accounting reads requests, startTime and the
containers' finishedAt; the methods here set exactly those, as the kubelet would.
"""

import copy
from collections.abc import Mapping
from datetime import datetime
from typing import Self

from trainwarden.api.v1alpha1.names import CHECKPOINT_PATH, SIM_COMPLETE_AFTER, SIM_FAIL_AFTER
from trainwarden.testing.apiserver import rfc3339
from trainwarden.testing.base import JSON, ObjectBuilder

GPU = "nvidia.com/gpu"
TRAINER_IMAGE = "example.invalid/trainer:1"


def default_pod_spec() -> JSON:
    return {
        "restartPolicy": "Never",
        "containers": [{"name": "trainer", "image": TRAINER_IMAGE}],
    }


class PodSpecMethods:
    """Methods on a pod spec, shared by pods and the templates of workloads."""

    def _pod(self) -> JSON:
        """The object holding "metadata" and "spec" of the pod (itself, or a template)."""
        raise NotImplementedError

    def _container(self) -> JSON:
        container: JSON = self._pod()["spec"]["containers"][0]
        return container

    def _pod_spec(self, **fields: object) -> Self:
        self._pod()["spec"].update(fields)
        return self

    def gpus(self, count: int, *, resource: str = GPU) -> Self:
        """Requests and limits `count` accelerators (extended resources need both equal)."""
        resources = self._container().setdefault("resources", {})
        resources.setdefault("requests", {})[resource] = str(count)
        resources.setdefault("limits", {})[resource] = str(count)
        return self

    def cpu(self, quantity: str) -> Self:
        return self.requests(cpu=quantity)

    def memory(self, quantity: str) -> Self:
        return self.requests(memory=quantity)

    def requests(self, requests: Mapping[str, str] | None = None, /, **more: str) -> Self:
        resources = self._container().setdefault("resources", {})
        resources.setdefault("requests", {}).update({**(requests or {}), **more})
        return self

    def image(self, image: str, *, pull_policy: str | None = None) -> Self:
        self._container()["image"] = image
        if pull_policy is not None:
            self._container()["imagePullPolicy"] = pull_policy
        return self

    def command(self, *command: str) -> Self:
        self._container()["command"] = list(command)
        return self

    def args(self, *args: str) -> Self:
        self._container()["args"] = list(args)
        return self

    def node(self, name: str) -> Self:
        """Scheduled to node `name`."""
        return self._pod_spec(nodeName=name)

    def node_selector(self, labels: Mapping[str, str]) -> Self:
        return self._pod_spec(nodeSelector=dict(labels))

    def toleration(self, key: str, *, value: str | None = None, effect: str = "NoSchedule") -> Self:
        """Tolerates the taint `key` (=value, if given)."""
        rule: JSON = {"key": key, "operator": "Exists", "effect": effect}
        if value is not None:
            rule.update(operator="Equal", value=value)
        self._pod()["spec"].setdefault("tolerations", []).append(rule)
        return self

    def priority(self, value: int, *, class_name: str | None = None) -> Self:
        """The priority the admission plugin resolved (and the class it came from)."""
        self._pod_spec(priority=value)
        return self if class_name is None else self._pod_spec(priorityClassName=class_name)

    def run_as(self, uid: int, *, group: int | None = None) -> Self:
        """Runs as the non-root `uid` (and `group`): the pod's securityContext."""
        context: JSON = {"runAsNonRoot": True, "runAsUser": uid}
        if group is not None:
            context["runAsGroup"] = group
        return self._pod_spec(securityContext=context)

    def completes_after(self, after: str) -> Self:
        """On a kwok node (the e2e cluster), the pod succeeds `after` (a Go duration,
        "40s") it started."""
        return self.pod_annotations({SIM_COMPLETE_AFTER: after})

    def fails_after(self, after: str) -> Self:
        """On a kwok node (the e2e cluster), the pod fails `after` (a Go duration) it
        started."""
        return self.pod_annotations({SIM_FAIL_AFTER: after})

    def restart_policy(self, policy: str) -> Self:
        return self._pod_spec(restartPolicy=policy)

    def termination_grace(self, seconds: int) -> Self:
        return self._pod_spec(terminationGracePeriodSeconds=seconds)

    def claim(self, claim: str, *, mount_path: str = "/data", volume: str = "data") -> Self:
        """Mounts the PVC `claim` at `mount_path` in the container."""
        spec = self._pod()["spec"]
        source = {"name": volume, "persistentVolumeClaim": {"claimName": claim}}
        spec.setdefault("volumes", []).append(source)
        mount = {"name": volume, "mountPath": mount_path}
        self._container().setdefault("volumeMounts", []).append(mount)
        return self

    def pod_labels(self, labels: Mapping[str, str] | None = None, /, **more: str) -> Self:
        meta = self._pod().setdefault("metadata", {})
        meta.setdefault("labels", {}).update({**(labels or {}), **more})
        return self

    def pod_annotations(self, annotations: Mapping[str, str] | None = None, /, **more: str) -> Self:
        meta = self._pod().setdefault("metadata", {})
        meta.setdefault("annotations", {}).update({**(annotations or {}), **more})
        return self


class PodBuilder(ObjectBuilder, PodSpecMethods):
    """`PodBuilder("p", "ns").gpus(8).owned_by(job).started(t).node("gpu-0").build()`"""

    def __init__(self, name: str, namespace: str | None = None) -> None:
        super().__init__("v1", "Pod", name, namespace)
        self._obj["spec"] = default_pod_spec()

    def _pod(self) -> JSON:
        return self._obj

    def checkpoint_path(self, path: str) -> Self:
        """Names its checkpoint directory ("<pvc>:<path>" or "s3://bucket/prefix")."""
        return self.annotations({CHECKPOINT_PATH: path})

    def pending(self) -> Self:
        self._obj["status"] = {"phase": "Pending"}
        return self

    def unschedulable(self, since: datetime) -> Self:
        """Pending: the scheduler has found no node for it since `since`."""
        scheduled = {
            "type": "PodScheduled",
            "status": "False",
            "reason": "Unschedulable",
            "lastTransitionTime": rfc3339(since),
        }
        self._obj["status"] = {"phase": "Pending", "conditions": [scheduled]}
        return self

    def started(self, at: datetime) -> Self:
        """Running since `at`: from then on it holds its requests."""
        state = {"running": {"startedAt": rfc3339(at)}}
        self._obj["status"] = {
            "phase": "Running",
            "startTime": rfc3339(at),
            "containerStatuses": [self._container_status(state)],
        }
        return self

    def finished(self, at: datetime, phase: str = "Succeeded") -> Self:
        """Terminated at `at` (Succeeded or Failed); started() before it sets the start."""
        code, reason = (0, "Completed") if phase == "Succeeded" else (1, "Error")
        terminated = {"exitCode": code, "reason": reason, "finishedAt": rfc3339(at)}
        status = self._obj.setdefault("status", {})
        status["phase"] = phase
        status["containerStatuses"] = [self._container_status({"terminated": terminated})]
        return self

    def template(self) -> JSON:
        """This pod as the pod template of a workload (metadata labels and annotations)."""
        meta = {k: v for k, v in self._meta().items() if k in ("labels", "annotations")}
        return {"metadata": copy.deepcopy(meta), "spec": copy.deepcopy(self._obj["spec"])}

    def _container_status(self, state: JSON) -> JSON:
        name = self._container()["name"]
        return {"name": name, "ready": "running" in state, "restartCount": 0, "state": state}
