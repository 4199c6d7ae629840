"""An IdleReclaimPolicy's status: who is idle, suspected, unknown or exempt and why, what
was reclaimed, idle accelerator-hours by namespace; bounded (200 entries per list)."""

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from trainwarden import metrics
from trainwarden.api.v1alpha1.idle import (
    MAX_LISTED,
    Acknowledgement,
    IdleNode,
    IdlePod,
    IdleReclaimPolicySpec,
    IdleReclaimPolicyStatus,
)
from trainwarden.api.v1alpha1.rightsizing import OverProvisioned
from trainwarden.api.v1alpha1.types import Condition
from trainwarden.controllers.status import RESYNC
from trainwarden.core import reclaim
from trainwarden.core.idleness import IdleState
from trainwarden.idle import actions as acts
from trainwarden.idle.actions import Result, Watched

LISTED_STATES = ("IdleSuspected", "Warned", "Unknown", "Exempt")


def rules(spec: IdleReclaimPolicySpec) -> reclaim.Rules:
    s = spec.signal
    return reclaim.Rules(s.threshold, s.window, s.warmup, spec.grace_period, s.resolution)


def _message(
    spec: IdleReclaimPolicySpec, verdict: reclaim.Verdict, unknown: str, kept: str | None
) -> str:
    state, judged = verdict.state, rules(spec)
    if state.state == "Exempt":
        return verdict.exemption or "exempt"
    if state.state == "Unknown":
        return unknown
    if state.state == "IdleSuspected":
        idle_at = state.since + judged.window
        return (
            f"below {judged.threshold:g}% since {acts.stamp(state.since)}; "
            f"idle at {acts.stamp(idle_at)} if it stays so"
        )
    assert state.warned_at is not None
    if kept is not None:
        return f"{verdict.cause or 'idle'}; warned at {acts.stamp(state.warned_at)}; {kept}"
    at = state.warned_at + judged.grace
    return (
        f"{verdict.cause or 'idle'}; warned at {acts.stamp(state.warned_at)}; "
        f"{spec.action} at {acts.stamp(at)} unless it recovers"
    )


def _listed(
    spec: IdleReclaimPolicySpec,
    judged: list[tuple[Watched, reclaim.Verdict]],
    states: dict[str, IdleState],
    unknown: str,
    kept: dict[str, str],
) -> list[IdlePod]:
    listed = [
        IdlePod(
            namespace=w.view.namespace,
            name=w.view.name,
            state=states[w.view.uid].state,
            since=states[w.view.uid].since,
            accelerators=w.view.accelerators,
            message=_message(spec, verdict, unknown, kept.get(w.view.uid))[:1024],
        )
        for w, verdict in judged
        if states[w.view.uid].state in LISTED_STATES
    ]
    return sorted(listed, key=lambda p: (p.since, p.namespace, p.name))[:MAX_LISTED]


def _wasted(
    old: IdleReclaimPolicyStatus,
    judged: list[tuple[Watched, reclaim.Verdict]],
    states: dict[str, IdleState],
    now: datetime,
    name: str,
) -> dict[str, float]:
    """Idle accelerator-hours by namespace since the policy was created."""
    wasted = dict(old.idle_accelerator_hours)
    for w, _ in judged:
        hours = reclaim.idle_hours(
            w.view.accelerators, states[w.view.uid], old.last_evaluated, now, 2 * RESYNC
        )
        if hours:
            wasted[w.view.namespace] = round(wasted.get(w.view.namespace, 0.0) + hours, 6)
            metrics.report_idle_hours(name, w.view.namespace, hours)
    return wasted


@dataclass(frozen=True)
class IdleOutcome:
    """Everything one evaluation decided and did, for status."""

    conditions: list[Condition]
    judged: list[tuple[Watched, reclaim.Verdict]]
    states: dict[str, IdleState]
    unknown: str
    result: Result
    nodes: list[IdleNode]
    over_provisioned: list[OverProvisioned] = field(default_factory=list)


def build(
    spec: IdleReclaimPolicySpec,
    old: IdleReclaimPolicyStatus,
    o: IdleOutcome,
    acknowledged: dict[str, tuple[str, datetime]],
    generation: int,
    now: datetime,
    name: str,
) -> IdleReclaimPolicyStatus:
    counts = {s: sum(1 for st in o.states.values() if st.state == s) for s in LISTED_STATES}
    done = len(o.result.reclaimed_hours)
    recent = [t for t in [*old.recent_actions, *[now] * done] if t > now - timedelta(minutes=1)]
    ordered = sorted(acknowledged.items(), key=lambda kv: kv[1][1])
    watched = {"Watched": len(o.judged), **counts, "KeptWarm": len(o.result.kept)}
    metrics.report_idle(name, watched, len(o.nodes))
    return IdleReclaimPolicyStatus(
        observed_generation=generation,
        conditions=o.conditions,
        pods_watched=len(o.judged),
        pods_idle=counts["IdleSuspected"] + counts["Warned"],
        pods_unknown=counts["Unknown"],
        pods_exempt=counts["Exempt"],
        idle_pods=_listed(spec, o.judged, o.states, o.unknown, o.result.kept),
        idle_nodes=o.nodes[:MAX_LISTED],
        pending_actions=o.result.pending[:MAX_LISTED],
        recent_actions=recent[-1000:],
        actions_taken=old.actions_taken + done,
        accelerator_hours_reclaimed=round(
            old.accelerator_hours_reclaimed + sum(o.result.reclaimed_hours), 6
        ),
        idle_accelerator_hours=_wasted(old, o.judged, o.states, now, name),
        acknowledgements=[
            Acknowledgement(uid=uid, value=value[:64], first_seen=seen)
            for uid, (value, seen) in ordered[-MAX_LISTED:]
        ],
        over_provisioned=o.over_provisioned,
        last_evaluated=now,
    )
