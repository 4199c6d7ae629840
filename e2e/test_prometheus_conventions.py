"""The operator's metrics and the chart's alerts as Prometheus itself judges them: the
exposition through `promtool check metrics` (base units, names), the rules through
`promtool check rules`, and the budget alerts through `promtool test rules` (Prometheus's
own rule engine over synthetic series). promtool comes with the harness's Prometheus
(e2e/cluster/build.sh extracts Debian's package), helm from `make helm`."""

import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml
from prometheus_client import REGISTRY, generate_latest
from prometheus_client.metrics import MetricWrapperBase

import trainwarden.metrics as metrics
from monitoring import NAMESPACE, rule_spec

ROOT = Path(__file__).resolve().parent.parent
PROMTOOL = ROOT / ".cluster" / "prometheus" / "usr" / "bin" / "promtool"
JOB = "trainwarden-metrics"  # the scrape job of release `trainwarden` (monitoring.py)


def promtool(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    assert PROMTOOL.exists(), f"{PROMTOOL} missing: `make cluster` extracts it"
    return subprocess.run(
        [str(PROMTOOL), *args], input=stdin, capture_output=True, text=True, timeout=60
    )


def every_family_once() -> str:
    """The exposition with one series of every labelled family (an unlabelled family is
    always exposed): what the operator can export, not only what a test happened to set."""
    collectors = [c for c in vars(metrics).values() if isinstance(c, MetricWrapperBase)]
    collectors += [c for c in vars(metrics.spend).values() if isinstance(c, MetricWrapperBase)]
    for collector in collectors:
        names = collector._labelnames  # prometheus_client has no public view of them
        if names:
            collector.labels(*["x"] * len(names))
    return generate_latest(REGISTRY).decode()


def test_promtool_finds_nothing_to_say_about_the_exposition() -> None:
    text = every_family_once()
    assert "trainwarden_budget_accelerator_seconds{" in text  # the families are all there
    assert "trainwarden_run_accelerator_seconds_total{" in text
    result = promtool("check", "metrics", stdin=text)
    assert result.returncode == 0, result.stdout + result.stderr
    assert not result.stdout.strip(), result.stdout


def test_every_shipped_rule_passes_promtool(tmp_path: Path) -> None:
    path = tmp_path / "rules.yaml"
    path.write_text(yaml.safe_dump(rule_spec()))
    result = promtool("check", "rules", str(path))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout, result.stdout


def series(budget: str, mode: str, ratios: dict[str, float]) -> list[dict[str, str]]:
    """A budget as the operator exports it, over 20 minutes at one sample a minute."""
    sel = f'job="{JOB}", namespace="{NAMESPACE}", budget="{budget}"'
    out = [{"series": f'trainwarden_budget_info{{{sel}, mode="{mode}", period="Monthly"}}'}]
    out[0]["values"] = "1x20"
    out += [
        {"series": f'trainwarden_budget_used_ratio{{{sel}, dimension="{d}"}}', "values": f"{r}x20"}
        for d, r in ratios.items()
    ]
    return out


def expected(spec: dict[str, Any], alert: str, budget: str, mode: str, text: str) -> dict[str, Any]:
    rule = next(r for g in spec["groups"] for r in g["rules"] if r.get("alert") == alert)
    annotations = {**rule["annotations"], "summary": text}
    return {
        "exp_labels": {"severity": rule["labels"]["severity"], "budget": budget, "mode": mode},
        "exp_annotations": annotations,
    }


def run_rule_tests(spec: dict[str, Any], cases: list[dict[str, Any]], tmp: Path) -> None:
    (tmp / "rules.yaml").write_text(yaml.safe_dump(spec))
    tests = {
        "rule_files": ["rules.yaml"],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": [
                    *series("spent", "Enforce", {"acceleratorHours": 1.2, "cost": 0.4}),
                    *series("near", "Enforce", {"acceleratorHours": 0.3, "cpuCoreHours": 0.85}),
                    *series("rehearsal", "DryRun", {"acceleratorHours": 1.5}),
                ],
                "alert_rule_test": cases,
            }
        ],
    }
    (tmp / "tests.yaml").write_text(yaml.safe_dump(tests))
    result = promtool("test", "rules", str(tmp / "tests.yaml"))
    assert result.returncode == 0, result.stdout + result.stderr


def test_budget_alerts_page_for_enforce_budgets_with_routing_labels(tmp_path: Path) -> None:
    """An Enforce budget past its limit alerts, labelled with budget and mode; one at 85 %
    of its most constrained dimension is nearly spent after 5 minutes; a DryRun budget past
    its limit is silent by default (it suspends nothing)."""
    spec = rule_spec()
    exceeded = "TrainwardenBudgetExceeded"
    near = "TrainwardenBudgetNearlySpent"
    cases = [
        {
            "eval_time": "10m",
            "alertname": exceeded,
            "exp_alerts": [
                expected(
                    spec, exceeded, "spent", "Enforce", "Enforce TrainingBudget spent is spent."
                )
            ],
        },
        {"eval_time": "4m", "alertname": near, "exp_alerts": []},  # `for: 5m` not yet
        {
            "eval_time": "10m",
            "alertname": near,
            "exp_alerts": [
                expected(
                    spec,
                    near,
                    "near",
                    "Enforce",
                    "Enforce TrainingBudget near has used 85% of its limit.",
                )
            ],
        },
    ]
    run_rule_tests(spec, cases, tmp_path)


def test_dry_run_budgets_alert_when_asked(tmp_path: Path) -> None:
    spec = rule_spec("prometheusRule.budgetAlertModes=Enforce|DryRun")
    exceeded = "TrainwardenBudgetExceeded"
    alerts = [
        expected(
            spec, exceeded, "rehearsal", "DryRun", "DryRun TrainingBudget rehearsal is spent."
        ),
        expected(spec, exceeded, "spent", "Enforce", "Enforce TrainingBudget spent is spent."),
    ]
    run_rule_tests(
        spec, [{"eval_time": "10m", "alertname": exceeded, "exp_alerts": alerts}], tmp_path
    )


if __name__ == "__main__":  # the exposition, for `promtool check metrics` by hand
    sys.stdout.write(every_family_once())
