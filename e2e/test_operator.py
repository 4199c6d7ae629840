"""`trainwarden run` against the real cluster: health, metrics, structured logs."""

import json
import os
import subprocess
import urllib.request

from harness import ROOT, Cluster, Operator, wait_for


def test_health_endpoint_reports_every_controller(operator: Operator) -> None:
    def probe() -> dict[str, str] | None:
        with urllib.request.urlopen(operator.health_url, timeout=5) as response:
            assert response.status == 200
            cycles: dict[str, str | None] = json.load(response).get("controllers") or {}
        return cycles if cycles and all(cycles.values()) else None  # type: ignore[return-value]

    cycles = wait_for(probe, timeout=30, what="a completed cycle of every controller")
    assert set(cycles) == {"TrainingBudget", "IdleReclaimPolicy", "CheckpointPolicy"}
    assert all(t.startswith("20") for t in cycles.values())


def test_metrics_endpoint_reports_policies(cluster: Cluster, operator: Operator) -> None:
    cluster.kubectl("apply", "-f", str(ROOT / "crds/samples/trainingbudget-vision-team.yaml"))

    def policy_series() -> list[str]:
        with urllib.request.urlopen(operator.metrics_url, timeout=5) as response:
            text = response.read().decode()
        assert "trainwarden_build_info" in text
        return [line for line in text.splitlines() if line.startswith("trainwarden_policy_ready{")]

    series = wait_for(
        lambda: [s for s in policy_series() if 'name="vision-team"' in s],
        timeout=30,
        what="the vision-team budget's trainwarden_policy_ready series",
    )
    assert series == ['trainwarden_policy_ready{kind="TrainingBudget",name="vision-team"} 1.0']


def test_logs_are_json_lines(operator: Operator) -> None:
    lines = wait_for(lambda: operator.log_lines(), timeout=10, what="operator log lines")
    records = [json.loads(line) for line in lines if line.strip()]
    assert records, "the operator logged nothing"
    for record in records:
        assert {"event", "level", "timestamp", "logger"} <= set(record), record
    assert any(r["event"] == "starting trainwarden" for r in records)


def test_report_reads_the_live_cluster(cluster: Cluster, operator: Operator) -> None:
    cluster.kubectl("apply", "-f", str(ROOT / "crds/samples/trainingbudget-vision-team.yaml"))
    wait_for(
        lambda: (
            "percent"
            in json.loads(cluster.kubectl("get", "tb", "vision-team", "-o", "json")).get(
                "status", {}
            )
        ),
        timeout=30,
        what="the vision-team budget evaluated",
    )
    run = [str(ROOT / ".venv/bin/trainwarden"), "report", "-o", "json"]
    env = {**os.environ, "KUBECONFIG": str(cluster.kubeconfig)}
    built = json.loads(subprocess.run(run, env=env, capture_output=True, check=True).stdout)
    budgets = {b["budget"]: b for b in built["spent"]}
    assert budgets["vision-team"]["mode"] == "DryRun"
    assert {"suspendedByBudgets", "idleReclaims", "checkpointsDeleted"} <= set(built["saved"])
    table = subprocess.run(run[:2], env=env, capture_output=True, check=True, text=True).stdout
    assert "WHO SPENT WHAT" in table
    assert "vision-team (DryRun)" in table
