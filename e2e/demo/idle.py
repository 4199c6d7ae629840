"""Scene: vit-pretrain holds 8 GPUs at 3 % utilization; an Enforce IdleReclaimPolicy warns
its pod, then suspends the Job. resnet-sweep-a, 87 % busy, is never warned. detr-finetune
keeps 2 of its 4 GPUs busy: the policy recommends requesting 2, and changes nothing."""

from typing import Any

from demo.shell import OURS, apply, demo_policy, get, kubectl, pods_of, say, show
from demo.workloads import IDLE_JOB, OVERSIZED_JOB
from harness import idle_policy, wait_for

NAME = "vision-idle-gpus"
WARNED_AT = "trainwarden.dev/idle-warned-at"


def run() -> None:
    say(
        f"An Enforce IdleReclaimPolicy on vision ({NAME}): idle = every GPU below 5 % for 30s "
        "(demo scale; 30m in the sample), then 15s of grace"
    )
    policy = idle_policy(NAME, "vision").action("Suspend").rightsizing(window="1m")
    print(apply(demo_policy(policy)), end="")
    warned()
    reclaimed()
    rightsized()


def _warned_pod() -> dict[str, Any] | None:
    pods = pods_of("vision", IDLE_JOB)
    pod = pods[0] if pods else None
    if pod is None or WARNED_AT not in pod["metadata"].get("annotations", {}):
        return None
    return pod


def warned() -> None:
    pod = wait_for(_warned_pod, timeout=120, what=f"the idle warning on {IDLE_JOB}")
    name = pod["metadata"]["name"]
    marks = {
        k: v for k, v in pod["metadata"]["annotations"].items() if k.startswith("trainwarden.dev/")
    }
    print(f"pod {name} warned: {marks}")
    events = kubectl(
        "get",
        "events",
        "-n",
        "vision",
        "--field-selector",
        f"involvedObject.name={name},reason=IdleAccelerators",
        "-o",
        "custom-columns=MESSAGE:.message",
        "--no-headers",
    )
    print("  event: " + events.strip().splitlines()[-1])


def reclaimed() -> None:
    wait_for(
        lambda: get("job", "-n", "vision", IDLE_JOB)["spec"].get("suspend"),
        timeout=90,
        what=f"the policy to suspend {IDLE_JOB}",
    )
    job = get("job", "-n", "vision", IDLE_JOB)
    print(
        f"{IDLE_JOB} suspended: " + job["metadata"]["annotations"]["trainwarden.dev/reclaim-reason"]
    )
    print(f"resnet-sweep-a (87 % busy) was never warned; no budget may resume {IDLE_JOB}")
    wait_for(
        lambda: get("irp", NAME)["status"].get("actionsTaken"),
        timeout=30,
        what="the reclaim in status",
    )
    show("get", "irp", "-l", OURS)
    status = get("irp", NAME)["status"]
    print(
        f"  watched {status['podsWatched']}, reclaimed {status['actionsTaken']} "
        f"(~{status['acceleratorHoursReclaimed']:.1f} GPU-hours freed, estimated up to "
        "the policy's 1h horizon)"
    )


def rightsized() -> None:
    say(f"{OVERSIZED_JOB} holds 4 GPUs and keeps 2 busy: a recommendation, never a change")

    def told() -> str | None:
        found = [o for o in get("irp", NAME)["status"].get("overProvisioned", [])]
        return next((o["message"] for o in found if o["name"] == OVERSIZED_JOB), None)

    message = wait_for(told, timeout=120, what=f"the recommendation for {OVERSIZED_JOB}")
    print(f"status.overProvisioned: {message}")
    events = kubectl(
        "get",
        "events",
        "-n",
        "vision",
        "--field-selector",
        f"involvedObject.name={OVERSIZED_JOB},reason=OverProvisioned",
        "-o",
        "custom-columns=KIND:.involvedObject.kind,MESSAGE:.message",
        "--no-headers",
    )
    print("  event: " + events.strip().splitlines()[-1])
    job = get("job", "-n", "vision", OVERSIZED_JOB)
    gpus = job["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]
    print(f"  {OVERSIZED_JOB} still requests {gpus['nvidia.com/gpu']} GPUs and runs")
