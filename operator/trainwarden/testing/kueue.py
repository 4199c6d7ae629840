"""Kueue's objects (v1beta2, as Kueue v0.17 stores them): a Workload as Kueue makes one
for a Job, its conditions and admission check states, and AdmissionChecks."""

from collections.abc import Mapping
from datetime import datetime
from typing import Any, Self

from trainwarden.api.v1alpha1.names import CHECK_CONTROLLER
from trainwarden.testing.apiserver import rfc3339
from trainwarden.testing.base import JSON, ObjectBuilder
from trainwarden.testing.workloads import Template, pod_template

KUEUE = "kueue.x-k8s.io/v1beta2"
JOB_UID = "kueue.x-k8s.io/job-uid"


class WorkloadBuilder(ObjectBuilder):
    """`WorkloadBuilder("job-train-1a2b", ns).for_job(job).reserved("cq", at).Obj()`."""

    def __init__(self, name: str, namespace: str | None = None) -> None:
        super().__init__(KUEUE, "Workload", name, namespace)
        self._obj["spec"] = {"active": True, "podSets": []}

    def queue(self, name: str) -> Self:
        self._obj["spec"]["queueName"] = name
        return self

    def for_job(self, job: Mapping[str, Any]) -> Self:
        """Made by Kueue for `job` (created, with a uid): owned by it, labelled with its
        uid, one pod set `main` of its template and parallelism."""
        self.owned_by(job).labels({JOB_UID: job["metadata"]["uid"]})
        spec = job.get("spec") or {}
        return self.pod_set("main", int(spec.get("parallelism") or 1), dict(spec["template"]))

    def pod_set(self, name: str, count: int = 1, template: Template = None) -> Self:
        entry = {"name": name, "count": count, "template": pod_template(template)}
        self._obj["spec"]["podSets"].append(entry)
        return self

    def max_execution(self, seconds: int) -> Self:
        self._obj["spec"]["maximumExecutionTimeSeconds"] = seconds
        return self

    def active(self, active: bool = True) -> Self:
        self._obj["spec"]["active"] = active
        return self

    def condition(self, kind: str, status: str, at: datetime, reason: str = "") -> Self:
        conditions = self._status().setdefault("conditions", [])
        conditions[:] = [c for c in conditions if c["type"] != kind]
        entry = {"type": kind, "status": status, "reason": reason or kind, "message": ""}
        conditions.append(entry | {"lastTransitionTime": rfc3339(at)})
        return self

    def reserved(self, cluster_queue: str, at: datetime) -> Self:
        """Quota reserved in `cluster_queue`, waiting on its admission checks."""
        self._status()["admission"] = {"clusterQueue": cluster_queue, "podSetAssignments": []}
        return self.condition("QuotaReserved", "True", at)

    def admitted(self, cluster_queue: str, at: datetime) -> Self:
        return self.reserved(cluster_queue, at).condition("Admitted", "True", at)

    def finished(self, at: datetime) -> Self:
        return self.condition("Finished", "True", at)

    def check(self, name: str, state: str = "Pending", at: datetime | None = None) -> Self:
        checks = self._status().setdefault("admissionChecks", [])
        checks[:] = [c for c in checks if c["name"] != name]
        entry = {"name": name, "state": state, "message": ""}
        checks.append(entry | ({"lastTransitionTime": rfc3339(at)} if at else {}))
        return self

    def _status(self) -> JSON:
        status: JSON = self._obj.setdefault("status", {})
        return status


class AdmissionCheckBuilder(ObjectBuilder):
    def __init__(self, name: str) -> None:
        super().__init__(KUEUE, "AdmissionCheck", name)
        self._obj["spec"] = {"controllerName": CHECK_CONTROLLER}

    def controller(self, name: str) -> Self:
        self._obj["spec"]["controllerName"] = name
        return self
