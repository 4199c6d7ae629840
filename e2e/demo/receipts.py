"""Scene: the real trainer's run leaves a receipt — what it held, used and cost, that its
budget suspended it once, and that the suspension lost no work (the trainer saved a
checkpoint on SIGTERM, which the CheckpointPolicy's scans saw)."""

from typing import Any

from demo import pruning
from demo.shell import get, say, show
from harness import wait_for

RECEIPT_WAIT = 180
"""Seconds: the receipt follows the Job's end, its pods' end and a checkpoint scan."""


def _receipt(namespace: str) -> dict[str, Any] | None:
    items: list[dict[str, Any]] = get("rcpt", "-n", namespace)["items"]
    return items[0] if items else None


def run(finished: pruning.Finished) -> None:
    say("The trainer's run receipt: held, used, cost, interruptions and the work they lost")
    receipt = wait_for(
        lambda: _receipt(finished.namespace), timeout=RECEIPT_WAIT, what="the run's receipt"
    )
    show("get", "rcpt", "-n", finished.namespace)
    spec = receipt["spec"]
    hours = spec["acceleratorHours"]
    print(
        f"{spec['workload']['kind']}/{spec['workload']['name']}: {spec['outcome']} in "
        f"{spec['wallTime']}, {hours['held'] * 3600:.0f} GPU-seconds held, "
        f"{hours['used'] * 3600:.0f} used, {hours['unknown'] * 3600:.0f} unknown; "
        f"suspended {spec['interruptions']['budgetSuspensions']} time(s) by its budget"
    )
    waste = spec.get("failureWaste") or {}
    for loss in waste.get("losses", []):
        bound = " at most" if loss.get("upperBound") else ""
        print(
            f"  {loss['reason']} at {loss['at']}: lost{bound} {loss['seconds']:.0f} s x "
            f"{loss['accelerators']:g} GPU since the newest checkpoint written before it"
        )
    if waste.get("note"):
        print(f"  ({waste['note']})")
    events = get(
        "events", "-n", finished.namespace, "--field-selector",
        "involvedObject.kind=Job,reason=RunReceipt",
    )["items"]  # fmt: skip
    for event in events[-1:]:
        print(f"Event RunReceipt on Job {finished.namespace}/{event['involvedObject']['name']}:")
        print(f"  {event['message']}")
