"""Whether a policy is active: the Ready condition as a function of its spec problems."""

from collections.abc import Sequence

from trainwarden.api.v1alpha1.conditions import READY, REASON_ACCEPTED, REASON_INVALID_SPEC
from trainwarden.core.conditions import ConditionUpdate


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
