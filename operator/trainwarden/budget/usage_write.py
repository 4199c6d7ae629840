"""Make a budget's BudgetUsage objects match its status as written (budget/usage.py decides).

Called after the budget's status is written (budget/reconcile.py). The operator's own
objects are those it remembers writing (their uid), and at a start those listed with its
labels AND an ownerReference to the budget's uid; it deletes only such objects, re-read and
deleted on their uid and resourceVersion. A BudgetUsage of the same name that is not its
own (a tenant's) is never changed nor deleted, and never read for figures: that namespace
gets no object until it is gone (a log line says so, tried again every USAGE_INTERVAL).
A failed write is said and tried again at the next evaluation; it never stops the budget.
"""

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from trainwarden import logs
from trainwarden.adapters.kube import JSON, Conflict, Gone, Kube
from trainwarden.adapters.workloads import label_value
from trainwarden.api.v1alpha1.budget import TrainingBudgetSpec
from trainwarden.api.v1alpha1.budget_status import TrainingBudgetStatus
from trainwarden.api.v1alpha1.names import BUDGET_KIND, BUDGET_LABEL, INSTANCE_LABEL
from trainwarden.api.v1alpha1.names import USAGE_KIND as KIND
from trainwarden.api.v1alpha1.types import API_VERSION, MANAGED_BY
from trainwarden.budget.usage import (
    USAGE_INTERVAL,
    UsageMemory,
    Written,
    decide,
    replacing,
    wanted,
)

log = logs.get(__name__)


@dataclass(frozen=True)
class Owner:
    """The budget the objects belong to, and the operator instance that writes them."""

    name: str
    uid: str
    instance: str | None

    def labels(self) -> dict[str, str]:
        labels = {MANAGED_BY: "trainwarden", BUDGET_LABEL: label_value(self.name)}
        if self.instance:
            labels[INSTANCE_LABEL] = self.instance
        return labels

    def selector(self) -> str:
        mine = f"{INSTANCE_LABEL}={self.instance}" if self.instance else f"!{INSTANCE_LABEL}"
        return f"{MANAGED_BY}=trainwarden,{BUDGET_LABEL}={label_value(self.name)},{mine}"

    def reference(self) -> JSON:
        return {
            "apiVersion": API_VERSION,
            "kind": BUDGET_KIND,
            "name": self.name,
            "uid": self.uid,
            "controller": True,
        }

    def owns(self, obj: JSON | None) -> bool:
        """Its labels AND an ownerReference to this budget's uid. A tenant may copy both
        onto an object in its own namespace: then the operator overwrites or deletes only
        what that namespace's team could delete itself, and GC removes it with the budget."""
        if obj is None:
            return False
        meta: dict[str, Any] = obj.get("metadata") or {}
        labels = meta.get("labels") or {}
        if any(labels.get(k) != v for k, v in self.labels().items()):
            return False
        refs = meta.get("ownerReferences") or []
        return any(r.get("uid") == self.uid and r.get("kind") == BUDGET_KIND for r in refs)

    def manifest(self, namespace: str, spec: JSON) -> JSON:
        return {
            "apiVersion": API_VERSION,
            "kind": KIND,
            "metadata": {
                "name": self.name,
                "namespace": namespace,
                "labels": self.labels(),
                "ownerReferences": [self.reference()],
            },
            "spec": spec,
        }


async def publish(
    kube: Kube,
    body: JSON,
    spec: TrainingBudgetSpec,
    memory: UsageMemory,
    covered: Callable[[str], bool],
    instance: str | None,
    now: datetime,
    *,
    fresh: bool,
) -> None:
    """Bring the budget's BudgetUsages to its status as written in `body`; `covered(ns)`
    says whether its scope covers a namespace that exists; `fresh`: this evaluation wrote
    that status (figures only the clock moved are copied only then, budget/usage.py)."""
    meta = body["metadata"]
    owner = Owner(meta["name"], str(meta.get("uid") or ""), instance)
    try:
        status = TrainingBudgetStatus.model_validate(body.get("status") or {})
        if not memory.listed:
            await _adopt(kube, owner, memory, now)
        want, left_out = wanted(owner.name, spec, status, covered)
        plan = decide(want, left_out, memory.written, now, fresh=fresh)
        memory.foreign = {ns: t for ns, t in memory.foreign.items() if ns in want}
        memory.left_out = plan.left_out
        for namespace, new in plan.write.items():
            await _write(kube, owner, memory, namespace, new, now)
        for namespace in plan.delete:
            await _delete(kube, owner, memory, namespace)
    except Exception as error:  # forbidden, unreachable: said, tried again next time
        log.warning(
            "budget usage not written", object=f"{BUDGET_KIND}/{owner.name}", error=str(error)
        )
        return


async def _adopt(kube: Kube, owner: Owner, memory: UsageMemory, now: datetime) -> None:
    """The objects an earlier process wrote: rewritten or deleted at this evaluation."""
    for obj in await kube.list(API_VERSION, KIND, selector=owner.selector()):
        m = obj.get("metadata") or {}
        if owner.owns(obj) and m.get("name") == owner.name:
            memory.written[str(m.get("namespace"))] = Written(None, str(m.get("uid")), now)
    memory.listed = True


async def _write(
    kube: Kube, owner: Owner, memory: UsageMemory, namespace: str, spec: JSON, now: datetime
) -> None:
    since = memory.foreign.get(namespace)
    if since is not None and now - since < USAGE_INTERVAL and now >= since:
        return
    last = memory.written.get(namespace)
    if last is None:
        created = await _create(kube, owner, namespace, spec, now)
        if created is None:
            memory.foreign[namespace] = now
            log.warning(
                "a BudgetUsage not written by the operator is in the way",
                object=f"{KIND}/{namespace}/{owner.name}",
            )
            return
        if created.spec is not None:  # created now
            memory.foreign.pop(namespace, None)
            memory.written[namespace] = created
            return
        last = created  # ours, from before: patched at once
    version = await _rewrite(kube, owner, namespace, last, spec)
    if version is not None:
        memory.written[namespace] = Written(spec, last.uid, now, version)
    else:  # replaced or deleted since: created again next time
        memory.written.pop(namespace, None)


async def _rewrite(
    kube: Kube, owner: Owner, namespace: str, last: Written, spec: JSON
) -> str | None:
    """Our object `last.uid` made to say `spec`: one PATCH conditional on the version our
    last write left (unchanged since, it holds exactly what we wrote), else read first.
    Its new resourceVersion; None when it is gone or no longer ours."""
    if last.spec is not None and last.version is not None:
        patch = owner.manifest(namespace, replacing(last.spec, spec))
        patch["metadata"]["uid"] = last.uid
        patch["metadata"]["resourceVersion"] = last.version
        try:
            written = await kube.merge_patch(API_VERSION, KIND, namespace, owner.name, patch)
        except Gone:
            return None
        except Conflict:  # changed by someone since: read what it holds now
            return await _replace(kube, owner, namespace, last.uid, spec)
        return str(written["metadata"].get("resourceVersion") or "") or None
    return await _replace(kube, owner, namespace, last.uid, spec)


async def _replace(kube: Kube, owner: Owner, namespace: str, uid: str, spec: JSON) -> str | None:
    """Overwrite the spec of our object `uid`, whatever it holds now (read only to know
    which fields to remove); its new resourceVersion, None when it is gone or no longer
    ours."""
    found = await kube.get(API_VERSION, KIND, namespace, owner.name)
    if found is None or found["metadata"].get("uid") != uid or not owner.owns(found):
        return None
    patch = owner.manifest(namespace, replacing(found.get("spec"), spec))
    patch["metadata"]["uid"] = uid  # preconditions: the object read, no other
    patch["metadata"]["resourceVersion"] = found["metadata"].get("resourceVersion")
    try:
        written = await kube.merge_patch(API_VERSION, KIND, namespace, owner.name, patch)
    except (Conflict, Gone):
        return None
    return str(written["metadata"].get("resourceVersion") or "") or None


async def _create(
    kube: Kube, owner: Owner, namespace: str, spec: JSON, now: datetime
) -> Written | None:
    """The object created in `namespace` (as written); an object of ours already there,
    as not yet written (spec None); None when what is there is not ours (or the
    namespace is going)."""
    try:
        created = await kube.create(owner.manifest(namespace, spec))
    except Gone:  # the namespace is being deleted
        return None
    if created is not None:
        meta = created["metadata"]
        return Written(spec, str(meta["uid"]), now, str(meta.get("resourceVersion") or "") or None)
    found = await kube.get(API_VERSION, KIND, namespace, owner.name)
    if found is None or not owner.owns(found):
        return None
    return Written(None, str(found["metadata"]["uid"]), now)


async def _delete(kube: Kube, owner: Owner, memory: UsageMemory, namespace: str) -> None:
    last = memory.written.pop(namespace)
    found = await kube.get(API_VERSION, KIND, namespace, owner.name)
    if found is None or not owner.owns(found) or found["metadata"].get("uid") != last.uid:
        return
    try:
        await kube.delete(
            API_VERSION,
            KIND,
            namespace,
            owner.name,
            uid=last.uid,
            resource_version=str(found["metadata"].get("resourceVersion")),
        )
    except (Conflict, Gone):
        return
    log.info(
        "budget usage removed: the budget no longer covers or charges the namespace",
        object=f"{KIND}/{namespace}/{owner.name}",
    )
