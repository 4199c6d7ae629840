"""A run's receipt from its facts: the RunReceipt spec, its name, the workload's annotation
and Event message, and which stored receipts the ledger's bounds remove.

Pure: the shell gathers the run (core/runs.py), the measurement and the checkpoint facts.
"""

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from trainwarden.api.v1alpha1.checkpoint import CheckpointPolicySpec
from trainwarden.api.v1alpha1.checkpoint_status import TrainerResult
from trainwarden.api.v1alpha1.receipt import (
    MAX_CHARGES,
    MAX_LABELS,
    MAX_LOSSES,
    AcceleratorHours,
    Charged,
    Checkpoints,
    Experiment,
    FailureWaste,
    Interruptions,
    Loss,
    Pods,
    RunReceiptSpec,
)
from trainwarden.api.v1alpha1.types import ObjectReference, format_duration
from trainwarden.core import ledger, run_storage
from trainwarden.core.efficiency import Measure, Row, row
from trainwarden.core.runs import (
    CheckpointHistory,
    Lost,
    Run,
    interruptions,
    losses,
    stopped,
    totals,
)
from trainwarden.core.scope import selects

LATE = 30.0
"""Seconds after a run's creation within which the operator counts as having watched it
from the start (informers deliver a new object within a second or two)."""


def _at(t: float) -> datetime:
    return datetime.fromtimestamp(t, UTC)


@dataclass(frozen=True)
class Located:
    """What is known of the checkpoint location a run names."""

    checkpoints: Checkpoints
    history: CheckpointHistory | None
    """Its complete checkpoints' times; None when no CheckpointPolicy scans it for the run."""
    why: str = ""
    """Why there is no history (the policy scanning it does not govern the run)."""
    result: TrainerResult | None = None
    """What the trainer's state said, as the policy's newest scan read it."""


def governs(
    policy: CheckpointPolicySpec,
    *,
    where: str,
    s3_url: str | None,
    namespace: str,
    namespace_labels: Mapping[str, str],
) -> str | None:
    """Why the policy scanning the location a run names (`where`; `s3_url` for a prefix)
    does not govern it for a run in `namespace`; None when it does. A policy governs its
    scoped namespaces; an S3 prefix, declared in the cluster-scoped policy, belongs to the
    namespace of the credentials it is scanned with (the team holding the keys: as
    core/locations.py `s3_location` heeds only jobs there)."""
    scope = policy.scope
    refused = f"{where[:200]} is not governed for namespace {namespace}"
    selected = scope.namespace_selector is not None and selects(
        scope.namespace_selector, namespace_labels
    )
    if namespace not in scope.namespaces and not selected:
        return f"{refused}: the CheckpointPolicy scanning it does not govern that namespace"
    if s3_url is None:
        return None
    s3 = policy.storage.s3
    if s3 is None or s3.url != s3_url:
        return f"{refused}: the CheckpointPolicy that listed it no longer scans it"
    if s3.credentials.namespace != namespace:
        return f"{refused}: it belongs to namespace {s3.credentials.namespace}"
    return None


def _stops(run: Run) -> list[float]:
    pods = list(run.pods.values())
    return [stopped(pods, e) for e in interruptions(pods, run.suspensions)]


def awaits_scan(run: Run, located: Located | None) -> bool:
    """Whether a scan of the run's checkpoint location after its last interruption came
    to rest, or after it finished, is still to come: until then a checkpoint written just
    before it is unseen (and the trainer's final result with it)."""
    if located is None or located.history is None:
        return False
    stops = _stops(run) + ([run.finished_at] if run.finished_at is not None else [])
    as_of = located.history.as_of
    return bool(stops) and (as_of is None or as_of < max(stops))


def _waste(run: Run, located: Located | None) -> FailureWaste | None:
    if run.checkpoint_path is None:
        return None
    pods = list(run.pods.values())
    events = interruptions(pods, run.suspensions)
    if located is None or located.history is None:
        why = (located.why if located else "") or (
            f"no CheckpointPolicy scans {run.checkpoint_path[:200]}"
        )
        return FailureWaste(
            note=f"{why[:400]}: {len(events)} failure(s) or suspension(s) not estimated"
        )
    history = located.history
    lost = losses(pods, events, history)
    known = [x for x in lost if x.seconds is not None]
    listed = sorted(known, key=lambda x: -x.hours)[:MAX_LOSSES]
    return FailureWaste(
        accelerator_hours=_r(sum(x.hours for x in known)) if known or not lost else None,
        losses=[
            Loss(
                at=_at(x.at),
                reason=x.reason,
                seconds=round(x.seconds or 0.0, 3),
                accelerators=x.accelerators,
                accelerator_hours=_r(x.hours),
                upper_bound=x.upper_bound,
            )
            for x in sorted(listed, key=lambda x: x.at)
        ],
        note=_waste_note(lost, history)[:512],
    )


def _waste_note(lost: Sequence[Lost], history: CheckpointHistory) -> str:
    notes = []
    older = sum(1 for x in lost if x.seconds is None)
    if older and history.horizon is not None:
        since = _at(history.horizon).isoformat()
        notes.append(
            f"{older} older than the checkpoint history kept (from {since}): not estimated"
        )
    unseen = sum(1 for x in lost if x.upper_bound and x.seconds is not None)
    if unseen:
        scanned = "never" if history.as_of is None else _at(history.as_of).isoformat()
        notes.append(
            f"{unseen} at most: no scan of the location since (last {scanned}), so a "
            "checkpoint written after it is not counted"
        )
    if lost and not history.complete:
        notes.append("no complete checkpoint seen: each loss counts from the work's start")
    return "; ".join(notes)


def _partial(run: Run, start: float) -> bool:
    return run.dropped > 0 or run.observed_from > min(start, run.created) + LATE


def spec(
    run: Run,
    *,
    closed: float,
    measure: Measure | None,
    measurement: str,
    located: Located | None,
    claims: run_storage.Claims = run_storage.UNKNOWN,
) -> RunReceiptSpec:
    """The receipt of `run`, closed at `closed` (pods still open count as ending then).
    `measure`: what Prometheus measured of its pods (None: nothing, `measurement` says why);
    `claims`: the cache's records of the claims of its namespace."""
    pods = list(run.pods.values())
    t = totals(pods, closed)
    start = min((p.start for p in pods), default=run.created)
    ends = [p.end for p in pods if p.end is not None]
    finished = closed if run.finished_at is None else min(closed, max([run.finished_at, *ends]))
    m = measure or Measure()
    r = row(t.held, m.measured, m.used)
    costs = sorted(t.costs.items(), key=lambda kv: (-kv[1], kv[0]))[:MAX_CHARGES]
    return RunReceiptSpec(
        workload=ObjectReference(
            api_version=run.api_version,
            kind=run.kind,
            namespace=run.namespace,
            name=run.name,
            uid=run.uid,
        ),
        outcome=run.result or "Deleted",
        started_at=_at(start),
        finished_at=_at(max(start, finished)),
        wall_seconds=max(0.0, finished - start),
        wall_time=format_duration(timedelta(seconds=round(max(0.0, finished - start)))),
        accelerator_hours=_accelerator_hours(r),
        measurement=measurement[:512],
        cost=_r(max((c for _, c in costs), default=0.0)),
        charges=[Charged(budget=b, cost=_r(c)) for b, c in costs],
        labels=dict(sorted(run.labels.items())[:MAX_LABELS]),
        pods=Pods(
            started=t.started,
            failed=t.failed,
            restarts=t.restarts,
            failed_accelerator_hours=_r(t.failed_hours),
        ),
        interruptions=Interruptions(
            suspensions=len(run.suspensions),
            budget_suspensions=run.budget_suspensions,
            idle_reclaims=run.idle_reclaims,
        ),
        checkpoints=located.checkpoints if located is not None else None,
        storage=run_storage.held(run.claims, claims, start=start, end=max(start, finished)),
        failure_waste=_waste(run, located),
        experiment=experiment(run.declared),
        result=located.result if located is not None else None,
        partial=_partial(run, start),
        observed_from=_at(run.observed_from),
    )


def _accelerator_hours(r: Row) -> AcceleratorHours:
    """A receipt's accelerator-hours from the run's row (rounded as every figure is)."""
    return AcceleratorHours(
        held=_r(r.held),
        used=_r(r.used),
        idle=_r(r.idle),
        unknown=_r(r.unknown),
        effective_percent=_percent(r),
    )


def experiment(annotations: Mapping[str, str]) -> Experiment | None:
    """What the run declared it is (core/ledger.py); None when it declared nothing."""
    found = ledger.declared(annotations)
    if found.empty and not found.dropped:
        return None
    return Experiment(
        params=found.params,
        data_version=found.data_version,
        code_version=found.code_version,
        config_hash=found.config_hash,
        config_hash_source=found.hash_source,
        dropped=list(found.dropped),
    )


def _percent(r: Row) -> float | None:
    """Used over held; none when nothing was measured (0 % would read as all idle)."""
    if r.effective is None or r.unknown >= r.held:
        return None
    return round(100 * r.effective, 2)


def _r(value: float) -> float:
    """Six decimals: a microhour is 3.6 ms of one accelerator; float noise is not data."""
    return round(max(0.0, value), 6)


def _hours(value: float) -> str:
    """One decimal, or two significant digits below 0.1 (a short run is not "0.0")."""
    if value >= 0.1 or value == 0:
        return f"{value:.1f}"
    return f"{value:.2g}" if value >= 0.001 else "<0.001"


def message(s: RunReceiptSpec) -> str:
    """The Event: one line a person reads in `kubectl describe`."""
    a = s.accelerator_hours
    parts = [f"Run finished {s.outcome} in {s.wall_time}: {_hours(a.held)} accelerator-hours held"]
    if a.held > a.unknown:
        effective = f" ({a.effective_percent:.0f}%)" if a.effective_percent is not None else ""
        parts.append(f"{_hours(a.used)} used{effective}, {_hours(a.idle)} idle")
    parts.append(f"{_hours(a.unknown)} unknown")
    text = ", ".join(parts)
    if s.charges:
        budgets = ", ".join(c.budget for c in s.charges[:3])
        text += f"; {s.cost:.2f} on budget {budgets}"
    text += _storage_text(s)
    if s.pods.failed:
        burned = _hours(s.pods.failed_accelerator_hours)
        text += f"; {s.pods.failed} failed pod(s) burned {burned} accelerator-hours"
    waste = s.failure_waste
    if waste is not None and waste.accelerator_hours:
        bound = "at most " if any(x.upper_bound for x in waste.losses) else ""
        text += f"; {bound}{_hours(waste.accelerator_hours)} lost since the last checkpoint"
    elif waste is not None and waste.losses and waste.accelerator_hours == 0:
        text += f"; {len(waste.losses)} interruption(s), no work lost (checkpointed)"
    if s.result is not None:
        best = f", best {s.result.best:.4g}" if s.result.best is not None else ""
        text += f"; {s.result.metric[:64]} {s.result.final:.4g}{best}"
    return text + (" (partial: the operator did not see the whole run)" if s.partial else "")


def _storage_text(s: RunReceiptSpec) -> str:
    held = s.storage
    if held is None:
        return ""
    unknown = f", {held.unknown_claims} unknown" if held.unknown_claims else ""
    if held.gib_hours is None:
        return f"; storage unknown ({held.unknown_claims} claim(s))"
    return f"; {held.gib_hours:.4g} GiB-hours of storage ({held.claims} claim(s){unknown})"


def annotation(name: str, s: RunReceiptSpec) -> str:
    """The workload's `trainwarden.dev/receipt`: compact JSON, a few hundred bytes."""
    a = s.accelerator_hours
    value: dict[str, object] = {
        "receipt": name,
        "outcome": s.outcome,
        "wall": s.wall_time,
        "held": round(a.held, 3),
        "used": round(a.used, 3),
        "idle": round(a.idle, 3),
        "unknown": round(a.unknown, 3),
        "cost": round(s.cost, 2),
        "failedPods": s.pods.failed,
        "restarts": s.pods.restarts,
    }
    if s.storage is not None and s.storage.gib_hours is not None:
        value["storageGiBHours"] = round(s.storage.gib_hours, 4)
    if s.failure_waste is not None and s.failure_waste.accelerator_hours is not None:
        value["lost"] = round(s.failure_waste.accelerator_hours, 3)
    if s.partial:
        value["partial"] = True
    return json.dumps(value, separators=(",", ":"))


def attribution(keys: Sequence[str], pod_labels: Mapping[str, str]) -> dict[str, str]:
    """The run's attribution labels: the budgets' keys that its pod carries."""
    return {k: pod_labels[k] for k in keys if pod_labels.get(k)}
