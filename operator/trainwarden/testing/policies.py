"""Builders of the three policy kinds, validated through the API's pydantic models.

`build()` parses the manifest with the kind's model, so a builder call that makes an
invalid spec fails where the test wrote it, with the model's message, not later as a
rejected object or a policy reporting Ready=False. `unchecked()` skips that, for tests of
what the operator does with an invalid policy.
"""

import copy
from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any, Generic, Self, TypeVar

from pydantic import BaseModel

from trainwarden.api.v1alpha1 import (
    API_VERSION,
    CheckpointPolicy,
    IdleReclaimPolicy,
    TrainingBudget,
)
from trainwarden.api.v1alpha1.names import INSTANCE_LABEL
from trainwarden.testing.base import JSON, ObjectBuilder, duration

ModelT = TypeVar("ModelT", bound=BaseModel)
Expression = tuple[str, str, Sequence[str]]
"""A matchExpressions entry: (key, operator, values), e.g. ("tier", "In", ["gpu"])."""
Duration = str | timedelta


def label_selector(
    labels: Mapping[str, str] | None = None, expressions: Sequence[Expression] = ()
) -> JSON:
    selector: JSON = {}
    if labels:
        selector["matchLabels"] = dict(labels)
    if expressions:
        selector["matchExpressions"] = [
            {"key": k, "operator": op, "values": list(values)} for k, op, values in expressions
        ]
    return selector


class PolicyBuilder(ObjectBuilder, Generic[ModelT]):
    """What every policy has: a mode and a scope."""

    def __init__(self, model: type[ModelT], kind: str, name: str) -> None:
        super().__init__(API_VERSION, kind, name)
        self._model = model
        self._obj["spec"] = {}

    def enforce(self) -> Self:
        return self._set("mode", "Enforce")

    def instance(self, name: str) -> Self:
        """Governed only by the operator run with `--instance=name` (and no other)."""
        return self.labels({INSTANCE_LABEL: name})

    def dry_run(self) -> Self:
        return self._set("mode", "DryRun")

    def namespaces(self, *names: str) -> Self:
        return self._set("scope.namespaces", list(names))

    def namespace_selector(
        self, labels: Mapping[str, str] | None = None, *, expressions: Sequence[Expression] = ()
    ) -> Self:
        return self._set("scope.namespaceSelector", label_selector(labels, expressions))

    def selector(
        self, labels: Mapping[str, str] | None = None, *, expressions: Sequence[Expression] = ()
    ) -> Self:
        """Narrows the governed workloads by label."""
        return self._set("scope.selector", label_selector(labels, expressions))

    def model(self) -> ModelT:
        """The policy as the operator parses it; raises pydantic's ValidationError."""
        return self._model.model_validate(self._obj)

    def build(self) -> JSON:
        """The manifest, its spec validated and in the API's canonical spelling."""
        spec = self.model().model_dump(mode="json", by_alias=True, exclude_unset=True)["spec"]
        return {**copy.deepcopy(self._obj), "spec": spec}

    def unchecked(self) -> JSON:
        """The manifest as written, valid or not."""
        return super().build()

    def _section(self, path: str) -> Self:
        """Make sure the object at `path` in spec exists, even if no field of it is set."""
        node = self._obj["spec"]
        for part in path.split("."):
            node = node.setdefault(part, {})
        return self

    def _set(self, path: str, value: Any) -> Self:
        """Set a spec field by dotted path; None leaves it unset."""
        if value is not None:
            self.field(f"spec.{path}", value)
        return self


class BudgetBuilder(PolicyBuilder[TrainingBudget]):
    """`BudgetBuilder("team-a").namespaces("a").accelerator_hours(10).enforce().build()`"""

    def __init__(self, name: str) -> None:
        super().__init__(TrainingBudget, "TrainingBudget", name)

    def period(
        self, type_: str, *, time_zone: str | None = None, window: Duration | None = None
    ) -> Self:
        """Daily, Weekly, Monthly (in time_zone), Rolling (window) or Total."""
        self._set("period.type", type_)._set("period.timeZone", time_zone)
        return self._set("period.window", duration(window))

    def accelerator_hours(self, hours: float, *, resource: str | None = None) -> Self:
        """The limit on all accelerators, or on one resource name."""
        if resource is None:
            return self._set("limits.acceleratorHours", hours)
        limits = self._obj["spec"].setdefault("limits", {})
        limits.setdefault("acceleratorHoursByResource", {})[resource] = hours
        return self

    def cpu_core_hours(self, hours: float) -> Self:
        return self._set("limits.cpuCoreHours", hours)

    def memory_gib_hours(self, hours: float) -> Self:
        return self._set("limits.memoryGiBHours", hours)

    def cost(self, limit: float, *, currency: str | None = None) -> Self:
        """A cost limit; it needs rates (accelerator_rate, cpu_core_rate...)."""
        return self._set("limits.cost", limit)._set("rates.currency", currency)

    def accelerator_rate(
        self,
        price: float,
        *,
        resource: str | None = None,
        node_labels: Mapping[str, str] | None = None,
    ) -> Self:
        """The price of an accelerator-hour (of `resource`, on nodes with `node_labels`)."""
        rate: JSON = {"price": price}
        if resource is not None:
            rate["resource"] = resource
        if node_labels:
            rate["nodeSelector"] = dict(node_labels)
        rates = self._obj["spec"].setdefault("rates", {})
        rates.setdefault("acceleratorHour", []).append(rate)
        return self

    def prices_from(self, query: str | None = None, *, node_label: str | None = None) -> Self:
        """Per-node accelerator prices read from Prometheus (acceleratorHourFrom)."""
        source: JSON = {}
        if query is not None:
            source["query"] = query
        if node_label is not None:
            source["nodeLabel"] = node_label
        self._obj["spec"].setdefault("rates", {})["acceleratorHourFrom"] = source
        return self

    def cpu_core_rate(self, price: float) -> Self:
        return self._set("rates.cpuCoreHour", price)

    def storage_gib_hours(self, hours: float, *, storage_class: str | None = None) -> Self:
        """The storage limit over every class, or on one storage class."""
        if storage_class is None:
            return self._set("limits.storageGiBHours", hours)
        limits = self._obj["spec"].setdefault("limits", {})
        limits.setdefault("storageGiBHoursByClass", {})[storage_class] = hours
        return self

    def storage_rate(self, price: float, *, storage_class: str) -> Self:
        """The price of a requested GiB-hour of `storage_class`."""
        rates = self._obj["spec"].setdefault("rates", {})
        rates.setdefault("storageGiBHour", []).append(
            {"storageClass": storage_class, "price": price}
        )
        return self

    def memory_gib_rate(self, price: float) -> Self:
        return self._set("rates.memoryGiBHour", price)

    def thresholds(self, *, warn: int | None = None, enforce: int | None = None) -> Self:
        return self._set("thresholds.warn", warn)._set("thresholds.enforce", enforce)

    def grace(self, period: Duration) -> Self:
        """How long exhausted work keeps running before it is suspended ("0s": at once)."""
        return self._set("enforcement.gracePeriod", duration(period))

    def order(self, *orders: str) -> Self:
        """Newest, Oldest, LowestPriority, Largest: which workloads to suspend first."""
        return self._set("enforcement.order", list(orders))

    def resume(self, policy: str) -> Self:
        """Automatic or Never."""
        return self._set("enforcement.resume", policy)

    def max_suspensions_per_minute(self, count: int) -> Self:
        return self._set("enforcement.maxSuspensionsPerMinute", count)

    def accelerators(self, *resources: str) -> Self:
        return self._set("accelerators", list(resources))

    def attribution_labels(self, *keys: str) -> Self:
        return self._set("attributionLabels", list(keys))

    def history_limit(self, count: int) -> Self:
        return self._set("historyLimit", count)

    def repeats(self, what: str) -> Self:
        return self._set("repeats", what)


class IdlePolicyBuilder(PolicyBuilder[IdleReclaimPolicy]):
    """`IdlePolicyBuilder("gpus").namespaces("a").signal(window="30s").action("Suspend")`"""

    def __init__(self, name: str) -> None:
        super().__init__(IdleReclaimPolicy, "IdleReclaimPolicy", name)

    def signal(
        self,
        *,
        threshold: float | None = None,
        window: Duration | None = None,
        resolution: Duration | None = None,
        warmup: Duration | None = None,
        query: str | None = None,
    ) -> Self:
        self._set("signal.threshold", threshold)._set("signal.query", query)
        for name, value in (("window", window), ("resolution", resolution), ("warmup", warmup)):
            self._set(f"signal.{name}", duration(value))
        return self

    def action(self, action: str) -> Self:
        """Suspend, Delete, ScaleDown or NotifyOnly."""
        return self._set("action", action)

    def grace(self, period: Duration) -> Self:
        """Between the warning and the action."""
        return self._set("gracePeriod", duration(period))

    def lease(self, max_lifetime: Duration, *, labels: Mapping[str, str] | None = None) -> Self:
        """A maximum lifetime for the accelerator holders (with these labels)."""
        self._set("lease.maxLifetime", duration(max_lifetime))
        return self._set("lease.selector", label_selector(labels) if labels else None)

    def allow_opt_out(self, *, max_keep: Duration | None = None) -> Self:
        self._set("exemptions.allowOptOut", True)
        return self._set("exemptions.maxKeepDuration", duration(max_keep))

    def exempt_priority_classes(self, *names: str) -> Self:
        return self._set("exemptions.priorityClasses", list(names))

    def idle_nodes(
        self,
        *,
        after: Duration | None = None,
        cordon: bool | None = None,
        label: bool | None = None,
        node_labels: Mapping[str, str] | None = None,
    ) -> Self:
        """Report (and cordon or label) accelerator nodes without accelerator pods."""
        self._section("idleNodes")._set("idleNodes.after", duration(after))
        self._set("idleNodes.cordon", cordon)._set("idleNodes.label", label)
        selector = label_selector(node_labels) if node_labels else None
        return self._set("idleNodes.nodeSelector", selector)

    def max_actions_per_minute(self, count: int) -> Self:
        return self._set("maxActionsPerMinute", count)

    def rightsizing(
        self, *, window: Duration | None = None, threshold: float | None = None
    ) -> Self:
        """Report workloads holding accelerators that do not work over `window`."""
        self._section("rightsizing")._set("rightsizing.window", duration(window))
        return self._set("rightsizing.threshold", threshold)

    def under_pressure(self, *, min_pending: Duration | None = None) -> Self:
        """Reclaim only while pending pods want what an idle workload holds."""
        self._set("reclaimWhen", "UnderPressure")
        return self._set("pressure.minPending", duration(min_pending))

    def estimate_horizon(self, horizon: Duration) -> Self:
        return self._set("estimateHorizon", duration(horizon))

    def node_labels(self, *keys: str) -> Self:
        return self._set("nodeLabels", list(keys))

    def accelerators(self, *resources: str) -> Self:
        return self._set("accelerators", list(resources))


class CheckpointPolicyBuilder(PolicyBuilder[CheckpointPolicy]):
    """`CheckpointPolicyBuilder("hf").namespaces("a").pvc("/checkpoints").keep_last(2)`"""

    def __init__(self, name: str) -> None:
        super().__init__(CheckpointPolicy, "CheckpointPolicy", name)

    def pvc(
        self,
        path: str | None = None,
        *,
        labels: Mapping[str, str] | None = None,
        from_workload_annotation: bool | None = None,
    ) -> Self:
        """Checkpoint directories on PVCs (those with `labels`), at `path` in the volume."""
        self._section("storage.pvc")._set("storage.pvc.path", path)
        self._set("storage.pvc.selector", label_selector(labels) if labels else None)
        return self._set("storage.pvc.fromWorkloadAnnotation", from_workload_annotation)

    def snapshots(self, labels: Mapping[str, str], *, allow_delete: bool | None = None) -> Self:
        """VolumeSnapshots with `labels`; allow_delete: also those whose class deletes the
        physical snapshot (allowDeletePolicyDelete)."""
        self._set("storage.volumeSnapshots.selector", label_selector(labels))
        return self._set("storage.volumeSnapshots.allowDeletePolicyDelete", allow_delete)

    def s3(
        self,
        endpoint: str,
        bucket: str,
        *,
        secret: tuple[str, str],
        prefix: str | None = None,
        region: str | None = None,
    ) -> Self:
        """Object storage; `secret` is the (namespace, name) of the credentials' Secret."""
        namespace, name = secret
        credentials = {"namespace": namespace, "name": name}
        self._set(
            "storage.s3", {"endpoint": endpoint, "bucket": bucket, "credentials": credentials}
        )
        return self._set("storage.s3.prefix", prefix)._set("storage.s3.region", region)

    def layout(
        self, type_: str, *, glob: str | None = None, step_pattern: str | None = None
    ) -> Self:
        """HuggingFace, DeepSpeed, Lightning, Orbax, TorchDCP, or Glob (glob, step_pattern)."""
        self._set("layout.type", type_)._set("layout.glob", glob)
        return self._set("layout.stepPattern", step_pattern)

    def keep_last(self, count: int) -> Self:
        return self._set("retention.keepLast", count)

    def keep_every(self, *, steps: int | None = None, interval: Duration | None = None) -> Self:
        self._section("retention.keepEvery")._set("retention.keepEvery.steps", steps)
        return self._set("retention.keepEvery.interval", duration(interval))

    def keep_best(self, metric: str, *, order: str | None = None, count: int | None = None) -> Self:
        return self._set("retention.keepBest", _best(metric, order, count))

    def max_age(self, age: Duration) -> Self:
        return self._set("retention.maxAge", duration(age))

    def max_total_size(self, quantity: str) -> Self:
        return self._set("retention.maxTotalSize", quantity)

    def min_age(self, age: Duration) -> Self:
        return self._set("retention.minAge", duration(age))

    def after_completion(
        self,
        *,
        keep_last: int | None = None,
        delay: Duration | None = None,
        keep_best: str | None = None,
        order: str | None = None,
    ) -> Self:
        """The stricter rule once the job finished; keep_best names the metric."""
        self._section("afterCompletion")._set("afterCompletion.keepLast", keep_last)
        self._set("afterCompletion.delay", duration(delay))
        best = None if keep_best is None else _best(keep_best, order, None)
        return self._set("afterCompletion.keepBest", best)

    def every(self, interval: Duration) -> Self:
        return self._set("schedule.interval", duration(interval))

    def cron(self, expression: str, *, time_zone: str | None = None) -> Self:
        return self._set("schedule.cron", expression)._set("schedule.timeZone", time_zone)

    def max_deletions_per_run(self, count: int) -> Self:
        return self._set("maxDeletionsPerRun", count)


def _best(metric: str, order: str | None, count: int | None) -> JSON:
    best: JSON = {"metric": metric}
    if order is not None:
        best["order"] = order
    if count is not None:
        best["count"] = count
    return best
