"""The committed CRDs are exactly what the models generate, and are structural."""

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from trainwarden.api.v1alpha1.crd import KINDS, RECORDS, RUN_RECEIPT, crd, structural
from trainwarden.cli import render_crds

CRDS = Path(__file__).parent.parent / "crds"


@pytest.mark.parametrize("name", sorted(render_crds()))
def test_committed_crd_is_up_to_date(name: str) -> None:
    committed = (CRDS / name).read_text()
    assert committed == render_crds()[name], (
        f"crds/{name} is stale: run `make crds` (trainwarden crds) and commit the result"
    )


def _walk(node: dict[str, Any], path: str = "") -> list[tuple[str, dict[str, Any]]]:
    found = [(path, node)]
    for name, sub in node.get("properties", {}).items():
        found += _walk(sub, f"{path}.{name}")
    if "items" in node:
        found += _walk(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        found += _walk(node["additionalProperties"], f"{path}{{}}")
    return found


@pytest.mark.parametrize("kind", [*KINDS, *RECORDS], ids=lambda k: k.name)
def test_schema_is_structural_and_documented(kind: Any) -> None:
    schema = crd(kind)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    for path, node in _walk(schema):
        assert "type" in node, f"{path} has no type"
        assert not {"$ref", "anyOf", "oneOf", "allOf", "title"} & set(node), path
        if "properties" in node:
            assert node.get("additionalProperties") is None, path
        if path.startswith((".spec", ".status")) and path[-1] not in "]}":
            assert node.get("description"), f"{path} has no description for kubectl explain"


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.name)
def test_kubebuilder_conventions(kind: Any) -> None:
    manifest = crd(kind)
    version = manifest["spec"]["versions"][0]
    assert manifest["spec"]["scope"] == "Cluster"
    assert version["subresources"] == {"status": {}}
    assert manifest["spec"]["names"]["shortNames"]
    columns = {c["name"]: c["jsonPath"] for c in version["additionalPrinterColumns"]}
    assert columns["Ready"] == ".status.conditions[?(@.type=='Ready')].status"
    assert columns["Mode"] == ".spec.mode"
    spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
    assert spec["properties"]["mode"]["default"] == "DryRun"
    assert "scope" in spec["required"]


def test_a_receipt_is_a_namespaced_record_nobody_edits() -> None:
    """Tenants read their own receipts with namespace RBAC; the operator writes each once."""
    manifest = crd(RUN_RECEIPT)
    version = manifest["spec"]["versions"][0]
    assert manifest["spec"]["scope"] == "Namespaced"
    assert "subresources" not in version  # no status: the record is its spec
    assert manifest["spec"]["names"]["shortNames"] == ["rcpt"]
    spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
    assert {"rule": "self == oldSelf", "message": "a receipt is a record: it is never changed"} in (
        spec["x-kubernetes-validations"]
    )
    columns = [c["name"] for c in version["additionalPrinterColumns"]]
    assert columns == [
        "Kind", "Workload", "Outcome", "Wall", "Accelerator-h", "Effective %", "Cost", "Age",
        "Data", "Config", "Metric", "Final",  # the experiment ledger: -o wide
        "Storage GiB-h",  # the storage the run's pods mounted: -o wide
    ]  # fmt: skip
    wide = [c["name"] for c in version["additionalPrinterColumns"] if c.get("priority") == 1]
    assert wide == ["Data", "Config", "Metric", "Final", "Storage GiB-h"]


def test_untranslatable_schema_is_refused_not_dropped() -> None:
    with pytest.raises(ValueError, match="union"):
        structural({"anyOf": [{"type": "string"}, {"type": "integer"}]}, {})
    with pytest.raises(ValueError, match="propertyNames"):
        structural({"type": "object", "propertyNames": {"pattern": "x"}}, {})


def test_defaults_hold_no_nulls_and_use_api_spelling() -> None:
    schema = yaml.safe_load(render_crds()["trainingbudgets.trainwarden.dev.yaml"])
    spec = schema["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    assert spec["properties"]["period"]["default"] == {"type": "Monthly", "timeZone": "UTC"}
    assert spec["properties"]["enforcement"]["default"]["gracePeriod"] == "5m"


@pytest.mark.parametrize("kind", [*KINDS, *RECORDS], ids=lambda k: k.name)
def test_cel_rules_name_fields_that_exist(kind: Any) -> None:
    """A CEL rule naming a missing field fails only when the CRD is applied; catch it here."""
    schema = crd(kind)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    for path, node in _walk(schema):
        for rule in node.get("x-kubernetes-validations", []):
            for name in re.findall(r"self\.(\w+)", rule["rule"]):
                assert name in node.get("properties", {}), f"{path}: {rule['rule']} names {name}"
