"""`python e2e/demo` (`make demo`): every scene, in order."""

import sys
import time
from pathlib import Path

# Run as a directory, e2e/demo is first on the path (its modules would be top-level ones):
# e2e/ takes its place, which holds the harness and this package.
sys.path[0] = str(Path(__file__).resolve().parent.parent)

from demo import (  # noqa: E402
    budget,
    efficiency,
    idle,
    ledger,
    operators,
    policies,
    pruning,
    receipts,
    report,
    storage,
    trainer,
    volumes,
    workloads,
)
from demo.shell import kubectl, say  # noqa: E402
from harness import ROOT  # noqa: E402


def main() -> None:
    started = time.monotonic()
    say("Installing the trainwarden CRDs (generated from the pydantic models)")
    print(kubectl("apply", "--server-side", "--force-conflicts", "-f", str(ROOT / "crds")), end="")
    kubectl(
        "wait", "--for=condition=Established", "crd", "-l", "app.kubernetes.io/name=trainwarden"
    )
    say("Starting the operator (helm install on the real node, or trainwarden run locally)")
    operators.ensure_operator()
    workloads.show_nodes()
    workloads.clean_slate()
    pods = workloads.submit()
    policies.apply_samples()
    policies.apply_rejected()
    policies.report()
    workloads.show_utilization(pods)
    workloads.show_outcomes()
    budget.run()
    storage.run()
    volumes.run()
    idle.run()
    finished = trainer.run()
    if finished is not None:
        pruning.run(finished)
        receipts.run(finished)
    ledger.run(finished, trainer.JOB)
    efficiency.run()
    report.run(started)


if __name__ == "__main__":
    main()
