"""Whatever the API server lets through, the operator copes: specs drawn from the CRDs' own
OpenAPI schemas either parse into a policy or come back as problems to report
(Ready=False), never an exception; and a reconciler given any of them either evaluates or
reports, and never raises."""

import asyncio
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from fakekube import FakeKube
from trainwarden.api.v1alpha1.budget import TrainingBudgetSpec
from trainwarden.api.v1alpha1.checkpoint import CheckpointPolicySpec
from trainwarden.api.v1alpha1.idle import IdleReclaimPolicySpec
from trainwarden.api.v1alpha1.validation import parse_spec
from trainwarden.budget import reconcile as budget
from trainwarden.budget.decide import Memory as BudgetMemory
from trainwarden.cache.cluster import ClusterCache
from trainwarden.idle import reconcile as idle

CRDS = Path(__file__).resolve().parent.parent / "crds"
KINDS: dict[str, tuple[str, type[BaseModel]]] = {
    "TrainingBudget": ("trainingbudgets.trainwarden.dev.yaml", TrainingBudgetSpec),
    "IdleReclaimPolicy": ("idlereclaimpolicies.trainwarden.dev.yaml", IdleReclaimPolicySpec),
    "CheckpointPolicy": ("checkpointpolicies.trainwarden.dev.yaml", CheckpointPolicySpec),
}


def _string(schema: dict[str, Any]) -> st.SearchStrategy[str]:
    if "enum" in schema:
        return st.sampled_from(schema["enum"])
    low, high = schema.get("minLength", 0), schema.get("maxLength", 80)
    if "pattern" in schema:
        drawn = st.from_regex(schema["pattern"], fullmatch=True)
        return drawn.filter(lambda v: low <= len(v) <= high)
    return st.text(min_size=low, max_size=min(high, 80))


def _number(schema: dict[str, Any], integer: bool) -> st.SearchStrategy[Any]:
    low, high = schema.get("minimum"), schema.get("maximum")
    if integer:
        return st.integers(low, high)
    return st.floats(low, high, allow_nan=False, allow_infinity=False)


def _object(schema: dict[str, Any]) -> st.SearchStrategy[Any]:
    properties = schema.get("properties")
    if properties is None:
        values = schema.get("additionalProperties")
        value = draw_from(values) if isinstance(values, dict) else st.text(max_size=20)
        return st.dictionaries(st.text(min_size=1, max_size=20), value, max_size=3)
    required = set(schema.get("required", []))
    return st.fixed_dictionaries(
        {k: draw_from(v) for k, v in properties.items() if k in required},
        optional={k: draw_from(v) for k, v in properties.items() if k not in required},
    )


def draw_from(schema: dict[str, Any]) -> st.SearchStrategy[Any]:
    """Values the OpenAPI schema admits (its CEL rules are not checked here, so the fuzz
    is wider than what the API server admits)."""
    if schema.get("x-kubernetes-int-or-string"):
        return st.one_of(st.integers(0, 10**6), _string({"pattern": "^[0-9]{1,3}%$"}))
    kind = schema.get("type")
    if kind == "object":
        return _object(schema)
    if kind == "array":
        limit = min(schema.get("maxItems", 4), 4)
        return st.lists(
            draw_from(schema.get("items", {})), min_size=schema.get("minItems", 0), max_size=limit
        )
    if kind == "string":
        return _string(schema)
    if kind in ("integer", "number"):
        return _number(schema, kind == "integer")
    if kind == "boolean":
        return st.booleans()
    return st.none()


def specs(kind: str) -> st.SearchStrategy[dict[str, Any]]:
    crd = yaml.safe_load((CRDS / KINDS[kind][0]).read_text())
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    return draw_from(schema)


FUZZ = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.filter_too_much,
        HealthCheck.data_too_large,
    ],
)


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_every_admitted_spec_parses_or_names_its_problems(kind: str) -> None:
    model = KINDS[kind][1]

    @FUZZ
    @given(specs(kind))
    def check(spec: dict[str, Any]) -> None:
        parsed = parse_spec(model, spec)
        assert isinstance(parsed, model) or (
            isinstance(parsed, list) and parsed and all(isinstance(p, str) and p for p in parsed)
        )

    check()


def _body(kind: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "trainwarden.dev/v1alpha1",
        "kind": kind,
        "metadata": {"name": "fuzzed"},
        "spec": spec,
    }


@FUZZ
@given(specs("TrainingBudget"))
def test_the_budget_reconciler_never_raises_on_an_admitted_spec(spec: dict[str, Any]) -> None:
    fake = FakeKube([_body("TrainingBudget", spec)])
    body = fake.read("trainwarden.dev/v1alpha1", "TrainingBudget", None, "fuzzed")
    assert body is not None
    now = fake.now()
    asyncio.run(budget.reconcile(body, None, ClusterCache(), fake, BudgetMemory(), now))
    written = fake.read("trainwarden.dev/v1alpha1", "TrainingBudget", None, "fuzzed")
    assert written is not None
    ready = {c["type"]: c for c in written["status"]["conditions"]}["Ready"]
    assert ready["status"] in ("True", "False")


@FUZZ
@given(specs("IdleReclaimPolicy"))
def test_the_idle_reconciler_never_raises_on_an_admitted_spec(spec: dict[str, Any]) -> None:
    fake = FakeKube([_body("IdleReclaimPolicy", spec)])
    body = fake.read("trainwarden.dev/v1alpha1", "IdleReclaimPolicy", None, "fuzzed")
    assert body is not None
    asyncio.run(idle.reconcile(body, ClusterCache(), fake, None, idle.Memory(), fake.now(), []))
