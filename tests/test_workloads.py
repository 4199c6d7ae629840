"""The pure helpers of the workload adapter: suspend fields per kind and trainwarden's marks."""

from datetime import UTC, datetime

from trainwarden.adapters.workloads import SUSPENDED_IN, is_suspended, label_value, suspended_in


def test_each_kind_reads_its_own_suspend_field() -> None:
    job = {"apiVersion": "batch/v1", "kind": "Job", "spec": {"suspend": True}}
    ptj = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "spec": {"runPolicy": {"suspend": True}},
    }
    ptj_running = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "spec": {"suspend": True}}
    pod = {"apiVersion": "v1", "kind": "Pod", "spec": {}}
    assert is_suspended(job)
    assert is_suspended(ptj)
    assert not is_suspended(ptj_running), "PyTorchJob suspends through runPolicy, not spec"
    assert not is_suspended(pod), "a pod has no suspend field: it is never 'suspended'"


def test_label_values_fit_kubernetes_limits() -> None:
    assert label_value("team-a") == "team-a"
    long = "b" * 200
    assert len(label_value(long)) <= 63
    assert label_value(long) != label_value("b" * 199)


def test_suspended_in_round_trip_and_garbage() -> None:
    period = datetime(2026, 12, 1, tzinfo=UTC)
    obj = {"metadata": {"annotations": {SUSPENDED_IN: f"3/{period.isoformat()}"}}}
    assert suspended_in(obj) == (3, period)
    assert suspended_in({"metadata": {"annotations": {SUSPENDED_IN: "garbage"}}}) is None
    assert suspended_in({"metadata": {}}) is None
