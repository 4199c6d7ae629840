"""Building blocks shared by the three policy kinds: durations, selectors, scope, conditions.

Every model here is the single source of truth for both the operator (which parses
objects with it) and the CRD schema (generated from it), so a rule written once is
enforced by the API server and by the operator alike.
"""

import re
from datetime import UTC, datetime, timedelta
from typing import Annotated, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    WithJsonSchema,
    model_validator,
)
from pydantic.alias_generators import to_camel

GROUP = "trainwarden.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
MANAGED_BY = "app.kubernetes.io/managed-by"
"""The Kubernetes recommended label, value `trainwarden`, on what the operator creates
(RunReceipts, BudgetUsages, pruner Jobs): it narrows lists only; ownership is proven
otherwise (a seal, an ownerReference uid, a recorded uid)."""


def cel(*rules: tuple[str, str]) -> ConfigDict:
    """Model config carrying CEL rules (rule, message) that the API server enforces."""
    return ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [{"rule": r, "message": m} for r, m in rules]
        }
    )


class APIModel(BaseModel):
    """Base of every API type: camelCase on the wire, attribute docstrings become field docs."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        use_attribute_docstrings=True,
        extra="forbid",
        frozen=True,
    )


# A Go-style duration made of one or more <integer><unit> parts, with at least one
# non-zero part: an unparsable or zero duration must never silently mean "now".
# RE2-compatible (no look-ahead) because the API server evaluates it too.
_PART = r"[0-9]+(ms|s|m|h|d)"
DURATION_PATTERN = rf"^({_PART})*[0-9]*[1-9][0-9]*(ms|s|m|h|d)({_PART})*$"
ZERO_OK_DURATION_PATTERN = rf"^({_PART})+$"
_UNITS = {
    "ms": timedelta(milliseconds=1),
    "s": timedelta(seconds=1),
    "m": timedelta(minutes=1),
    "h": timedelta(hours=1),
    "d": timedelta(days=1),
}
_PART_RE = re.compile(r"([0-9]+)(ms|s|m|h|d)")
DURATION_MAX_LENGTH = 32
"""Characters of a duration ("9999d23h59m59s999ms" needs 19): the API server refuses a
longer one, so no spelling can carry a number too large to compute with."""
MAX_DURATION = timedelta(days=36_500)
"""A hundred years: any longer duration added to a date overflows long before it means
anything (Python's dates end in 9999), so it is an invalid spec, not an OverflowError."""


def parse_duration(value: object, *, allow_zero: bool = False) -> timedelta:
    """Parse "90s", "1h30m", "7d" into a positive timedelta; anything else is an error.

    Zero ("0s") is accepted only where a field says so explicitly, never by accident.
    """
    pattern = ZERO_OK_DURATION_PATTERN if allow_zero else DURATION_PATTERN
    if isinstance(value, str) and len(value) > DURATION_MAX_LENGTH:
        raise ValueError(f"duration {value[:40]!r}... is over {DURATION_MAX_LENGTH} characters")
    if isinstance(value, timedelta):
        parsed = value
    elif isinstance(value, str) and re.fullmatch(pattern, value):
        try:
            parsed = sum(
                (int(n) * _UNITS[unit] for n, unit in _PART_RE.findall(value)), timedelta()
            )
        except OverflowError:
            raise ValueError(f"duration {value!r} is longer than {MAX_DURATION.days}d") from None
    else:
        raise ValueError(
            f"invalid duration {value!r}: use a number and a unit (ms, s, m, h, d), "
            'for example "30m", "1h30m" or "7d"'
        )
    if parsed < timedelta() or (parsed == timedelta() and not allow_zero):
        raise ValueError(f"duration {value!r} must be greater than zero")
    if parsed > MAX_DURATION:
        raise ValueError(f"duration {value!r} is longer than {MAX_DURATION.days}d")
    return parsed


def format_duration(value: timedelta) -> str:
    """The shortest canonical spelling, so a round trip through the API is stable."""
    total_ms = value // timedelta(milliseconds=1)
    parts = []
    for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000)):
        count, total_ms = divmod(total_ms, size)
        if count:
            parts.append(f"{count}{unit}")
    if total_ms:
        parts.append(f"{total_ms}ms")
    return "".join(parts) or "0s"


Duration = Annotated[
    timedelta,
    BeforeValidator(parse_duration),
    PlainSerializer(format_duration, return_type=str),
    WithJsonSchema(
        {
            "type": "string",
            "pattern": DURATION_PATTERN,
            "maxLength": DURATION_MAX_LENGTH,
            "description": 'A duration such as "30m", "1h30m" or "7d" (at most 36500d).',
        }
    ),
]

DurationOrZero = Annotated[
    timedelta,
    BeforeValidator(lambda v: parse_duration(v, allow_zero=True)),
    PlainSerializer(format_duration, return_type=str),
    WithJsonSchema(
        {
            "type": "string",
            "pattern": ZERO_OK_DURATION_PATTERN,
            "maxLength": DURATION_MAX_LENGTH,
            "description": 'A duration such as "0s", "30m" or "1h30m" (at most 36500d).',
        }
    ),
]


def time_zone(name: str) -> ZoneInfo:
    """The IANA time zone `name` names; ValueError for anything else.

    Every field holding a zone is checked with this, and the code computes with it: what
    ZoneInfo refuses is not only KeyError (ZoneInfoNotFoundError) and ValueError but any
    OSError, e.g. IsADirectoryError for a directory of the database such as "Europe".
    """
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise ValueError(
            f'unknown time zone {name[:80]!r}: use an IANA name such as "UTC" or "Europe/Paris"'
        ) from None


EARLIEST = datetime(1900, 1, 1, tzinfo=UTC)
LATEST = datetime(9000, 1, 1, tzinfo=UTC)
"""The times a status may hold: any date-time the schema admits (0001 to 9999, in any
offset) is not one the code can compute with. 9999-12-31T23:59:59-14:00 is the year 10000
in UTC (fromtimestamp raises); a last run in 9990 plus an interval overflows."""


def _in_range(value: datetime) -> datetime:
    if value.tzinfo is None:
        raise ValueError(f"time {value.isoformat()} has no offset (RFC 3339 needs one)")
    if not EARLIEST <= value < LATEST:
        raise ValueError(f"time {value.isoformat()} is not between 1900 and 9000")
    return value


Time = Annotated[datetime, AfterValidator(_in_range)]
"""A date-time of a policy's status: with an offset, between EARLIEST and LATEST."""

Mode = Literal["Enforce", "DryRun"]
"""Enforce acts; DryRun reports exactly what Enforce would do and changes nothing."""

Percent = Annotated[float, Field(ge=0, le=100)]

# Label keys and values as Kubernetes validates them (a prefix/name key, a value of at
# most 63 characters): a typo here is caught by the API server, not by a silent non-match.
LabelKey = Annotated[
    str,
    Field(
        min_length=1,
        max_length=317,
        pattern=r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
        r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$",
    ),
]
LabelValue = Annotated[
    str,
    Field(max_length=63, pattern=r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$"),
]
NamespaceName = Annotated[
    str,
    Field(min_length=1, max_length=63, pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"),
]
ResourceName = Annotated[
    str,
    Field(
        min_length=1,
        max_length=253,
        pattern=r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
        r"[a-z0-9]([-a-z0-9_.]*[a-z0-9])?$",
        examples=["nvidia.com/gpu"],
    ),
]

DEFAULT_ACCELERATORS: tuple[str, ...] = ("nvidia.com/gpu", "amd.com/gpu")


class LabelSelectorRequirement(APIModel):
    """One expression of a label selector, as in Kubernetes' own LabelSelector."""

    key: LabelKey
    """key is the label key the selector applies to."""
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"]
    """operator relates the key to the values."""
    values: list[LabelValue] = Field(default_factory=list, max_length=64)
    """values must be non-empty for In and NotIn and empty for Exists and DoesNotExist."""

    model_config = cel(
        (
            "self.operator in ['In', 'NotIn'] ? size(self.values) > 0 : size(self.values) == 0",
            "values must be set for In/NotIn and empty for Exists/DoesNotExist",
        )
    )

    @model_validator(mode="after")
    def _values_fit_operator(self) -> "LabelSelectorRequirement":
        """The CEL rule above, where no API server checked it (a file, an older server)."""
        if (self.operator in ("In", "NotIn")) != bool(self.values):
            raise ValueError("values must be set for In/NotIn and empty for Exists/DoesNotExist")
        return self


class LabelSelector(APIModel):
    """A Kubernetes label selector that must name at least one label.

    An empty selector matches everything in Kubernetes; here it is rejected, because a
    policy whose scope silently widens to every workload is the worst possible mistake.
    """

    match_labels: dict[str, LabelValue] = Field(default_factory=dict)
    """matchLabels selects objects carrying every one of these labels."""
    match_expressions: list[LabelSelectorRequirement] = Field(default_factory=list, max_length=32)
    """matchExpressions are requirements that must all hold."""

    @model_validator(mode="after")
    def _not_empty(self) -> "LabelSelector":
        if not self.match_labels and not self.match_expressions:
            raise ValueError("an empty selector would match everything: name at least one label")
        return self

    model_config = cel(
        (
            "(has(self.matchLabels) && size(self.matchLabels) > 0) || "
            "(has(self.matchExpressions) && size(self.matchExpressions) > 0)",
            "an empty selector would match everything: name at least "
            "one label in matchLabels or matchExpressions",
        )
    )


class Scope(APIModel):
    """Which workloads a policy governs: namespaces first, then workload labels.

    At least one of namespaces or namespaceSelector is required; there is no implicit
    "every namespace".
    """

    namespaces: list[NamespaceName] = Field(default_factory=list, max_length=256)
    """namespaces lists namespaces governed by name."""
    namespace_selector: LabelSelector | None = None
    """namespaceSelector governs namespaces whose labels match (in addition to namespaces)."""
    selector: LabelSelector | None = None
    """selector narrows the governed workloads (pods and their owners) by label."""

    @model_validator(mode="after")
    def _not_empty(self) -> "Scope":
        if not self.namespaces and self.namespace_selector is None:
            raise ValueError("scope must name namespaces or a namespaceSelector")
        return self

    model_config = cel(
        (
            "(has(self.namespaces) && size(self.namespaces) > 0) || has(self.namespaceSelector)",
            "scope must name namespaces or a namespaceSelector; an empty "
            "scope never means every namespace",
        )
    )


ConditionStatus = Literal["True", "False", "Unknown"]


class Condition(APIModel):
    """A condition in the Kubernetes convention (metav1.Condition)."""

    type: str = Field(max_length=316)
    """type of the condition, in CamelCase, for example Ready."""
    status: ConditionStatus
    """status is True, False or Unknown."""
    reason: str = Field(max_length=1024)
    """reason is a CamelCase machine-readable word for the last transition."""
    message: str = Field(default="", max_length=32768)
    """message is a human-readable explanation of the last transition."""
    last_transition_time: Time
    """lastTransitionTime is when the status last changed."""
    observed_generation: int = Field(default=0, ge=0)
    """observedGeneration is the .metadata.generation the condition was computed from."""


class ObjectReference(APIModel):
    """A reference to a namespaced workload the operator acted on."""

    api_version: str
    """apiVersion of the object."""
    kind: str
    """kind of the object."""
    namespace: str
    """namespace of the object."""
    name: str
    """name of the object."""
    uid: str = ""
    """uid of the object at the time of the action."""
