"""parse_spec names the field and the fix for every problem."""

from trainwarden.api.v1alpha1 import CheckpointPolicySpec, TrainingBudgetSpec
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
