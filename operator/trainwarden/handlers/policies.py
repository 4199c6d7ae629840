"""Watch the three policy kinds and keep their Ready condition true to their spec.

A stateless event handler (not create/update handlers) so that kopf stores no progress
annotations on the user's objects and adds no finalizer that could block their deletion.
"""

import time
from datetime import UTC, datetime
from typing import Any

import kopf
from pydantic import ValidationError

from trainwarden import metrics
from trainwarden.api.v1alpha1 import GROUP, VERSION
from trainwarden.api.v1alpha1.crd import KINDS, Kind
from trainwarden.api.v1alpha1.types import Condition
from trainwarden.api.v1alpha1.validation import parse_spec
from trainwarden.core.conditions import set_condition
from trainwarden.core.readiness import readiness
from trainwarden.logs import get

log = get(__name__)


def _conditions(status: kopf.Status) -> list[Condition]:
    """Conditions as stored; an entry someone mangled is dropped and rewritten, not fatal."""
    parsed = []
    for raw in status.get("conditions") or []:
        try:
            parsed.append(Condition.model_validate(raw))
        except ValidationError:
            continue
    return parsed


def observe(kind: Kind, event_type: str | None, body: kopf.Body, patch: kopf.Patch) -> None:
    """Recompute Ready from the spec and write it only if it changed."""
    name = body.metadata.name or ""
    if event_type == "DELETED":
        metrics.forget_policy(kind.name, name)
        return
    started = time.monotonic()
    parsed = parse_spec(kind.spec_model, dict(body.spec))
    problems = parsed if isinstance(parsed, list) else []
    update = readiness(problems)
    generation = int(body.metadata.get("generation") or 0)
    now = datetime.now(UTC).replace(microsecond=0)
    conditions, changed = set_condition(
        _conditions(body.status), update, now=now, generation=generation
    )
    metrics.report_policy_ready(kind.name, name, ready=not problems)
    if changed:
        patch.status["conditions"] = [c.model_dump(mode="json", by_alias=True) for c in conditions]
        patch.status["observedGeneration"] = generation
        log.info(
            "policy readiness changed",
            object=f"{kind.name}/{name}",
            ready=update.status,
            reason=update.reason,
            message=update.message,
        )
        if problems:
            kopf.warn(body, reason=update.reason, message=update.message)
    metrics.report_reconcile(kind.name, time.monotonic() - started, failed=False)


def register(registry: kopf.OperatorRegistry) -> None:
    """Readiness for the kinds without a controller yet; controllers report their own."""
    for kind in KINDS:
        if kind.name in ("TrainingBudget", "IdleReclaimPolicy"):
            continue

        def handler(
            type: str | None,  # noqa: A002 - kopf's keyword
            body: kopf.Body,
            patch: kopf.Patch,
            _kind: Kind = kind,
            **_: Any,
        ) -> None:
            observe(_kind, type, body, patch)

        kopf.on.event(GROUP, VERSION, kind.plural, registry=registry, id=f"observe-{kind.plural}")(
            handler
        )
