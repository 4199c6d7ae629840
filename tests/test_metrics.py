"""Deleted policies leave no stale series behind."""

from prometheus_client import generate_latest

from trainwarden import metrics


def test_forgetting_a_budget_removes_all_its_series() -> None:
    metrics.report_budget(
        "gone-tb", {"nvidia.com/gpu": 2.0}, {"acceleratorHours": (2.0, 4.0)}, 50.0
    )
    metrics.report_policy_ready("TrainingBudget", "gone-tb", ready=True)
    assert b'budget="gone-tb"' in generate_latest()
    metrics.forget_policy("TrainingBudget", "gone-tb")
    text = generate_latest()
    assert b'budget="gone-tb"' not in text
    assert b'name="gone-tb"' not in text
