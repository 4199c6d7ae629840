"""Scene: a real training program (`trainwarden demo-trainer`) on the real node, suspended by
its budget (it writes a checkpoint on SIGTERM) and resumed from that checkpoint when the
limit is raised, without training a step twice. Needs the real node (root)."""

import json
import shutil
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import harness
from demo import ledger, pruning
from demo.shell import (
    ENV,
    KUBECTL,
    apply,
    budget_status,
    demo_policy,
    job_state,
    kubectl,
    pods_of,
    raise_limit,
    say,
    set_utilization,
)
from harness import CLUSTER_DIR, ROOT, read_env, wait_for
from trainwarden.testing.builders import NamespaceBuilder

NAMESPACE, BUDGET, JOB = "llm-real", "llm-real-gpu-daily", "llm-real-train"
MAX_STEPS = 150


@dataclass
class Run:
    """The trainer's run as the scene follows it."""

    node: str
    host_dir: Path = harness.PV_ROOT / NAMESPACE
    submitted: float = 0.0
    seen: list[int] = field(default_factory=list)

    @property
    def checkpoints(self) -> Path:
        """The PVC's /data/checkpoints, seen from the host."""
        return self.host_dir / "checkpoints"


def run() -> pruning.Finished | None:
    """The finished run, for the pruning scene; None without a real node."""
    say(
        "A real training program on the real node, suspended by its budget and resumed from "
        "its checkpoint"
    )
    node = ENV.get("REAL_NODE")
    if not node:
        print(
            "skipped: this cluster has no real node (it needs root for containerd, runc and "
            "kubelet); run `make demo` as root to see a real trainer suspended and resumed"
        )
        return None
    training = Run(node)
    clean_slate(training)
    image = import_image(node)
    volume(training)
    submit(training, image)
    first_pod, reached = suspended(training)
    resumed(training, first_pod, reached)
    return finished(training)


def clean_slate(training: Run) -> None:
    """A re-run starts from a clean slate (the budget first, so it acts on nothing meanwhile)."""
    kubectl("delete", "tb", BUDGET, "--ignore-not-found")
    kubectl("delete", "cpp", pruning.POLICY, "--ignore-not-found")
    kubectl("delete", "namespace", NAMESPACE, "--ignore-not-found", "--timeout=120s")
    kubectl("delete", "pv", f"{NAMESPACE}-checkpoints", "--ignore-not-found")
    shutil.rmtree(training.host_dir, ignore_errors=True)


def import_image(node: str) -> str:
    print("$ e2e/cluster/node/image.sh --import")
    started = time.monotonic()
    subprocess.run([str(ROOT / "e2e/cluster/node/image.sh"), "--import"], check=True, cwd=ROOT)
    image = read_env(CLUSTER_DIR / "images" / "images.env")["TRAINWARDEN_IMAGE"]
    print(f"image {image} in {node}'s containerd ({time.monotonic() - started:.1f}s)")
    return image


def volume(training: Run) -> None:
    """The namespace, and its PVC `checkpoints` bound to a hostPath PV on the real node."""
    apply(NamespaceBuilder(NAMESPACE).labels(team="research").build())
    pv, pvc = harness.hostpath_volume(NAMESPACE, training.host_dir)
    apply(pv)
    apply(pvc, namespace=NAMESPACE)
    wait_for(
        lambda: (
            json.loads(kubectl("get", "pvc", "-n", NAMESPACE, "checkpoints", "-o", "json"))
            .get("status", {})
            .get("phase")
            == "Bound"
        ),
        timeout=60,
        what="the PVC to bind to the hostPath PV",
    )
    print(
        f"namespace {NAMESPACE} (team=research), PVC checkpoints -> hostPath PV on "
        f"{training.node} ({training.host_dir.relative_to(ROOT)})"
    )


def submit(training: Run, image: str) -> None:
    """Its budget (18 GPU-seconds), the CheckpointPolicy, and the trainer's Job."""
    policy = harness.budget(BUDGET, NAMESPACE, 0.005).field("spec.efficiency.resolution", "10s")
    print(apply(demo_policy(policy)), end="")
    print(f"  Enforce, Daily, 0.005 GPU-hours (18 GPU-seconds) on {NAMESPACE}, gracePeriod 0s")
    print(apply(demo_policy(pruning.policy(NAMESPACE))), end="")
    print(
        "  Enforce: keep the newest 2 and the best by eval_loss while the job runs; once it "
        "finished, only the final and the best"
    )
    job = harness.trainer_job(
        JOB,
        image,
        labels={"team": "research", "project": "llm"},
        max_steps=MAX_STEPS,
        checkpoint_path="checkpoints:/checkpoints",
    )
    job["metadata"].setdefault("annotations", {}).update(ledger.DECLARED)  # the ledger scene's
    apply(job, namespace=NAMESPACE)
    training.submitted = time.monotonic()
    print(
        f"job {NAMESPACE}/{JOB}: trainwarden demo-trainer, 1 GPU, {MAX_STEPS} steps at 5 a second, "
        "a Hugging Face checkpoint every 20 steps"
    )


def running_pod(other_than: str = "") -> str | None:
    names = [
        p["metadata"]["name"]
        for p in pods_of(NAMESPACE, JOB)
        if p["status"].get("phase") == "Running"
        and not p["metadata"].get("deletionTimestamp")
        and p["metadata"]["name"] != other_than
    ]
    return names[0] if names else None


def busy(pod: str, training: Run) -> None:
    """The real node has no GPU: the DCGM stand-in reports the trainer's as 92 % busy, so
    its budget measures the run's effective GPU-hours like any other."""
    set_utilization(NAMESPACE, pod, 92.0, 1, training.node)


def suspended(training: Run) -> tuple[str, int]:
    """Follow the trainer until its budget suspends it; (its pod, the step it stopped at)."""
    first_pod = wait_for(running_pod, timeout=60, what="the trainer pod to run on the real node")
    print(
        f"pod {first_pod} running on {training.node} after "
        f"{time.monotonic() - training.submitted:.1f}s"
    )
    busy(first_pod, training)
    lines, follow, reader = follow_logs(first_pod)
    wait_for(lambda: _suspended(training), timeout=120, what=f"the budget to suspend {JOB}")
    status = budget_status(BUDGET)
    used = status["used"]["acceleratorHours"]
    print(
        f"{JOB}: {job_state(NAMESPACE, JOB)} after {time.monotonic() - training.submitted:.1f}s; "
        f"budget used {used:.4f} GPU-h ({used * 3600:.1f} GPU-seconds, {status['percent']:.0f} %)"
    )
    follow.wait(timeout=60)
    reader.join(timeout=10)
    events = [json.loads(line) for line in lines if line.startswith("{")]
    stopped = events[-1] if events else {}
    if stopped.get("event") != "stopped":
        raise SystemExit(f"the trainer did not stop on SIGTERM: {lines[-5:]}")
    reached = int(stopped["step"])
    print(f"$ kubectl logs -n {NAMESPACE} {first_pod} | tail -3   # the pod got SIGTERM")
    for line in lines[-3:]:
        print(f"  {line}")
    wait_for(
        lambda: not pods_of(NAMESPACE, JOB), timeout=60, what="the suspended Job's pod to go away"
    )
    on_disk = harness.checkpoint_steps(training.checkpoints)
    kind = "periodic" if reached % 20 == 0 else "written on SIGTERM"
    print(
        f"its GPU is free; checkpoints on disk {on_disk}: the last, checkpoint-{reached}, "
        f"{kind} at the step it stopped"
    )
    return first_pod, reached


def follow_logs(pod: str) -> tuple[list[str], "subprocess.Popen[str]", threading.Thread]:
    """The pod's output, through the API server and kubelet, until the container ends."""
    follow = subprocess.Popen(
        [*KUBECTL, "logs", "-f", "-n", NAMESPACE, pod], stdout=subprocess.PIPE, text=True
    )
    lines: list[str] = []

    def read() -> None:
        assert follow.stdout is not None
        lines.extend(line.rstrip("\n") for line in follow.stdout)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    return lines, follow, reader


def _suspended(training: Run) -> bool:
    """Whether the budget suspended the Job; meanwhile, each new checkpoint on the host."""
    for step in harness.checkpoint_steps(training.checkpoints):
        if step not in training.seen:
            training.seen.append(step)
            at = time.monotonic() - training.submitted
            print(f"  {at:5.1f}s  checkpoint-{step} on the host")
    return "suspended-by" in job_state(NAMESPACE, JOB)


def resumed(training: Run, first_pod: str, reached: int) -> None:
    say("Raising the limit to 10 GPU-hours: the budget resumes the Job it suspended")
    raise_limit(BUDGET, 10)
    raised = time.monotonic()
    wait_for(
        lambda: "suspended-by" not in job_state(NAMESPACE, JOB),
        timeout=60,
        what=f"the budget to resume {JOB}",
    )
    print(f"{JOB}: {job_state(NAMESPACE, JOB)} after {time.monotonic() - raised:.1f}s")
    second_pod = wait_for(
        lambda: running_pod(other_than=first_pod), timeout=60, what="a new trainer pod"
    )
    print(f"pod {second_pod} running on {training.node} after {time.monotonic() - raised:.1f}s")
    busy(second_pod, training)
    first_line = wait_for(
        lambda: kubectl("logs", "-n", NAMESPACE, second_pod).splitlines()[:1],
        timeout=60,
        what="the new pod's first log line",
    )[0]
    print(f"$ kubectl logs -n {NAMESPACE} {second_pod} | head -1")
    print(f"  {first_line}")
    resumed_at: dict[str, Any] = json.loads(first_line)
    if resumed_at.get("event") != "resumed" or resumed_at.get("step") != reached:
        raise SystemExit(f"expected to resume at step {reached}, got {first_line}")
    print(f"resumed at step {resumed_at['step']} == the step it stopped at: no step trained twice")


def finished(training: Run) -> pruning.Finished:
    """The Job complete, with the loss of every epoch in its history exactly once."""
    wait_for(
        lambda: (
            "Complete"
            in kubectl(
                "get", "job", "-n", NAMESPACE, JOB, "-o", "jsonpath={.status.conditions[*].type}"
            )
        ),
        timeout=120,
        what=f"{JOB} to finish its {MAX_STEPS} steps",
    )
    final = harness.trainer_state(training.checkpoints, MAX_STEPS)
    epochs = [e["step"] for e in final["log_history"] if "loss" in e]
    whole = epochs == list(range(5, MAX_STEPS + 1, 5))
    print(
        f"{JOB} Complete: global_step {final['global_step']}, checkpoints "
        f"{harness.checkpoint_steps(training.checkpoints)}; log_history has the loss of every "
        f"epoch (steps 5..{MAX_STEPS}) exactly once: {whole}; best eval_loss "
        f"{final['best_metric']:.3g}"
    )
    if not whole:
        raise SystemExit(f"the training history has gaps or repeats: {epochs}")
    return pruning.Finished(NAMESPACE, training.checkpoints, MAX_STEPS, final)
