"""Scene: the experiment ledger. A finished run's receipt says what the run was (the params,
data and code versions its Job declared, the config hash) and what its trainer reached (the
final and best eval_loss from its own trainer_state.json), and the same experiment
submitted again is told, before it starts, which run it repeats.

On the real node the run is the trainer scene's (it declares DECLARED); without one a
simulated Job on kwok stands in (no trainer: no metric). The repeat is submitted as a
server-side dry run: the webhook answers it as any create, and nothing runs twice.
Cleans up what it made; a failure says why and the demo goes on."""

import json
import subprocess
from typing import Any

from demo import pruning
from demo.shell import KUBECTL, apply, demo_policy, get, kubectl, say, scene
from harness import budget, simulated, wait_for
from trainwarden.testing.builders import JobBuilder, NamespaceBuilder

DECLARED = {
    "trainwarden.dev/params": '{"lr": 0.0003, "max_steps": 150, "save_steps": 20}',
    "trainwarden.dev/data-version": "tinystories-v2",
    "trainwarden.dev/code-version": "demo-trainer-1",
}
"""What the trainer's Job (and the stand-in) declares it is."""
STAND_IN, BUDGET, JOB = "ledger-demo", "ledger-demo-gpu", "finetune"
RECEIPT_WAIT = 120


def run(finished: pruning.Finished | None, job: str) -> None:
    say("The experiment ledger: what the run was, what it reached, and a repeat noticed")
    made = finished is None
    with scene("the experiment ledger", cleanup=_clean if made else None):
        namespace = finished.namespace if finished is not None else _stand_in()
        workload = job if finished is not None else JOB
        receipt = wait_for(
            lambda: _receipt(namespace, workload), timeout=RECEIPT_WAIT, what="the run's receipt"
        )
        _show(receipt)
        _repeat(namespace, workload, receipt["metadata"]["name"])


def _stand_in() -> str:
    """Without the real node: a 1-GPU simulated Job declaring the same, done in 10 s."""
    print("(no real node: a simulated Job on kwok declares the experiment; no trainer metric)")
    _clean()
    print(apply(NamespaceBuilder(STAND_IN).build()), end="")
    print(apply(demo_policy(budget(BUDGET, STAND_IN, 10).accelerator_rate(2.0))), end="")
    made = simulated(JobBuilder(JOB, STAND_IN), 1).backoff_limit(0).completes_after("10s")
    print(apply(made.annotations(DECLARED).build(), namespace=STAND_IN), end="")
    return STAND_IN


def _receipt(namespace: str, workload: str) -> dict[str, Any] | None:
    items: list[dict[str, Any]] = get("rcpt", "-n", namespace)["items"]
    mine = [r for r in items if r["spec"]["workload"]["name"] == workload]
    return mine[0] if mine else None


def _show(receipt: dict[str, Any]) -> None:
    spec = receipt["spec"]
    print(f"$ kubectl get rcpt -n {receipt['metadata']['namespace']} -o wide")
    print(kubectl("get", "rcpt", "-n", receipt["metadata"]["namespace"], "-o", "wide"), end="")
    e = spec.get("experiment") or {}
    print(f"RunReceipt {receipt['metadata']['name']}:")
    print(f"  params {json.dumps(e.get('params', {}), sort_keys=True)}")
    print(f"  dataVersion {e.get('dataVersion')}, codeVersion {e.get('codeVersion')}")
    print(f"  configHash {e.get('configHash')} ({e.get('configHashSource')})")
    result = spec.get("result")
    if result:
        best = f", best {result['best']:.4g}" if result.get("best") is not None else ""
        final = f"{result['metric']} final {result['final']:.4g}{best}"
        print(f"  result: {final} ({result['source']})")
    else:
        print("  result: none (no trainer state was scanned for this run)")
    held = spec.get("storage")
    if held and held.get("gibHours") is not None:
        print(
            f"  storage: {held['gibHours']:.6f} GiB-hours of {held['claims']} claim(s) it mounted"
        )


def _repeat(namespace: str, workload: str, receipt: str) -> None:
    again = f"{workload}-again"
    job = simulated(JobBuilder(again, namespace), 1).annotations(DECLARED).build()
    print(f"$ kubectl create --dry-run=server -f {again}.yaml   # the same experiment again")

    def warned() -> subprocess.CompletedProcess[str] | None:
        made = subprocess.run(
            [*KUBECTL, "create", "--dry-run=server", "-f", "-"],
            input=json.dumps(job),
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        return made if receipt in made.stderr else None

    # The webhook's cache hears of the receipt a moment after it is written.
    created = wait_for(warned, timeout=60, what=f"the webhook to name {receipt}")
    print(created.stderr + created.stdout, end="")


def _clean() -> None:
    kubectl("delete", "tb", BUDGET, "--ignore-not-found", "--wait=false")
    kubectl("delete", "namespace", STAND_IN, "--ignore-not-found", "--wait=false")
    wait_for(
        lambda: not kubectl("get", "namespace", STAND_IN, "--ignore-not-found").strip(),
        timeout=60,
        what=f"namespace {STAND_IN} gone",
    )
