"""Scene: a small Enforce budget on the research team warns, suspends llm-finetune (its 8
GPUs freed), and resumes it, and only it, when the limit is raised."""

import time

from demo.shell import (
    apply,
    budget_status,
    demo_policy,
    get,
    job_state,
    kubectl,
    pods_of,
    raise_limit,
    say,
    show,
)
from harness import budget, wait_for

NAME = "research-gpu-daily"
SUSPEND_REASON = "trainwarden.dev/suspend-reason"
JOB = "llm-finetune"


def run() -> None:
    say(f"An Enforce budget of 0.1 GPU-hours a day for research ({NAME}); {JOB} holds 8 GPUs")
    policy = (
        budget(NAME, "research", 0.1)
        .thresholds(warn=60, enforce=100)
        .order("LowestPriority", "Newest")
    )
    print(apply(demo_policy(policy)), end="")
    wait_for(
        lambda: budget_status(NAME).get("percent") is not None,
        timeout=60,
        what="the budget status",
    )
    status = budget_status(NAME)
    burn = status["burnRatePerHour"]["acceleratorHours"]
    print(
        f"used {status['used']['acceleratorHours']:.4f} GPU-h ({status['percent']:.0f} %), "
        f"burning {burn:.0f} GPU-h/h, exhausted at {status.get('projectedExhaustion', 'never')}"
    )
    suspended()
    resumed()


def suspended() -> None:
    started = time.monotonic()
    wait_for(
        lambda: "suspended-by" in job_state("research", JOB),
        timeout=120,
        what=f"the budget to suspend {JOB}",
    )
    waited = time.monotonic() - started
    print(f"{JOB}: {job_state('research', JOB)} after {waited:.0f}s")
    wait_for(
        lambda: not pods_of("research", JOB),
        timeout=60,
        what="the Job controller to release the GPUs",
    )
    print("its pods are gone: the 8 GPUs are free")
    show("get", "tb", NAME)
    status = budget_status(NAME)
    for c in status["conditions"]:
        print(f"  {c['type']}={c['status']} ({c['reason']}) {c['message']}")
    for entry in status["suspended"]:
        # The budget's record names the workload; the reason is on the workload itself.
        ref = entry["ref"]
        workload = get(ref["kind"].lower(), "-n", ref["namespace"], ref["name"])
        reason = workload["metadata"].get("annotations", {}).get(SUSPEND_REASON)
        print(f"  suspended {ref['kind']}/{ref['namespace']}/{ref['name']}: {reason}")
    events = kubectl(
        "get",
        "events",
        "-n",
        "research",
        "--field-selector",
        f"involvedObject.name={JOB}",
        "-o",
        "custom-columns=REASON:.reason,MESSAGE:.message",
        "--no-headers",
    )
    print("  events on the Job: " + "; ".join(line.strip() for line in events.splitlines()[-2:]))


def resumed() -> None:
    say("Raising the limit to 10 GPU-hours: the budget resumes what it suspended, nothing else")
    raise_limit(NAME, 10)
    wait_for(
        lambda: "suspended-by" not in job_state("research", JOB),
        timeout=60,
        what=f"the budget to resume {JOB}",
    )
    print(f"{JOB}: {job_state('research', JOB)}")
