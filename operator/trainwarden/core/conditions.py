"""Kubernetes-style condition bookkeeping, as a pure function of the old list and `now`;
and the one condition every policy has, Ready, as a function of its spec problems."""

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from trainwarden.api.v1alpha1.conditions import READY, REASON_ACCEPTED, REASON_INVALID_SPEC
from trainwarden.api.v1alpha1.types import Condition, ConditionStatus

MAX_MESSAGE = 32768


@dataclass(frozen=True)
class ConditionUpdate:
    """The desired state of one condition; the setter works out timestamps."""

    type: str
    status: ConditionStatus
    reason: str
    message: str = ""


def set_condition(
    conditions: Sequence[Condition],
    update: ConditionUpdate,
    *,
    now: datetime,
    generation: int,
) -> tuple[list[Condition], bool]:
    """Return the new condition list and whether anything changed.

    lastTransitionTime moves only when the status flips, so a condition's age says how long
    the state has held, and rewriting an unchanged condition causes no status write.
    """
    message = update.message[:MAX_MESSAGE]
    old = next((c for c in conditions if c.type == update.type), None)
    transition = now if old is None or old.status != update.status else old.last_transition_time
    new = Condition(
        type=update.type,
        status=update.status,
        reason=update.reason,
        message=message,
        last_transition_time=transition,
        observed_generation=generation,
    )
    if new == old:
        return list(conditions), False
    others = [c for c in conditions if c.type != update.type]
    return sorted([*others, new], key=lambda c: c.type), True


def readiness(problems: Sequence[str]) -> ConditionUpdate:
    """Ready=True with no problems; otherwise Ready=False naming every problem.

    An invalid policy does nothing at all: acting on the half that parsed could widen or
    narrow its scope in ways its author never wrote.
    """
    if problems:
        return ConditionUpdate(
            READY,
            "False",
            REASON_INVALID_SPEC,
            "the policy does nothing until its spec is fixed: " + "; ".join(problems),
        )
    return ConditionUpdate(READY, "True", REASON_ACCEPTED, "spec is valid; the policy is active")
