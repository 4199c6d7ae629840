"""parse_spec names the field and the fix for every problem."""

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, model_validator

from trainwarden.api.v1alpha1 import CheckpointPolicySpec, TrainingBudgetSpec
from trainwarden.api.v1alpha1.types import DURATION_PATTERN
from trainwarden.api.v1alpha1.validation import parse_spec


def test_every_problem_is_reported_with_its_path() -> None:
    problems = parse_spec(
        TrainingBudgetSpec,
        {
            "scope": {"namespaces": ["vision"]},
            "limits": {"acceleratorHours": -1},
            "period": {"type": "Daily", "timeZone": "Mars/Olympus"},
            "enforcement": {"gracePeriod": "soon"},
        },
    )
    assert isinstance(problems, list)
    text = "\n".join(problems)
    assert "spec.limits.acceleratorHours: Input should be greater than or equal to 0" in text
    assert "spec.period.timeZone: unknown time zone 'Mars/Olympus'" in text
    assert "spec.enforcement.gracePeriod: invalid duration 'soon'" in text
    assert len(problems) == 3


def test_valid_spec_parses_with_defaults() -> None:
    spec = parse_spec(
        CheckpointPolicySpec,
        {"scope": {"namespaces": ["a"]}, "storage": {"pvc": {"path": "/ckpt"}}},
    )
    assert isinstance(spec, CheckpointPolicySpec)
    assert spec.mode == "DryRun"
    assert spec.retention.keep_last == 3


S3 = {
    "endpoint": "http://s3:9000",
    "bucket": "ckpts",
    "credentials": {"namespace": "a", "name": "k"},
}


@pytest.mark.parametrize("value", ["1000000000d", "999999999d", "36501d", "9" * 30 + "d"])
def test_a_duration_too_long_to_compute_with_is_an_invalid_spec(value: str) -> None:
    problems = parse_spec(
        CheckpointPolicySpec,
        {"scope": {"namespaces": ["a"]}, "storage": {"pvc": {}}, "retention": {"minAge": value}},
    )
    assert isinstance(problems, list)
    assert problems[0].startswith("spec.retention.minAge: duration ")


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(st.from_regex(DURATION_PATTERN, fullmatch=True).filter(lambda d: len(d) <= 32))
def test_every_duration_the_api_server_accepts_parses_or_is_reported(value: str) -> None:
    spec = {"scope": {"namespaces": ["a"]}, "storage": {"pvc": {}}}
    for where in ({"retention": {"minAge": value}}, {"schedule": {"interval": value}}):
        parsed = parse_spec(CheckpointPolicySpec, {**spec, **where})
        assert isinstance(parsed, CheckpointPolicySpec | list)


@pytest.mark.parametrize("prefix", ["", "/", "///", None])
def test_an_s3_location_needs_a_prefix_never_the_whole_bucket(prefix: str | None) -> None:
    s3 = S3 if prefix is None else {**S3, "prefix": prefix}
    problems = parse_spec(
        CheckpointPolicySpec, {"scope": {"namespaces": ["a"]}, "storage": {"s3": s3}}
    )
    assert isinstance(problems, list)
    assert problems[0].startswith("spec.storage.s3.prefix: ")
    ok = parse_spec(
        CheckpointPolicySpec,
        {"scope": {"namespaces": ["a"]}, "storage": {"s3": {**S3, "prefix": "runs/a"}}},
    )
    assert isinstance(ok, CheckpointPolicySpec)


def test_a_validator_that_raises_past_pydantic_is_still_a_reason() -> None:
    class Odd(BaseModel):
        @model_validator(mode="after")
        def _overflow(self) -> "Odd":
            raise OverflowError("date value out of range")

    assert parse_spec(Odd, {}) == ["spec: OverflowError: date value out of range"]
