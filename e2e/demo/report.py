"""Scene: what the operator exported about all of it (its Prometheus metrics), its last log
lines, and how to go on exploring the cluster it leaves running."""

import time
import urllib.request

from demo.operators import operator_log_tail
from demo.shell import KUBECTL, METRICS_PORT, say

METRICS = (
    "trainwarden_policy_ready",
    "trainwarden_budget_used_ratio",
    "trainwarden_actions_total",
    "trainwarden_idle_pods",
    "trainwarden_idle_reclaimed_accelerator_seconds_total",
    "trainwarden_budget_efficiency_accelerator_seconds",
    "trainwarden_overprovisioned",
)


def run(started: float) -> None:
    say(f"Operator metrics (http://127.0.0.1:{METRICS_PORT}/metrics)")
    with urllib.request.urlopen(f"http://127.0.0.1:{METRICS_PORT}/metrics", timeout=5) as response:
        for line in response.read().decode().splitlines():
            if line.startswith(METRICS):
                print(line)

    say("Last operator log lines (JSON, one object per line)")
    for line in operator_log_tail(5):
        print(line)

    say(f"Demo ready in {time.monotonic() - started:.0f}s. The cluster and operator keep running:")
    print(f"  {' '.join(KUBECTL)} get tb,irp,cpp,jobs -A")
    print("  make demo-down       # stop the demo's operator, keep the cluster")
    print("  make cluster-down    # stop everything and remove its state")
    print(
        "  make test            # runs alongside: the demo's operator governs only the "
        "policies labelled trainwarden.dev/instance=demo"
    )
