"""Generate CustomResourceDefinitions from the pydantic models: one source of truth.

Pydantic emits JSON Schema (2020-12) with $refs, nullable unions and titles; the API server
wants a *structural* OpenAPI v3 schema: everything inlined, a type on every node, no
`additionalProperties: false` beside `properties`. `structural()` does that translation
and refuses anything it cannot translate faithfully rather than dropping a rule.
"""

import re
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from trainwarden.api.v1alpha1.budget import TrainingBudget
from trainwarden.api.v1alpha1.checkpoint import CheckpointPolicy
from trainwarden.api.v1alpha1.idle import IdleReclaimPolicy
from trainwarden.api.v1alpha1.receipt import RunReceipt
from trainwarden.api.v1alpha1.types import GROUP, VERSION
from trainwarden.api.v1alpha1.usage import BudgetUsage
from trainwarden.api.v1alpha1.volumes import VolumeReclaimPolicy

JSON = dict[str, Any]

_DROPPED = {"title", "examples", "$defs"}
_KEPT = {
    "type",
    "description",
    "properties",
    "required",
    "items",
    "additionalProperties",
    "enum",
    "default",
    "format",
    "pattern",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "minLength",
    "maxLength",
    "minItems",
    "maxItems",
    "uniqueItems",
    "maxProperties",
    "nullable",
    "x-kubernetes-validations",
    "x-kubernetes-preserve-unknown-fields",
}


@dataclass(frozen=True)
class Kind:
    """Everything about one kind that is not in its model: names and printer columns."""

    model: type[BaseModel]
    plural: str
    short_names: tuple[str, ...]
    columns: tuple[JSON, ...] = field(default=())
    namespaced: bool = False
    status: bool = True
    """Whether it has a status subresource (a record written once has none)."""

    @property
    def name(self) -> str:
        return self.model.__name__

    @property
    def crd_name(self) -> str:
        return f"{self.plural}.{GROUP}"

    @property
    def spec_model(self) -> type[BaseModel]:
        annotation = self.model.model_fields["spec"].annotation
        assert isinstance(annotation, type)
        assert issubclass(annotation, BaseModel)
        return annotation


def _float(name: str, path: str, description: str, *, wide: bool = False) -> JSON:
    """A number column (`wide`: shown by `kubectl get -o wide` only)."""
    column: JSON = {"name": name, "type": "number", "format": "float"}
    return (
        column | ({"priority": 1} if wide else {}) | {"description": description, "jsonPath": path}
    )


def _condition_column(condition: str) -> JSON:
    return {
        "name": condition,
        "type": "string",
        "jsonPath": f".status.conditions[?(@.type=='{condition}')].status",
    }


_MODE = {"name": "Mode", "type": "string", "jsonPath": ".spec.mode"}
_AGE = {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}

KINDS: tuple[Kind, ...] = (
    Kind(
        TrainingBudget,
        plural="trainingbudgets",
        short_names=("tb",),
        columns=(
            _MODE,
            {"name": "Period", "type": "string", "jsonPath": ".spec.period.type"},
            _float(
                "Used %",
                ".status.percent",
                "Percent of the most constrained limit used this period.",
            ),
            _condition_column("Ready"),
            _condition_column("Exhausted"),
            _AGE,
            _float(
                "Accelerator-h",
                ".status.used.acceleratorHours",
                "Accelerator-hours used this period (kubectl get -o wide).",
                wide=True,
            ),
            _float(
                "Limit",
                ".spec.limits.acceleratorHours",
                "The accelerator-hour limit, when the budget sets one.",
                wide=True,
            ),
            {
                "name": "Resets",
                "type": "date",
                "priority": 1,
                "description": "When the period ends (none for Rolling and Total).",
                "jsonPath": ".status.periodEnd",
            },
            {
                "name": "Held",
                "type": "integer",
                "priority": 1,
                "description": "New workloads held until the budget has room again.",
                "jsonPath": ".status.admission.held",
            },
        ),
    ),
    Kind(
        IdleReclaimPolicy,
        plural="idlereclaimpolicies",
        short_names=("irp",),
        columns=(
            _MODE,
            {"name": "Action", "type": "string", "jsonPath": ".spec.action"},
            {"name": "Watched", "type": "integer", "jsonPath": ".status.podsWatched"},
            {"name": "Idle", "type": "integer", "jsonPath": ".status.podsIdle"},
            {"name": "Unknown", "type": "integer", "jsonPath": ".status.podsUnknown"},
            {"name": "Reclaimed", "type": "integer", "jsonPath": ".status.actionsTaken"},
            _condition_column("Ready"),
            _condition_column("MetricsAvailable"),
            _AGE,
        ),
    ),
    Kind(
        CheckpointPolicy,
        plural="checkpointpolicies",
        short_names=("cpp",),
        columns=(
            _MODE,
            {"name": "Layout", "type": "string", "jsonPath": ".spec.layout.type"},
            {"name": "Deleted", "type": "integer", "jsonPath": ".status.deleted"},
            {"name": "Freed", "type": "integer", "jsonPath": ".status.bytesFreed"},
            {"name": "Last Run", "type": "date", "jsonPath": ".status.lastRun"},
            _condition_column("Ready"),
            _condition_column("Pruning"),
            _AGE,
        ),
    ),
    Kind(
        VolumeReclaimPolicy,
        plural="volumereclaimpolicies",
        short_names=("vrp",),
        columns=(
            _MODE,
            {"name": "Unmounted For", "type": "string", "jsonPath": ".spec.unmountedFor"},
            {"name": "Watched", "type": "integer", "jsonPath": ".status.claimsWatched"},
            {"name": "Deleted", "type": "integer", "jsonPath": ".status.claimsDeleted"},
            _condition_column("Ready"),
            _condition_column("Tracking"),
            _AGE,
        ),
    ),
)


RUN_RECEIPT = Kind(
    RunReceipt,
    plural="runreceipts",
    short_names=("rcpt",),
    namespaced=True,
    status=False,
    columns=(
        {"name": "Kind", "type": "string", "jsonPath": ".spec.workload.kind"},
        {"name": "Workload", "type": "string", "jsonPath": ".spec.workload.name"},
        {"name": "Outcome", "type": "string", "jsonPath": ".spec.outcome"},
        {"name": "Wall", "type": "string", "jsonPath": ".spec.wallTime"},
        _float("Accelerator-h", ".spec.acceleratorHours.held", "Accelerator-hours the run held."),
        _float(
            "Effective %",
            ".spec.acceleratorHours.effectivePercent",
            "Used over held accelerator-hours.",
        ),
        {"name": "Cost", "type": "number", "format": "float", "jsonPath": ".spec.cost"},
        _AGE,
        *(
            {"name": name, "type": "string", "priority": 1, "jsonPath": path}
            for name, path in (
                ("Data", ".spec.experiment.dataVersion"),
                ("Config", ".spec.experiment.configHash"),
                ("Metric", ".spec.result.metric"),
            )
        ),
        _float("Final", ".spec.result.final", "The trainer's final metric.", wide=True),
        _float(
            "Storage GiB-h",
            ".spec.storage.gibHours",
            "GiB-hours of the claims the run's pods mounted.",
            wide=True,
        ),
    ),
)
BUDGET_USAGE = Kind(
    BudgetUsage,
    plural="budgetusages",
    short_names=("tbu",),
    namespaced=True,
    status=False,
    columns=(
        {"name": "Budget", "type": "string", "jsonPath": ".spec.budget"},
        {"name": "Mode", "type": "string", "jsonPath": ".spec.mode"},
        {"name": "State", "type": "string", "jsonPath": ".spec.state"},
        _float(
            "Used %",
            ".spec.percent",
            "Percent of the budget's most constrained limit used this period.",
        ),
        _float(
            "Namespace-h",
            ".spec.namespace.acceleratorHours",
            "Accelerator-hours this namespace charged to the budget.",
        ),
        _float(
            "Share %",
            ".spec.namespace.percentOfUsed",
            "This namespace's part of the accelerator-hours the budget used.",
        ),
        _AGE,
        {
            "name": "Evaluated",
            "type": "date",
            "priority": 1,
            "description": "When the budget computed these figures.",
            "jsonPath": ".spec.evaluatedAt",
        },
    ),
)
RECORDS: tuple[Kind, ...] = (RUN_RECEIPT, BUDGET_USAGE)
"""Kinds the operator writes as records, not policies it is given."""


def _description(text: str) -> str:
    """Docstrings wrap at 100 columns; `kubectl explain` wraps itself, so unwrap paragraphs."""
    paragraphs = re.split(r"\n\s*\n", text.strip())
    return "\n\n".join(" ".join(p.split()) for p in paragraphs)


def _without_nulls(value: Any) -> Any:
    """Unset optional fields serialize as null, which a structural default must not hold."""
    if isinstance(value, dict):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    return value


def structural(node: JSON, defs: JSON) -> JSON:
    """Translate one pydantic JSON-Schema node into a structural OpenAPI v3 node."""
    if "$ref" in node:
        target = defs[node["$ref"].removeprefix("#/$defs/")]
        merged = {**structural(target, defs)}
        rest = {k: v for k, v in node.items() if k != "$ref"}
        merged.update(structural(rest, defs) if rest else {})
        return merged
    if "anyOf" in node:
        options = [o for o in node["anyOf"] if o != {"type": "null"}]
        if len(options) != 1:
            raise ValueError(f"cannot express a union in a structural schema: {node}")
        rest = {k: v for k, v in node.items() if k != "anyOf"}
        if rest.get("default", ...) is None:
            del rest["default"]
        return {**structural(options[0], defs), **structural(rest, defs)}
    unknown = set(node) - _KEPT - _DROPPED - {"const"}
    if unknown:
        raise ValueError(f"no structural equivalent for {sorted(unknown)} in {node}")

    out: JSON = {}
    for key, value in node.items():
        if key in _DROPPED:
            continue
        if key == "properties":
            out[key] = {name: structural(sub, defs) for name, sub in value.items()}
        elif key == "items":
            out[key] = structural(value, defs)
        elif key == "additionalProperties":
            if isinstance(value, dict):
                out[key] = structural(value, defs)
            # `false` (extra="forbid") is implied: the API server prunes unknown fields.
        elif key == "const":
            out["enum"] = [value]
        elif key in ("exclusiveMinimum", "exclusiveMaximum"):
            # JSON Schema 2020 puts the bound here; OpenAPI v3.0 wants a bool flag.
            out[key.replace("exclusiveM", "m")] = value
            out[key] = True
        elif key == "description":
            out[key] = _description(value)
        elif key == "default":
            out[key] = _without_nulls(value)
        else:
            out[key] = value
    return out


def openapi_schema(model: type[BaseModel]) -> JSON:
    """The structural schema of a whole object, metadata left to the API server."""
    # Serialization mode renders defaults through the field serializers ("5m", not "PT5M").
    raw = model.model_json_schema(by_alias=True, mode="serialization")
    schema = structural(raw, raw.get("$defs", {}))
    schema["properties"]["metadata"] = {"type": "object"}
    for key in ("apiVersion", "kind"):
        schema["properties"][key] = {"type": "string"}
    schema["required"] = ["spec"]
    return schema


def crd(kind: Kind) -> JSON:
    """The CustomResourceDefinition manifest of one kind."""
    version: JSON = {"name": VERSION, "served": True, "storage": True}
    if kind.status:
        version["subresources"] = {"status": {}}
    version["additionalPrinterColumns"] = list(kind.columns)
    version["schema"] = {"openAPIV3Schema": openapi_schema(kind.model)}
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": kind.crd_name,
            "labels": {"app.kubernetes.io/name": "trainwarden"},
        },
        "spec": {
            "group": GROUP,
            "scope": "Namespaced" if kind.namespaced else "Cluster",
            "names": {
                "kind": kind.name,
                "listKind": f"{kind.name}List",
                "plural": kind.plural,
                "singular": kind.name.lower(),
                "shortNames": list(kind.short_names),
                "categories": ["trainwarden"],
            },
            "versions": [version],
        },
    }
