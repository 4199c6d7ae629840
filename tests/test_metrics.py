"""What the operator exports: base units, one family per unit, and no stale series left
behind by a deleted policy or a label that changed."""

from prometheus_client import REGISTRY, generate_latest

from trainwarden import metrics


def value(name: str, labels: dict[str, str]) -> float | None:
    return REGISTRY.get_sample_value(name, labels)


def figures(**changes: object) -> metrics.BudgetFigures:
    base = {
        "mode": "Enforce",
        "period": "Monthly",
        "accelerator_hours": {"nvidia.com/gpu": 2.0},
        "cpu_core_hours": 0.5,
        "memory_gib_hours": 1.0,
        "ratios": {"acceleratorHours": 0.5, "cost": 1.25},
        "cost": (12.5, "EUR"),
    }
    return metrics.BudgetFigures(**{**base, **changes})  # type: ignore[arg-type]


def test_a_budget_is_exported_in_base_units_with_its_money_apart() -> None:
    metrics.report_budget("units-tb", figures())
    b = {"budget": "units-tb"}
    gpu = {**b, "resource": "nvidia.com/gpu"}
    assert value("trainwarden_budget_accelerator_seconds", gpu) == 7200
    assert value("trainwarden_budget_cpu_seconds", b) == 1800
    assert value("trainwarden_budget_memory_byte_seconds", b) == 2**30 * 3600
    assert value("trainwarden_budget_cost", {**b, "currency": "EUR"}) == 12.5
    assert value("trainwarden_budget_used_ratio", {**b, "dimension": "cost"}) == 1.25
    info = {**b, "mode": "Enforce", "period": "Monthly"}
    assert value("trainwarden_budget_info", info) == 1


def test_a_label_that_changes_leaves_no_series_behind() -> None:
    metrics.report_budget("moved-tb", figures())
    metrics.report_budget("moved-tb", figures(mode="DryRun", cost=None, ratios={}))
    b = {"budget": "moved-tb"}
    assert value("trainwarden_budget_info", {**b, "mode": "Enforce", "period": "Monthly"}) is None
    assert value("trainwarden_budget_info", {**b, "mode": "DryRun", "period": "Monthly"}) == 1
    assert value("trainwarden_budget_cost", {**b, "currency": "EUR"}) is None
    assert value("trainwarden_budget_used_ratio", {**b, "dimension": "cost"}) is None


def test_forgetting_a_budget_removes_all_its_series() -> None:
    metrics.report_budget("gone-tb", figures())
    metrics.report_efficiency("gone-tb", 1.0, 0.5, 0.0)
    metrics.report_policy_ready("TrainingBudget", "gone-tb", ready=True)
    assert b'budget="gone-tb"' in generate_latest()
    metrics.forget_policy("TrainingBudget", "gone-tb")
    text = generate_latest()
    assert b'budget="gone-tb"' not in text
    assert b'name="gone-tb"' not in text


def test_accelerator_time_of_idle_pods_runs_and_reclaims_is_counted_in_seconds() -> None:
    run = {"kind": "held"}
    before = value("trainwarden_run_accelerator_seconds_total", run) or 0.0
    metrics.report_run_receipt("Succeeded", {"held": 0.5})
    assert value("trainwarden_run_accelerator_seconds_total", run) == before + 1800
    metrics.report_idle_hours("units-irp", "ns", 0.25)
    idle = {"policy": "units-irp", "namespace": "ns"}
    assert value("trainwarden_idle_accelerator_seconds_total", idle) == 900
    metrics.report_reclaimed_hours("units-irp", 1.0)
    reclaimed = {"policy": "units-irp"}
    assert value("trainwarden_idle_reclaimed_accelerator_seconds_total", reclaimed) == 3600
    metrics.report_checkpoints_pruned("units-cpp", "ns", 2, 4096)
    freed = {"policy": "units-cpp", "namespace": "ns"}
    assert value("trainwarden_checkpoint_bytes_freed_total", freed) == 4096


def test_a_volume_policys_series_exist_before_its_first_deletion_and_go_with_it() -> None:
    metrics.report_volumes("gone-vrp", {"Orphaned": 2})
    assert value("trainwarden_volumes_orphaned", {"policy": "gone-vrp", "state": "Orphaned"}) == 2
    assert value("trainwarden_volumes_orphaned", {"policy": "gone-vrp", "state": "Exempt"}) == 0
    assert value("trainwarden_volumes_reclaimed_total", {"policy": "gone-vrp"}) == 0
    metrics.report_volume_reclaimed("gone-vrp", 2**30)
    assert value("trainwarden_volumes_reclaimed_bytes_total", {"policy": "gone-vrp"}) == 2**30
    metrics.forget_policy("VolumeReclaimPolicy", "gone-vrp")
    assert b'policy="gone-vrp"' not in generate_latest()
