"""Scene: storage in a budget. A budget limits the GiB-hours the PersistentVolumeClaims in
its scope request; two claims are charged (the status's figure), and once the limit is
spent a new claim is refused by the admission webhook with kubectl's message. Existing
claims are never touched. Cleans up after itself; a failure says why and the demo goes on."""

import json
import subprocess

from demo.shell import KUBECTL, apply, budget_status, demo_policy, kubectl, say, scene
from harness import wait_for
from trainwarden.testing.builders import NamespaceBuilder
from trainwarden.testing.cluster import PVCBuilder
from trainwarden.testing.policies import BudgetBuilder

NAMESPACE, NAME = "datasets", "datasets-storage"
LIMIT = 0.002
"""GiB-hours: 7.2 GiB-seconds, which two 1 GiB claims spend in under four seconds."""


def run() -> None:
    say(f"Storage in a budget: {NAME} limits {NAMESPACE}'s claims to {LIMIT} GiB-hours")
    with scene("storage in a budget", cleanup=_clean):
        _clean()
        print(apply(NamespaceBuilder(NAMESPACE).build()), end="")
        policy = BudgetBuilder(NAME).namespaces(NAMESPACE).period("Monthly").enforce()
        print(apply(demo_policy(policy.storage_gib_hours(LIMIT))), end="")
        for name in ("train-set", "eval-set"):  # no provisioner: Pending, and charged
            claim = PVCBuilder(name, NAMESPACE).size("1Gi").storage_class("").build()
            print(apply(claim, namespace=NAMESPACE), end="")
        storage = wait_for(_charged, timeout=90, what="the budget to charge both claims")
        print(
            f"status.storage: {storage['usedGiBHours']:.5f} GiB-hours used, "
            f"{storage['claims']} claims requesting {storage['requestedGiB']:g} GiB now"
        )
        wait_for(_refusing, timeout=90, what="the budget to refuse new claims")
        exhausted = next(
            c for c in budget_status(NAME)["conditions"] if c["type"] == "StorageExhausted"
        )
        print(f"  StorageExhausted=True: {exhausted['message']}")
        _refused()


def _charged() -> dict[str, float] | None:
    storage = budget_status(NAME).get("storage") or {}
    return storage if storage.get("claims") == 2 else None


def _refusing() -> bool:
    return bool((budget_status(NAME).get("storageAdmission") or {}).get("refusing"))


def _refused() -> None:
    claim = PVCBuilder("more", NAMESPACE).size("1Gi").storage_class("").build()
    print("$ kubectl create -f more.yaml    # one more 1 GiB claim")
    created = subprocess.run(
        [*KUBECTL, "create", "-f", "-"],
        input=json.dumps(claim),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    print(created.stderr + created.stdout, end="")
    left = kubectl("get", "pvc", "-n", NAMESPACE, "-o", "name").split()
    print(f"exit {created.returncode}; the claims there, untouched: {' '.join(sorted(left))}")


def _clean() -> None:
    """The budget first (so it refuses nothing meanwhile), then the namespace."""
    kubectl("delete", "tb", NAME, "--ignore-not-found", "--wait=false")
    kubectl("delete", "namespace", NAMESPACE, "--ignore-not-found", "--wait=false")
    wait_for(
        lambda: not kubectl("get", "namespace", NAMESPACE, "--ignore-not-found").strip(),
        timeout=60,
        what=f"namespace {NAMESPACE} gone",
    )
