"""What `trainwarden estimate` reads: manifests and TrainingBudgets from YAML texts, each
object checked before anything is estimated from it.

A manifest the estimate cannot read is an InputError naming its document and kind, never
a guess: a pod count of 10^9 that core/estimate.py defensively reads as 1 would make a
confident, wrong estimate, so here it is refused.
"""

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import yaml

from trainwarden.api.v1alpha1.budget import TrainingBudgetSpec
from trainwarden.api.v1alpha1.names import BUDGET_KIND
from trainwarden.api.v1alpha1.validation import parse_spec
from trainwarden.core.admission import budget_view
from trainwarden.core.estimate import MAX_PODS, Demand, demand
from trainwarden.core.shapes import mapping

JSON = dict[str, Any]
_KUBEFLOW = ("PyTorchJob", "TFJob", "MPIJob", "XGBoostJob", "PaddleJob", "JAXJob")
KINDS = ("Pod", "Job", "JobSet", "RayJob", *_KUBEFLOW, "Workload")
"""The kinds an estimate understands (core/estimate.py reads their pod templates)."""
NAME_LABEL = "kubernetes.io/metadata.name"
"""The API server labels every namespace with its name; namespaceSelectors often use it."""
_COUNTS = frozenset(
    {"parallelism", "completions", "replicas", "minReplicas", "numOfHosts", "count"}
)


class InputError(ValueError):
    """A manifest or budget file the estimate cannot read: the message names it."""


@dataclass(frozen=True)
class Manifest:
    """One object of an input, and where it came from (1-based document index)."""

    source: str
    index: int
    body: Mapping[str, Any]
    item: int | None = None
    """Its position in the items of a `kind: List` document."""

    @property
    def where(self) -> str:
        item = f" item {self.item}" if self.item is not None else ""
        return f"{self.source} document {self.index}{item}"


def load(text: str, source: str) -> list[Manifest]:
    """Every object of a (multi-document) YAML or JSON text; `kind: List` documents
    (what `kubectl get -o yaml` prints) contribute their items."""
    try:
        documents = list(yaml.safe_load_all(text))
    except yaml.YAMLError as error:
        raise InputError(f"{source}: not valid YAML: {_yaml_problem(error)}") from None
    found = []
    for index, document in enumerate(documents, start=1):
        if document is None:  # an empty document, e.g. after a trailing "---"
            continue
        if not isinstance(document, Mapping):
            what = "a list" if isinstance(document, list) else type(document).__name__
            raise InputError(
                f"{source} document {index}: is {what}, not a Kubernetes object "
                "(a mapping with apiVersion, kind, metadata and spec)"
            )
        if str(document.get("kind", "")).endswith("List") and isinstance(
            document.get("items"), list
        ):
            found += [
                Manifest(source, index, item, position)
                for position, item in enumerate(document["items"], start=1)
            ]
        else:
            found.append(Manifest(source, index, document))
    return found


def _yaml_problem(error: yaml.YAMLError) -> str:
    mark = getattr(error, "problem_mark", None)
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
    return f"{getattr(error, 'problem', None) or error}{where}"


def _counts(node: object, path: str = "spec") -> Iterable[tuple[str, object]]:
    """Every pod-count field outside pod specs (a PodSpec has containers)."""
    if isinstance(node, list):
        for i, value in enumerate(node):
            yield from _counts(value, f"{path}[{i}]")
    elif isinstance(node, Mapping) and "containers" not in node:
        for key, value in node.items():
            if key in _COUNTS:
                yield f"{path}.{key}", value
            yield from _counts(value, f"{path}.{key}")


def check(m: Manifest) -> Demand:
    """The manifest's demand; InputError for what an estimate would have to guess."""
    body = m.body
    if not isinstance(body, Mapping):
        raise InputError(f"{m.where}: is {type(body).__name__}, not a Kubernetes object")
    kind = body.get("kind")
    if not kind:
        raise InputError(f"{m.where}: has no kind (expected one of {', '.join(KINDS)})")
    if kind not in KINDS:
        hint = " (pass budgets with --budgets)" if kind == BUDGET_KIND else ""
        raise InputError(
            f"{m.where}: kind {str(kind)[:64]!r} is not a workload trainwarden estimates{hint}; "
            f"expected one of {', '.join(KINDS)}"
        )
    what = f"{m.where} ({kind} {name_of(body)})"
    for path, value in _counts(body.get("spec")):
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_PODS:
            raise InputError(
                f"{what}: {path}={repr(value)[:40]} is not a pod count (0..{MAX_PODS})"
            )
    try:
        found = demand(body)
    except (ValueError, TypeError, AttributeError) as error:
        raise InputError(f"{what}: unreadable resources: {error}") from None
    for group in found.groups:
        for resource, amount in group.requests.items():
            if not math.isfinite(amount) or amount < 0:
                raise InputError(f"{what}: {group.name} requests {resource}={amount}")
    return found


def name_of(body: Mapping[str, Any]) -> str:
    """Its name, or its generateName with an ellipsis."""
    meta = mapping(body.get("metadata"))
    return str(meta.get("name") or f"{meta.get('generateName') or ''}…")


def load_budgets(text: str, source: str) -> list[Mapping[str, Any]]:
    """The TrainingBudgets of a file; other kinds are skipped (a GitOps directory mixes
    them), a budget the operator would reject is an InputError."""
    budgets = [m for m in load(text, source) if m.body.get("kind") == BUDGET_KIND]
    for m in budgets:
        problems = parse_spec(TrainingBudgetSpec, mapping(m.body.get("spec")))
        if isinstance(problems, list):  # each names its field, as the API server would
            where = f"{m.where}: TrainingBudget {name_of(m.body)} has an invalid spec"
            raise InputError(f"{where}: {'; '.join(problems)}")
        if budget_view(m.body) is None:
            raise InputError(
                f"{m.where}: TrainingBudget {name_of(m.body)} has an invalid status.admission"
            )
    return [m.body for m in budgets]


def namespace_of(m: Manifest, default: str) -> str:
    """Where it would be created: its own namespace, else the default one."""
    return str(mapping(m.body.get("metadata")).get("namespace") or default)


def offline_labels(namespaces: Iterable[str], given: Mapping[str, str]) -> dict[str, JSON]:
    """Labels per namespace without a cluster: the given ones, plus the name label the
    API server would add."""
    return {ns: {**given, NAME_LABEL: given.get(NAME_LABEL, ns)} for ns in namespaces}
