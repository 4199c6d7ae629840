"""Scene: the sample policies of crds/samples/, one with a mistake only the operator sees
(a time zone that does not exist), and one the API server rejects outright.

The samples are user-facing and carry no instance label; the demo adds
trainwarden.dev/instance=demo when it applies them, so that only its operator governs them.
"""

import json
import subprocess

import yaml

from demo.shell import (
    KUBECTL,
    OURS,
    POLICIES,
    apply,
    get,
    kubectl,
    label_for_demo,
    say,
    show,
)
from harness import ROOT, wait_for
from trainwarden.testing.builders import BudgetBuilder

SAMPLES = ROOT / "crds" / "samples"


def apply_samples() -> None:
    say(
        "Applying the sample policies (crds/samples/) and one with a mistake only the operator sees"
    )
    print(
        f"(as committed, plus the label {OURS}: only the demo's operator governs them, "
        "and the e2e tests' operators leave them alone)"
    )
    documents = [
        label_for_demo(document)
        for path in sorted(SAMPLES.glob("*.yaml"))
        for document in yaml.safe_load_all(path.read_text())
        if document
    ]
    print(kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(documents)), end="")
    print(apply(label_for_demo(typo_in_timezone().unchecked())), end="")


def typo_in_timezone() -> BudgetBuilder:
    """Valid to the API server, but Europe/Pariss is no time zone: the operator says so."""
    return (
        BudgetBuilder("typo-in-timezone")
        .namespaces("research")
        .accelerator_hours(50)
        .period("Daily", time_zone="Europe/Pariss")
    )


def apply_rejected() -> None:
    say("A policy the API server rejects outright (negative limit, unknown period)")
    rejected = (
        typo_in_timezone()
        .field("metadata.name", "rejected")
        .field("spec.limits.acceleratorHours", -10)
        .field("spec.period", {"type": "Fortnightly"})
    )
    result = subprocess.run(
        [*KUBECTL, "apply", "-f", "-"],
        input=json.dumps(label_for_demo(rejected.unchecked())),
        capture_output=True,
        text=True,
        check=False,
    )
    print(result.stderr.strip())


def report() -> None:
    """What the operator wrote on each of the demo's policies (and on no other)."""
    wait_for(_conditions_written, timeout=60, what="the operator to report on every policy")
    say("What the operator reports on each policy")
    show("get", POLICIES, "-l", OURS)
    for obj in get(POLICIES, "-l", OURS)["items"]:
        for c in obj["status"]["conditions"]:
            name = f"{obj['kind']}/{obj['metadata']['name']}"
            print(f"{name}: {c['type']}={c['status']} ({c['reason']}) {c['message']}")


def _conditions_written() -> bool:
    objs = get(POLICIES, "-l", OURS)["items"]
    return all(o.get("status", {}).get("conditions") for o in objs)
