"""Condition types and reasons written by trainwarden, in one documented place."""

from typing import Final

READY: Final = "Ready"
"""Ready is True when the spec is valid and the policy is being evaluated."""
WARNING: Final = "Warning"
"""Warning is True when a budget crossed its warn threshold."""
EXHAUSTED: Final = "Exhausted"
"""Exhausted is True when a budget crossed its enforce threshold."""

REASON_ACCEPTED: Final = "Accepted"
"""The spec parsed and passed every check; the policy is active."""
REASON_INVALID_SPEC: Final = "InvalidSpec"
"""The spec failed a check the schema could not express; the policy does nothing."""
