"""Builders of the training workloads trainwarden suspends, scales and reads: Jobs,
Deployments and StatefulSets, JobSets, Kubeflow jobs, RayJobs and RayClusters.

Each has its pod template's methods (gpus, cpu, labels of the pods...) through
PodSpecMethods; the kinds with several pod templates take them from a PodBuilder.
"""

import copy
from datetime import datetime
from typing import Self

from trainwarden.api.v1alpha1.names import CHECKPOINT_PATH, RESUME_FROM
from trainwarden.testing.apiserver import rfc3339
from trainwarden.testing.base import JSON, ObjectBuilder
from trainwarden.testing.pods import PodBuilder, PodSpecMethods, default_pod_spec

KUEUE_QUEUE = "kueue.x-k8s.io/queue-name"
Template = PodBuilder | JSON | None
"""A pod template: a PodBuilder, a template dict, or None for the default trainer pod."""


def pod_template(template: Template = None) -> JSON:
    if isinstance(template, PodBuilder):
        return template.template()
    if template is None:
        return {"metadata": {}, "spec": default_pod_spec()}
    return copy.deepcopy(template)


class _TemplatedBuilder(ObjectBuilder, PodSpecMethods):
    """A workload with one pod template at spec.template."""

    def __init__(
        self, api_version: str, kind: str, name: str, namespace: str | None = None
    ) -> None:
        super().__init__(api_version, kind, name, namespace)
        self._obj["spec"] = {"template": pod_template()}

    def _pod(self) -> JSON:
        template: JSON = self._obj["spec"]["template"]
        return template

    def template(self, template: Template) -> Self:
        """Replace the pod template."""
        self._obj["spec"]["template"] = pod_template(template)
        return self

    def queue(self, name: str) -> Self:
        """Managed by Kueue through the LocalQueue `name`."""
        return self.labels({KUEUE_QUEUE: name})

    def checkpoint_path(self, path: str) -> Self:
        """Names its checkpoint directory ("<pvc>:<path>" or "s3://bucket/prefix")."""
        return self.annotations({CHECKPOINT_PATH: path})

    def resume_from(self, checkpoint: str) -> Self:
        """Names the checkpoint it resumes from (pruning never deletes it)."""
        return self.annotations({RESUME_FROM: checkpoint})


class JobBuilder(_TemplatedBuilder):
    """`JobBuilder("train", "ns").suspended().parallelism(2).gpus(8).build()`"""

    def __init__(self, name: str, namespace: str | None = None) -> None:
        super().__init__("batch/v1", "Job", name, namespace)

    def suspended(self, suspended: bool = True) -> Self:
        return self.field("spec.suspend", suspended)

    def parallelism(self, count: int) -> Self:
        return self.field("spec.parallelism", count)

    def completions(self, count: int) -> Self:
        return self.field("spec.completions", count)

    def backoff_limit(self, count: int) -> Self:
        return self.field("spec.backoffLimit", count)

    def active_deadline(self, seconds: int) -> Self:
        return self.field("spec.activeDeadlineSeconds", seconds)

    def started(self, at: datetime, *, active: int = 1) -> Self:
        return self.field("status.startTime", rfc3339(at)).field("status.active", active)

    def succeeded(self, at: datetime) -> Self:
        """Complete at `at`, as the Job controller records it."""
        self.field("status.completionTime", rfc3339(at)).field("status.succeeded", 1)
        return self._finished("Complete", at, "CompletionsReached")

    def failed(self, at: datetime, reason: str = "BackoffLimitExceeded") -> Self:
        return self.field("status.failed", 1)._finished("Failed", at, reason)

    def _finished(self, condition: str, at: datetime, reason: str) -> Self:
        status = self._obj.setdefault("status", {})
        status["active"] = 0
        status["conditions"] = [
            {
                "type": condition,
                "status": "True",
                "reason": reason,
                "lastTransitionTime": rfc3339(at),
            }
        ]
        return self


class DeploymentBuilder(_TemplatedBuilder):
    """A Deployment whose pods carry app=<name> (its selector), restartPolicy Always."""

    def __init__(
        self, name: str, namespace: str | None = None, *, kind: str = "Deployment"
    ) -> None:
        super().__init__("apps/v1", kind, name, namespace)
        self.pod_labels(app=name).restart_policy("Always").replicas(1)
        self._obj["spec"]["selector"] = {"matchLabels": {"app": name}}

    def replicas(self, count: int) -> Self:
        return self.field("spec.replicas", count)

    def ready(self, count: int) -> Self:
        """Status: `count` replicas exist and are ready."""
        return self.field("status.replicas", count).field("status.readyReplicas", count)


class StatefulSetBuilder(DeploymentBuilder):
    def __init__(self, name: str, namespace: str | None = None) -> None:
        super().__init__(name, namespace, kind="StatefulSet")
        self._obj["spec"]["serviceName"] = name


class JobSetBuilder(ObjectBuilder):
    """`JobSetBuilder("js", "ns").replicated_job("workers", replicas=2, template=pod)`"""

    def __init__(self, name: str, namespace: str | None = None) -> None:
        super().__init__("jobset.x-k8s.io/v1alpha2", "JobSet", name, namespace)
        self._obj["spec"] = {"replicatedJobs": []}

    def replicated_job(self, name: str, *, replicas: int = 1, template: Template = None) -> Self:
        job = {"spec": {"template": pod_template(template)}}
        entry = {"name": name, "replicas": replicas, "template": job}
        self._obj["spec"]["replicatedJobs"].append(entry)
        return self

    def suspended(self, suspended: bool = True) -> Self:
        return self.field("spec.suspend", suspended)


_REPLICA_SPECS = {
    "PyTorchJob": "pytorchReplicaSpecs",
    "TFJob": "tfReplicaSpecs",
    "MPIJob": "mpiReplicaSpecs",
    "XGBoostJob": "xgbReplicaSpecs",
    "PaddleJob": "paddleReplicaSpecs",
    "JAXJob": "jaxReplicaSpecs",
}


class KubeflowJobBuilder(ObjectBuilder):
    """A kubeflow.org/v1 training job (PyTorchJob, TFJob, MPIJob, ...)."""

    def __init__(self, kind: str, name: str, namespace: str | None = None) -> None:
        super().__init__("kubeflow.org/v1", kind, name, namespace)
        self._specs = _REPLICA_SPECS[kind]
        self._obj["spec"] = {self._specs: {}}

    def replica(
        self,
        role: str,
        *,
        replicas: int = 1,
        template: Template = None,
        restart_policy: str = "Never",
    ) -> Self:
        """A replica type, e.g. Master or Worker."""
        spec = {"replicas": replicas, "restartPolicy": restart_policy}
        self._obj["spec"][self._specs][role] = {**spec, "template": pod_template(template)}
        return self

    def suspended(self, suspended: bool = True) -> Self:
        return self.field("spec.runPolicy.suspend", suspended)


class PyTorchJobBuilder(KubeflowJobBuilder):
    def __init__(self, name: str, namespace: str | None = None) -> None:
        super().__init__("PyTorchJob", name, namespace)


class RayJobBuilder(ObjectBuilder):
    def __init__(self, name: str, namespace: str | None = None) -> None:
        super().__init__("ray.io/v1", "RayJob", name, namespace)
        self._obj["spec"] = {"entrypoint": "python train.py"}

    def entrypoint(self, command: str) -> Self:
        return self.field("spec.entrypoint", command)

    def suspended(self, suspended: bool = True) -> Self:
        return self.field("spec.suspend", suspended)


class RayClusterBuilder(ObjectBuilder):
    """A RayCluster (its head group made from the default trainer pod unless given)."""

    def __init__(self, name: str, namespace: str | None = None) -> None:
        super().__init__("ray.io/v1", "RayCluster", name, namespace)
        self.head()

    def head(self, template: Template = None) -> Self:
        group = {"rayStartParams": {}, "template": pod_template(template)}
        return self.field("spec.headGroupSpec", group)

    def workers(self, group: str, *, replicas: int = 1, template: Template = None) -> Self:
        spec = {"groupName": group, "replicas": replicas, "rayStartParams": {}}
        groups = self._obj["spec"].setdefault("workerGroupSpecs", [])
        groups.append({**spec, "template": pod_template(template)})
        return self
