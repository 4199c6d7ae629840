"""The chart's files that are copies or echoes of the package: checked without helm."""

import importlib.util
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
