"""Durations, selectors and scopes: the spellings the API accepts and what they mean."""

import re
from datetime import timedelta
from pathlib import Path

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from trainwarden.api.v1alpha1 import TrainingBudget
from trainwarden.api.v1alpha1.crd import KINDS
from trainwarden.api.v1alpha1.types import (
    DURATION_MAX_LENGTH,
    DURATION_PATTERN,
    MAX_DURATION,
    LabelSelector,
    Scope,
    format_duration,
    parse_duration,
)

SAMPLES = sorted((Path(__file__).parent.parent / "crds" / "samples").glob("*.yaml"))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("30s", timedelta(seconds=30)),
        ("1h30m", timedelta(hours=1, minutes=30)),
        ("7d", timedelta(days=7)),
        ("250ms", timedelta(milliseconds=250)),
        ("0h5m", timedelta(minutes=5)),
    ],
)
def test_parse_duration(text: str, expected: timedelta) -> None:
    assert parse_duration(text) == expected


@pytest.mark.parametrize("text", ["", "0s", "0h0m", "5", "m", "-5m", "5 m", "1.5h", "5x", "PT5M"])
def test_bad_or_zero_durations_are_errors_never_zero(text: str) -> None:
    with pytest.raises(ValueError, match="duration"):
        parse_duration(text)
    assert re.fullmatch(DURATION_PATTERN, text) is None


@given(st.text(alphabet="0123456789smhd", max_size=DURATION_MAX_LENGTH + 2))
def test_schema_pattern_and_parser_agree(text: str) -> None:
    """The API server (pattern and length) and the operator (parser) accept the same
    strings, except durations too long to compute with, which the operator reports."""
    accepted_by_schema = (
        re.fullmatch(DURATION_PATTERN, text) is not None and len(text) <= DURATION_MAX_LENGTH
    )
    problem = ""
    try:
        parse_duration(text)
    except ValueError as error:
        problem = str(error)
    assert (
        not problem
        or not accepted_by_schema
        or problem.endswith(f"is longer than {MAX_DURATION.days}d")
    )
    assert accepted_by_schema or problem


@given(st.timedeltas(min_value=timedelta(milliseconds=1), max_value=timedelta(days=3650)))
def test_format_round_trips(value: timedelta) -> None:
    value = value // timedelta(milliseconds=1) * timedelta(milliseconds=1)
    assert parse_duration(format_duration(value)) == value


def test_empty_selector_and_empty_scope_are_rejected() -> None:
    with pytest.raises(ValidationError, match="empty selector"):
        LabelSelector()
    with pytest.raises(ValidationError, match="namespaces or a namespaceSelector"):
        Scope()
    with pytest.raises(ValidationError, match="empty selector"):
        Scope.model_validate({"namespaceSelector": {}})


def test_unknown_time_zone_is_reported() -> None:
    with pytest.raises(ValidationError, match="unknown time zone 'Mars/Olympus'"):
        TrainingBudget.model_validate(
            {
                "spec": {
                    "scope": {"namespaces": ["a"]},
                    "limits": {"acceleratorHours": 1},
                    "period": {"timeZone": "Mars/Olympus"},
                }
            }
        )


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.name)
def test_samples_parse(path: Path) -> None:
    doc = yaml.safe_load(path.read_text())
    (kind,) = [k for k in KINDS if k.name == doc["kind"]]
    obj = kind.model.model_validate(doc)
    # Serializing and parsing again is lossless: what the operator writes it can read.
    assert kind.model.model_validate(obj.model_dump(mode="json", by_alias=True)) == obj


def test_zero_only_where_a_field_allows_it() -> None:
    assert parse_duration("0s", allow_zero=True) == timedelta()
    with pytest.raises(ValueError, match="duration"):
        parse_duration("0s")
    with pytest.raises(ValueError, match="duration"):
        parse_duration("soon", allow_zero=True)
    spec = TrainingBudget.model_validate(
        {
            "spec": {
                "scope": {"namespaces": ["a"]},
                "limits": {"acceleratorHours": 1},
                "enforcement": {"gracePeriod": "0s"},
            }
        }
    ).spec
    assert spec.enforcement.grace_period == timedelta()
