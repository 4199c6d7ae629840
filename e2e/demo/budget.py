"""Scene: a small Enforce budget on the research team warns, suspends llm-finetune (its 8
GPUs freed), holds the retry a pipeline submits (created suspended, with the reason
`kubectl create` prints), and, when the limit is raised, resumes what it suspended and
starts what it held, and nothing else."""

import json
import subprocess
import time

from demo.shell import (
    ENV,
    KUBECTL,
    STATE,
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
from demo.workloads import TrainingJob
from harness import ROOT, budget, wait_for

NAME = "research-gpu-daily"
SUSPEND_REASON = "trainwarden.dev/suspend-reason"
JOB = "llm-finetune"
RETRY = TrainingJob("research", "llm-finetune-retry", {"team": "research", "project": "llm"}, 8)
HELD_BY = "trainwarden.dev/held-by"


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
    held()
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
    events = _events(JOB)
    print("  events on the Job: " + "; ".join(line.strip() for line in events.splitlines()[-2:]))


def held() -> None:
    say(f"A pipeline resubmits {RETRY.name}: new work of the exhausted budget is held")
    manifest = RETRY.manifest()
    manifest["metadata"]["namespace"] = RETRY.namespace
    manifest["metadata"].setdefault("annotations", {})["trainwarden.dev/expected-duration"] = "30m"
    path = STATE / "demo" / f"{RETRY.name}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(manifest, indent=2))
    estimate = [str(ROOT / ".venv" / "bin" / "trainwarden"), "estimate", "-f", str(path)]
    print(f"$ trainwarden estimate -f {path.name}")
    env = {"KUBECONFIG": ENV["KUBECONFIG"], "PATH": "/usr/bin:/bin"}
    out = subprocess.run(estimate, capture_output=True, text=True, env=env, timeout=60)
    print(out.stdout, end="")
    print(f"$ kubectl create -f {path.name}")
    created = subprocess.run(
        [*KUBECTL, "create", "-f", str(path)], capture_output=True, text=True, timeout=60
    )
    print(created.stderr + created.stdout, end="")
    job = get("job", "-n", RETRY.namespace, RETRY.name)
    print(
        f"{RETRY.name}: suspend={job['spec'].get('suspend')}, "
        f"{HELD_BY}={job['metadata'].get('annotations', {}).get(HELD_BY)}, "
        f"{len(pods_of(RETRY.namespace, RETRY.name))} pods"
    )
    wait_for(
        lambda: "HeldByBudget" in _events(RETRY.name),
        timeout=60,
        what=f"the HeldByBudget Event on {RETRY.name}",
    )
    print(f"  events on the Job: {_events(RETRY.name).splitlines()[-1].strip()}")
    hold = budget_status(NAME)["admission"]
    print(
        f"  the budget's status.admission: holding until {hold['holdUntil']}, {hold['held']} held"
    )


def _events(job: str) -> str:
    return kubectl(
        "get", "events", "-n", "research", "--field-selector", f"involvedObject.name={job}",
        "-o", "custom-columns=REASON:.reason,MESSAGE:.message", "--no-headers",
    )  # fmt: skip


def resumed() -> None:
    say(
        "Raising the limit to 10 GPU-hours: the budget resumes what it suspended and starts "
        "what it held, nothing else"
    )
    raise_limit(NAME, 10)
    wait_for(
        lambda: "suspended-by" not in job_state("research", JOB),
        timeout=60,
        what=f"the budget to resume {JOB}",
    )
    print(f"{JOB}: {job_state('research', JOB)}")
    wait_for(
        lambda: pods_of(RETRY.namespace, RETRY.name),
        timeout=60,
        what=f"the budget to start {RETRY.name}",
    )
    print(f"{RETRY.name}: {job_state('research', RETRY.name)}, its pod created")
