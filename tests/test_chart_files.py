"""The chart's files that are copies or echoes of the package: checked without helm."""

import importlib.util
import json
import re
import tomllib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
CHART = ROOT / "helm" / "trainwarden"


def test_chart_crds_are_the_generated_crds() -> None:
    """One source: helm/trainwarden/crds/ is a copy of crds/ (`make crds` writes both)."""
    source = {p.name: p.read_text() for p in (ROOT / "crds").glob("*.yaml")}
    copied = {p.name: p.read_text() for p in (CHART / "crds").iterdir()}
    assert sorted(copied) == sorted(source), "run `make crds`: the chart's CRD files differ"
    for name, text in source.items():
        assert copied[name] == text, f"helm/trainwarden/crds/{name} is stale: run `make crds`"


def test_chart_version_is_the_package_version() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    package = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert chart["appVersion"] == package, "the default image tag is the appVersion"


def test_the_chart_readme_is_generated_from_the_values() -> None:
    """helm/trainwarden/README.md (Artifact Hub's page, `helm show readme`) lists every value
    with its default and comment: regenerate it with `make chart-readme`."""
    spec = importlib.util.spec_from_file_location("chart_readme", ROOT / "helm" / "readme.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    stale = (CHART / "README.md").read_text() != module.render()
    assert not stale, "helm/trainwarden/README.md is stale: run `make chart-readme`"
    listed = {v.path for v in module.values((CHART / "values.yaml").read_text())}
    assert {"image.digest", "crds.upgrade", "prometheusRule.budgetAlertModes"} <= listed


def _series() -> dict[str, frozenset[str]]:
    """Every series the operator exports, with the labels it carries (a histogram's
    `_bucket` also `le`)."""
    from prometheus_client import REGISTRY

    import trainwarden.metrics  # noqa: F401  (registers every collector)

    found: dict[str, frozenset[str]] = {}
    for collector in list(REGISTRY._collector_to_names):  # no public list of collectors
        labels = frozenset(getattr(collector, "_labelnames", ()))
        for name in REGISTRY._collector_to_names[collector]:
            found[name] = labels | ({"le"} if name.endswith("_bucket") else set())
    return found


def test_every_dashboard_query_names_exported_series_and_their_labels() -> None:
    """Each panel's series exists, and each label it groups by is one that series has:
    a renamed series or label would leave a panel empty with no error anywhere."""
    dashboard = json.loads((CHART / "dashboards" / "trainwarden.json").read_text())
    series = _series()
    titles = [p["title"] for p in dashboard["panels"]]
    assert "Storage GiB-hours charged this period, by budget (team) and class" in titles
    for panel in dashboard["panels"]:
        for target in panel["targets"]:
            expr = target["expr"]
            names = re.findall(r"\btrainwarden_[a-z_]+", expr)
            assert names, expr
            for name in names:
                assert name in series, f"{panel['title']}: {name} is not exported"
            labels = frozenset().union(*(series[n] for n in names))
            for group in re.findall(r"\bby \(([^)]*)\)", expr):
                for label in (x.strip() for x in group.split(",")):
                    assert label in labels, f"{panel['title']}: no series has label {label}"
