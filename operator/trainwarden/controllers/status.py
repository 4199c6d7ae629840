"""Writing a policy's status, shared by every kind the operator evaluates itself."""

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Generic, TypeVar

from pydantic import BaseModel, TypeAdapter, ValidationError

from trainwarden import logs, metrics
from trainwarden.adapters.kube import JSON, Kube
from trainwarden.api.v1alpha1 import conditions as C
from trainwarden.api.v1alpha1.types import API_VERSION, Condition
from trainwarden.api.v1alpha1.validation import parse_spec
from trainwarden.cache.cluster import Interruption
from trainwarden.core.conditions import ConditionUpdate, readiness, set_condition
from trainwarden.core.patches import merge_patch_diff

log = logs.get(__name__)
StatusT = TypeVar("StatusT", bound=BaseModel)
SpecT = TypeVar("SpecT", bound=BaseModel)
RESYNC = timedelta(seconds=30)
"""The longest a policy goes unevaluated, whatever its forecasts say."""
STATUS_INTERVAL = timedelta(minutes=5)
"""The default of `--status-interval`: the longest a status lags behind while only the
clock moves it (the time of the last evaluation, a budget's running totals), for every
kind, as the kubelet reports an unchanged node status every 5 minutes. Everything a
reader acts on is written at once; trainwarden_policy_last_evaluated_timestamp_seconds
is always current. A budget's pod
deleted while the operator is down is charged up to the last status write that saw it, so
this interval is also what such a pod may go uncharged beyond its unobserved time
(docs/budgets.md)."""
INTERRUPTION_SHOWN_AFTER = timedelta(seconds=10)
"""A failed watch listed again within this leaves status alone: a blip would otherwise be
two status writes per policy."""
_CONDITIONS = TypeAdapter(list[Condition])


@dataclass
class LastWrite:
    """Our own last status write. kopf's index may lag behind it; an evaluation must never
    start from a version older than the one it wrote."""

    written: JSON | None = None
    replaced_rv: str | None = None
    written_at: datetime | None = None
    """When the evaluation that made our last write ran: kinds that hold back clock-only
    changes (STATUS_INTERVAL, budgets' own interval) measure from it."""
    status_interval: timedelta = STATUS_INTERVAL
    """How long clock-only changes wait (`trainwarden run --status-interval`), set by the
    controller when it makes the memory."""
    acts_at: datetime | None = None
    """When the policy may next act, as its last evaluation foresaw (a budget's forecast
    crossing, an idle pod's warning or reclaim): from then on its evaluations go ahead
    of routine ones (controllers/queue.py). None: not foreseen."""

    def freshest(self, indexed: JSON) -> JSON:
        if self.written is not None and indexed["metadata"]["resourceVersion"] == self.replaced_rv:
            return self.written
        return indexed


async def write_status(kube: Kube, kind: str, body: JSON, last: LastWrite, status: JSON) -> JSON:
    """Replace what the operator owns of `body`'s status with `status`, conditional on
    the version read (a conflict means re-evaluate): only the changed fields travel, and
    fields that are gone are removed. Returns the written object."""
    meta = body["metadata"]
    changes = merge_patch_diff(body.get("status") or {}, status)
    if not changes:
        return body  # nothing to say: no request, and no watch event for anyone
    patch = {"metadata": {"resourceVersion": meta["resourceVersion"]}, "status": changes}
    written = await kube.merge_patch(
        API_VERSION, kind, None, meta["name"], patch, subresource="status"
    )
    last.replaced_rv = meta["resourceVersion"]
    last.written = written
    return written


async def write_status_when_due(
    kube: Kube, kind: str, body: JSON, last: LastWrite, status: JSON, now: datetime
) -> JSON:
    """write_status, unless only the time of the evaluation moved and our last write is
    younger than its status interval: every evaluation would otherwise be a write (and a watch
    event for every client of the kind). A last write "after" now (the server's clock
    stepped back) is not recent."""
    moved = set(merge_patch_diff(body.get("status") or {}, status))
    since = now - last.written_at if last.written_at is not None else None
    recent = since is not None and timedelta(0) <= since < last.status_interval
    if moved <= {"lastEvaluated"} and recent:
        return body
    written = await write_status(kube, kind, body, last, status)
    last.written_at = now
    return written


def dump_conditions(conditions: Sequence[Condition]) -> list[JSON]:
    return [c.model_dump(mode="json", by_alias=True) for c in conditions]


async def report_invalid(
    kube: Kube,
    body: JSON,
    problems: Sequence[str],
    conditions: Sequence[Condition],
    last: LastWrite,
    now: datetime,
) -> None:
    """An invalid policy does nothing; it says so once in Ready=False and a Warning Event."""
    meta = body["metadata"]
    generation = int(meta.get("generation") or 0)
    update = readiness(problems)
    conds, changed = set_condition(conditions, update, now=now, generation=generation)
    if changed:
        status = {
            **(body.get("status") or {}),
            "conditions": dump_conditions(conds),
            "observedGeneration": generation,
        }
        await write_status(kube, body["kind"], body, last, status)
        await kube.event(
            body, type_="Warning", reason=update.reason, message=update.message, action="Validate"
        )
    metrics.report_policy_ready(body["kind"], meta["name"], ready=False)


async def report_interrupted(
    kube: Kube, body: JSON, interruption: Interruption, last: LastWrite, now: datetime
) -> None:
    """A policy is not evaluated while the cache may be stale; once that has lasted
    INTERRUPTION_SHOWN_AFTER, Ready=False says why (the next evaluation sets it back)."""
    kind, meta = body["kind"], body["metadata"]
    metrics.report_policy_ready(kind, meta["name"], ready=False)
    if now - interruption.since < INTERRUPTION_SHOWN_AFTER:
        return
    status = body.get("status") or {}
    try:
        conditions = _CONDITIONS.validate_python(status.get("conditions") or [])
    except ValidationError:
        return  # the next evaluation rewrites them; nothing else is lost meanwhile
    update = ConditionUpdate(
        C.READY,
        "False",
        C.REASON_CLUSTER_VIEW_INTERRUPTED,
        f"{interruption.describe()}; nothing is evaluated or done until they are listed again",
    )
    generation = int(meta.get("generation") or 0)
    stamp = now.replace(microsecond=0)
    conds, changed = set_condition(conditions, update, now=stamp, generation=generation)
    if changed:
        await write_status(kube, kind, body, last, {**status, "conditions": dump_conditions(conds)})
        log.warning("policy held", object=f"{kind}/{meta['name']}", why=interruption.describe())


def previous_status(
    model: type[StatusT], raw: Mapping[str, Any], fields: Collection[str], obj: str
) -> StatusT:
    """The fields of the stored status an evaluation builds on, each read on its own.

    Everything else in status is recomputed each time; so a field written by an older
    version (or mangled by hand) costs only itself, never the others with it.
    """
    kept: dict[str, Any] = {}
    for name in fields:
        if name not in raw:
            continue
        try:
            model.model_validate({name: raw[name]})
        except ValueError:
            log.warning("unreadable status field ignored", object=obj, field=name)
            continue
        kept[name] = raw[name]
    return model.model_validate(kept)


@dataclass(frozen=True)
class Opened(Generic[SpecT, StatusT]):
    """What every evaluation starts from: the policy's name and generation, the time
    conditions are stamped with, its parsed spec and the status fields it builds on."""

    name: str
    generation: int
    stamp: datetime
    spec: SpecT
    old: StatusT


async def open_policy(
    kube: Kube,
    body: JSON,
    model: tuple[type[SpecT], type[StatusT]],
    kept: Collection[str],
    last: LastWrite,
    now: datetime,
) -> Opened[SpecT, StatusT] | None:
    """The policy read for an evaluation; None when its spec is invalid, which is said
    once (Ready=False and an Event, report_invalid) and then nothing else is done."""
    meta = body["metadata"]
    name, generation = meta["name"], int(meta.get("generation") or 0)
    stamp = now.replace(microsecond=0)
    spec_model, status_model = model
    old = previous_status(status_model, body.get("status") or {}, kept, f"{body['kind']}/{name}")
    spec = parse_spec(spec_model, body.get("spec") or {})
    if isinstance(spec, list):
        await report_invalid(kube, body, spec, old.conditions, last, stamp)  # type: ignore[attr-defined]
        return None
    metrics.report_policy_ready(body["kind"], name, ready=True)
    return Opened(name, generation, stamp, spec, old)
