"""`make demo`: the local cluster, the operator, sample policies and simulated GPU training.

Runs against the cluster `make cluster` started, leaves everything running so you can
explore with `.cluster/bin/kubectl --kubeconfig .cluster/kubeconfig`, and prints what the
operator saw and did. `make cluster-down` stops it all.
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import harness
from harness import CLUSTER_DIR, ROOT, read_env, wait_for

ENV = read_env(CLUSTER_DIR / "cluster.env")
KUBECTL = [str(CLUSTER_DIR / "bin" / "kubectl"), "--kubeconfig", ENV["KUBECONFIG"]]
STATE = CLUSTER_DIR / "state"
OPERATOR_PID = STATE / "pids" / "operator.pid"
OPERATOR_LOG = STATE / "logs" / "operator.log"
# Shifted with the cluster's ports, so a second checkout can run its own demo alongside.
_OFFSET = int(os.environ.get("TRAINWARDEN_CLUSTER_PORT_OFFSET", "0"))
METRICS_PORT, HEALTH_PORT = 18080 + _OFFSET, 18081 + _OFFSET


def say(text: str) -> None:
    print(f"\n\033[1m==> {text}\033[0m", flush=True)


def kubectl(*args: str, stdin: str | None = None) -> str:
    result = subprocess.run(
        [*KUBECTL, *args], input=stdin, capture_output=True, text=True, check=True, timeout=60
    )
    return result.stdout


def show(*args: str) -> None:
    print(f"$ kubectl {' '.join(args)}")
    print(kubectl(*args), end="")


def operator_running() -> bool:
    """Whether the recorded pid is still our operator (not a zombie, not a reused pid)."""
    try:
        cmdline = Path(f"/proc/{int(OPERATOR_PID.read_text())}/cmdline").read_bytes()
    except (OSError, ValueError):
        return False
    return b"trainwarden" in cmdline and str(ROOT).encode() in cmdline


RELEASE, RELEASE_NAMESPACE = "trainwarden-demo", "trainwarden"
HELM = [str(CLUSTER_DIR / "bin" / "helm"), "--kubeconfig", ENV["KUBECONFIG"]]


def stop_local_operator() -> None:
    if operator_running():
        pid = int(OPERATOR_PID.read_text())
        os.kill(pid, signal.SIGTERM)
        print(f"stopped the operator an earlier demo ran as a local process (pid {pid})")
    OPERATOR_PID.unlink(missing_ok=True)


def install_with_helm() -> None:
    """The chart, as an admin installs it, running in the cluster on the real node.

    This cluster's API server listens on the host's loopback only, so the operator pod uses
    the host network and the in-cluster client is pointed at 127.0.0.1 (values the chart
    has for such clusters); everything else is the chart's defaults: its ServiceAccount and
    least-privilege role, leader election, restricted security context.
    """
    stop_local_operator()
    print("$ e2e/cluster/node/image.sh --import")
    subprocess.run([str(ROOT / "e2e/cluster/node/image.sh"), "--import"], check=True, cwd=ROOT)
    image = read_env(CLUSTER_DIR / "images" / "images.env")["TRAINWARDEN_IMAGE"]
    repository, tag = image.rsplit(":", 1)
    subprocess.run([str(ROOT / "e2e/cluster/helm.sh")], check=True, capture_output=True)
    label = harness.REAL_NODE_LABEL
    values = {
        "image": {"repository": repository, "tag": tag, "pullPolicy": "Never"},
        "nodeSelector": {label: "true"},
        "tolerations": [{"key": label, "operator": "Exists", "effect": "NoSchedule"}],
        "hostNetwork": True,
        "env": [
            {"name": "KUBERNETES_SERVICE_HOST", "value": "127.0.0.1"},
            {
                "name": "KUBERNETES_SERVICE_PORT",
                "value": ENV["KUBE_APISERVER_URL"].rsplit(":", 1)[1],
            },
        ],
        "operator": {
            "prometheusUrl": ENV["PROMETHEUS_URL"],
            "metricsPort": METRICS_PORT,
            "healthPort": HEALTH_PORT,
        },
        # The demo trainer writes its checkpoints as this uid: the pruner (never root) too.
        "pruner": {
            "runAsUser": harness.TRAINER_UID,
            "tolerations": [harness.REAL_NODE_TOLERATION],
        },
    }
    print(
        kubectl(
            "apply",
            "-f",
            "-",
            stdin=json.dumps(
                {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": RELEASE_NAMESPACE}}
            ),
        ),
        end="",
    )
    command = [
        "upgrade",
        "--install",
        RELEASE,
        str(ROOT / "helm" / "trainwarden"),
        "-n",
        RELEASE_NAMESPACE,
        "--wait",
        "--timeout",
        "180s",
        "-f",
        "-",
    ]
    print(f"$ helm {' '.join(command[:7])} -f <values: real node, {image}>")
    result = subprocess.run(
        [*HELM, *command], input=json.dumps(values), capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        print(kubectl("get", "pods", "-n", RELEASE_NAMESPACE, "-o", "wide"))
        raise SystemExit(f"helm install failed: {result.stderr.strip()}")
    print(
        "\n".join(
            line
            for line in result.stdout.splitlines()
            if line.startswith(("NAME", "STATUS", "REVISION"))
        )
    )

    def leading() -> str | None:
        with urllib.request.urlopen(f"http://127.0.0.1:{HEALTH_PORT}/healthz", timeout=2) as r:
            body = json.load(r)
        return "leading" if body.get("controllers") else None

    wait_for(leading, timeout=60, what="the in-cluster operator to lead")
    show("get", "pods", "-n", RELEASE_NAMESPACE, "-o", "wide")
    lease = json.loads(kubectl("get", "lease", "-n", RELEASE_NAMESPACE, RELEASE, "-o", "json"))
    account = f"system:serviceaccount:{RELEASE_NAMESPACE}:{RELEASE}"
    print(
        f"Lease {RELEASE_NAMESPACE}/{RELEASE} held by {lease['spec'].get('holderIdentity')}; "
        f"the operator acts as {account} (the chart's role, nothing more)"
    )


def ensure_operator() -> None:
    """On the real node the chart runs it in the cluster; without one (not root), a local
    `trainwarden run` process stands in."""
    if ENV.get("REAL_NODE"):
        install_with_helm()
        return
    if operator_running():
        print(f"operator already running (pid {OPERATOR_PID.read_text().strip()})")
        return
    running = harness.start_operator(
        Path(ENV["KUBECONFIG"]),
        OPERATOR_LOG,
        ports=(METRICS_PORT, HEALTH_PORT),
        detach=True,
        prometheus_url=ENV["PROMETHEUS_URL"],
    )
    OPERATOR_PID.parent.mkdir(parents=True, exist_ok=True)
    OPERATOR_PID.write_text(str(running.process.pid))
    pid = running.process.pid
    print(f"operator running (pid {pid}), logs in {OPERATOR_LOG.relative_to(ROOT)}")


def operator_log_tail(lines: int) -> list[str]:
    if ENV.get("REAL_NODE"):
        deployment = f"deployment/{RELEASE}"
        return kubectl("logs", "-n", RELEASE_NAMESPACE, deployment, f"--tail={lines}").splitlines()
    return OPERATOR_LOG.read_text().splitlines()[-lines:]


def training_job(name: str, labels: dict[str, str], gpus: int, lifetime: str | None) -> str:
    annotations = {"sim.trainwarden.dev/complete-after": lifetime} if lifetime else {}
    if name.endswith("-crash"):
        annotations = {"sim.trainwarden.dev/fail-after": "15s"}
    return json.dumps(harness.gpu_job(name, gpus, labels=labels, annotations=annotations))


def set_utilization(namespace: str, pod: str, value: float, gpus: int, node: str) -> None:
    body = json.dumps({"utilization": value, "gpus": gpus, "hostname": node}).encode()
    request = urllib.request.Request(
        f"{ENV['DCGM_EXPORTER_URL']}/gpus/{namespace}/{pod}", data=body, method="PUT"
    )
    urllib.request.urlopen(request, timeout=5).close()


def prometheus(query: str) -> list[dict[str, Any]]:
    url = f"{ENV['PROMETHEUS_URL']}/api/v1/query?" + urllib.parse.urlencode({"query": query})
    with urllib.request.urlopen(url, timeout=10) as response:
        result: list[dict[str, Any]] = json.load(response)["data"]["result"]
    return result


def budget_status(name: str) -> dict[str, Any]:
    status: dict[str, Any] = json.loads(kubectl("get", "tb", name, "-o", "json")).get("status", {})
    return status


def job_state(namespace: str, name: str) -> str:
    job = json.loads(kubectl("get", "job", "-n", namespace, name, "-o", "json"))
    labels = job["metadata"].get("labels", {})
    by = labels.get("trainwarden.dev/suspended-by")
    return f"suspend={job['spec'].get('suspend', False)}" + (f", suspended-by={by}" if by else "")


def enforce_budget() -> None:
    """A small Enforce budget on the research team: watch it warn, suspend, and resume."""
    name = "research-gpu-daily"
    budget = harness.budget_manifest(
        name,
        "research",
        0.1,
        thresholds={"warn": 60, "enforce": 100},
        enforcement={"gracePeriod": "0s", "order": ["LowestPriority", "Newest"]},
    )
    say(
        f"An Enforce budget of 0.1 GPU-hours a day for research ({name}); llm-finetune holds 8 GPUs"
    )
    print(kubectl("apply", "-f", "-", stdin=json.dumps(budget)), end="")
    wait_for(
        lambda: budget_status(name).get("percent") is not None, timeout=60, what="the budget status"
    )
    status = budget_status(name)
    burn = status["burnRatePerHour"]["acceleratorHours"]
    print(
        f"used {status['used']['acceleratorHours']:.4f} GPU-h ({status['percent']:.0f} %), "
        f"burning {burn:.0f} GPU-h/h, exhausted at {status.get('projectedExhaustion', 'never')}"
    )
    started = time.monotonic()
    wait_for(
        lambda: "suspended-by" in job_state("research", "llm-finetune"),
        timeout=120,
        what="the budget to suspend llm-finetune",
    )
    waited = time.monotonic() - started
    print(f"llm-finetune: {job_state('research', 'llm-finetune')} after {waited:.0f}s")
    wait_for(
        lambda: (
            not json.loads(
                kubectl(
                    "get", "pods", "-n", "research", "-l", "job-name=llm-finetune", "-o", "json"
                )
            )["items"]
        ),
        timeout=60,
        what="the Job controller to release the GPUs",
    )
    print("its pods are gone: the 8 GPUs are free")
    show("get", "tb", name)
    status = budget_status(name)
    for c in status["conditions"]:
        print(f"  {c['type']}={c['status']} ({c['reason']}) {c['message']}")
    for entry in status["suspended"]:
        ref = entry["ref"]
        print(f"  suspended {ref['kind']}/{ref['namespace']}/{ref['name']}: {entry['reason']}")
    events = kubectl(
        "get",
        "events",
        "-n",
        "research",
        "--field-selector",
        "involvedObject.name=llm-finetune",
        "-o",
        "custom-columns=REASON:.reason,MESSAGE:.message",
        "--no-headers",
    )
    print("  events on the Job: " + "; ".join(line.strip() for line in events.splitlines()[-2:]))

    say("Raising the limit to 10 GPU-hours: the budget resumes what it suspended, nothing else")
    kubectl(
        "patch", "tb", name, "--type=merge", "-p", '{"spec":{"limits":{"acceleratorHours":10}}}'
    )
    wait_for(
        lambda: "suspended-by" not in job_state("research", "llm-finetune"),
        timeout=60,
        what="the budget to resume llm-finetune",
    )
    print(f"llm-finetune: {job_state('research', 'llm-finetune')}")


def reclaim_idle() -> None:
    """vit-pretrain holds 8 GPUs at 3 % utilization: warn, then suspend it."""
    name = "vision-idle-gpus"
    policy = harness.idle_policy_manifest(name, "vision", action="Suspend")
    say(
        f"An Enforce IdleReclaimPolicy on vision ({name}): idle = every GPU below 5 % for 30s "
        "(demo scale; 30m in the sample), then 15s of grace"
    )
    print(kubectl("apply", "-f", "-", stdin=json.dumps(policy)), end="")

    def pod_of(job: str) -> dict[str, Any] | None:
        pods = json.loads(
            kubectl("get", "pods", "-n", "vision", "-l", f"job-name={job}", "-o", "json")
        )
        return pods["items"][0] if pods["items"] else None

    warned = wait_for(
        lambda: (
            (p := pod_of("vit-pretrain"))
            and "trainwarden.dev/idle-warned-at" in p["metadata"].get("annotations", {})
            and p
        ),
        timeout=120,
        what="the idle warning on vit-pretrain",
    )
    marks = {
        k: v
        for k, v in warned["metadata"]["annotations"].items()
        if k.startswith("trainwarden.dev/")
    }
    print(f"pod {warned['metadata']['name']} warned: {marks}")
    events = kubectl(
        "get",
        "events",
        "-n",
        "vision",
        "--field-selector",
        f"involvedObject.name={warned['metadata']['name']},reason=IdleAccelerators",
        "-o",
        "custom-columns=MESSAGE:.message",
        "--no-headers",
    )
    print("  event: " + events.strip().splitlines()[-1])
    wait_for(
        lambda: json.loads(kubectl("get", "job", "-n", "vision", "vit-pretrain", "-o", "json"))[
            "spec"
        ].get("suspend"),
        timeout=90,
        what="the policy to suspend vit-pretrain",
    )
    job = json.loads(kubectl("get", "job", "-n", "vision", "vit-pretrain", "-o", "json"))
    print(
        "vit-pretrain suspended: "
        + job["metadata"]["annotations"]["trainwarden.dev/reclaim-reason"]
    )
    print("resnet-sweep-a (87 % busy) was never warned; no budget may resume vit-pretrain")
    wait_for(
        lambda: json.loads(kubectl("get", "irp", name, "-o", "json"))["status"].get("actionsTaken"),
        timeout=30,
        what="the reclaim in status",
    )
    show("get", "irp")
    status = json.loads(kubectl("get", "irp", name, "-o", "json"))["status"]
    print(
        f"  watched {status['podsWatched']}, reclaimed {status['actionsTaken']} "
        f"(~{status['acceleratorHoursReclaimed']:.1f} GPU-hours freed, estimated up to "
        "the policy's 1h horizon)"
    )


def real_training() -> None:
    """A real training program on the real node, suspended by its budget, resumed from its
    checkpoint without losing work."""
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
        return
    namespace, name, job = "llm-real", "llm-real-gpu-daily", "llm-real-train"
    host_dir = harness.PV_ROOT / namespace
    checkpoints = host_dir / "checkpoints"  # the PVC's /data/checkpoints, seen from the host
    max_steps = 150

    # A re-run starts from a clean slate (the budget first, so it acts on nothing meanwhile).
    kubectl("delete", "tb", name, "--ignore-not-found")
    kubectl("delete", "cpp", CHECKPOINT_POLICY, "--ignore-not-found")
    kubectl("delete", "namespace", namespace, "--ignore-not-found", "--timeout=120s")
    kubectl("delete", "pv", f"{namespace}-checkpoints", "--ignore-not-found")
    shutil.rmtree(host_dir, ignore_errors=True)

    print("$ e2e/cluster/node/image.sh --import")
    started = time.monotonic()
    subprocess.run([str(ROOT / "e2e/cluster/node/image.sh"), "--import"], check=True, cwd=ROOT)
    image = read_env(CLUSTER_DIR / "images" / "images.env")["TRAINWARDEN_IMAGE"]
    print(f"image {image} in {node}'s containerd ({time.monotonic() - started:.1f}s)")

    namespace_manifest = {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": namespace, "labels": {"team": "research"}},
    }
    kubectl("apply", "-f", "-", stdin=json.dumps(namespace_manifest))
    pv, pvc = harness.hostpath_volume(namespace, host_dir)
    kubectl("apply", "-f", "-", stdin=json.dumps(pv))
    kubectl("apply", "-n", namespace, "-f", "-", stdin=json.dumps(pvc))
    wait_for(
        lambda: (
            json.loads(kubectl("get", "pvc", "-n", namespace, "checkpoints", "-o", "json"))
            .get("status", {})
            .get("phase")
            == "Bound"
        ),
        timeout=60,
        what="the PVC to bind to the hostPath PV",
    )
    print(
        f"namespace {namespace} (team=research), PVC checkpoints -> hostPath PV on {node} "
        f"({host_dir.relative_to(ROOT)})"
    )
    budget = harness.budget_manifest(name, namespace, 0.005)
    print(kubectl("apply", "-f", "-", stdin=json.dumps(budget)), end="")
    print(f"  Enforce, Daily, 0.005 GPU-hours (18 GPU-seconds) on {namespace}, gracePeriod 0s")
    print(kubectl("apply", "-f", "-", stdin=json.dumps(checkpoint_policy(namespace))), end="")
    print(
        "  Enforce: keep the newest 2 and the best by eval_loss while the job runs; once it "
        "finished, only the final and the best"
    )
    manifest = harness.trainer_job(
        job, image, labels={"team": "research", "project": "llm"}, max_steps=max_steps
    )
    manifest["metadata"]["annotations"] = {
        "trainwarden.dev/checkpoint-path": "checkpoints:/checkpoints"
    }
    kubectl("apply", "-n", namespace, "-f", "-", stdin=json.dumps(manifest))
    submitted = time.monotonic()
    print(
        f"job {namespace}/{job}: trainwarden demo-trainer, 1 GPU, {max_steps} steps at 5 a second, "
        "a Hugging Face checkpoint every 20 steps"
    )

    def running_pod(other_than: str = "") -> str | None:
        pods = json.loads(
            kubectl("get", "pods", "-n", namespace, "-l", f"job-name={job}", "-o", "json")
        )["items"]
        names = [
            p["metadata"]["name"]
            for p in pods
            if p["status"].get("phase") == "Running"
            and not p["metadata"].get("deletionTimestamp")
            and p["metadata"]["name"] != other_than
        ]
        return names[0] if names else None

    first_pod = wait_for(running_pod, timeout=60, what="the trainer pod to run on the real node")
    print(f"pod {first_pod} running on {node} after {time.monotonic() - submitted:.1f}s")
    # Its output, through the API server and kubelet, until the container ends.
    follow = subprocess.Popen(
        [*KUBECTL, "logs", "-f", "-n", namespace, first_pod], stdout=subprocess.PIPE, text=True
    )
    lines: list[str] = []

    def read() -> None:
        assert follow.stdout is not None
        lines.extend(line.rstrip("\n") for line in follow.stdout)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()

    seen: list[int] = []

    def suspended() -> bool:
        for step in harness.checkpoint_steps(checkpoints):
            if step not in seen:
                seen.append(step)
                at = time.monotonic() - submitted
                print(f"  {at:5.1f}s  checkpoint-{step} on the host")
        return "suspended-by" in job_state(namespace, job)

    wait_for(suspended, timeout=120, what=f"the budget to suspend {job}")
    status = budget_status(name)
    used = status["used"]["acceleratorHours"]
    print(
        f"{job}: {job_state(namespace, job)} after {time.monotonic() - submitted:.1f}s; "
        f"budget used {used:.4f} GPU-h ({used * 3600:.1f} GPU-seconds, {status['percent']:.0f} %)"
    )
    follow.wait(timeout=60)
    reader.join(timeout=10)
    events = [json.loads(line) for line in lines if line.startswith("{")]
    stopped = events[-1] if events else {}
    if stopped.get("event") != "stopped":
        raise SystemExit(f"the trainer did not stop on SIGTERM: {lines[-5:]}")
    reached = int(stopped["step"])
    print(f"$ kubectl logs -n {namespace} {first_pod} | tail -3   # the pod got SIGTERM")
    for line in lines[-3:]:
        print(f"  {line}")
    wait_for(
        lambda: (
            not json.loads(
                kubectl("get", "pods", "-n", namespace, "-l", f"job-name={job}", "-o", "json")
            )["items"]
        ),
        timeout=60,
        what="the suspended Job's pod to go away",
    )
    on_disk = harness.checkpoint_steps(checkpoints)
    kind = "periodic" if reached % 20 == 0 else "written on SIGTERM"
    print(
        f"its GPU is free; checkpoints on disk {on_disk}: the last, checkpoint-{reached}, "
        f"{kind} at the step it stopped"
    )

    say("Raising the limit to 10 GPU-hours: the budget resumes the Job it suspended")
    kubectl(
        "patch", "tb", name, "--type=merge", "-p", '{"spec":{"limits":{"acceleratorHours":10}}}'
    )
    raised = time.monotonic()
    wait_for(
        lambda: "suspended-by" not in job_state(namespace, job),
        timeout=60,
        what=f"the budget to resume {job}",
    )
    print(f"{job}: {job_state(namespace, job)} after {time.monotonic() - raised:.1f}s")
    second_pod = wait_for(
        lambda: running_pod(other_than=first_pod), timeout=60, what="a new trainer pod"
    )
    print(f"pod {second_pod} running on {node} after {time.monotonic() - raised:.1f}s")
    first_line = wait_for(
        lambda: kubectl("logs", "-n", namespace, second_pod).splitlines()[:1],
        timeout=60,
        what="the new pod's first log line",
    )[0]
    print(f"$ kubectl logs -n {namespace} {second_pod} | head -1")
    print(f"  {first_line}")
    resumed = json.loads(first_line)
    if resumed.get("event") != "resumed" or resumed.get("step") != reached:
        raise SystemExit(f"expected to resume at step {reached}, got {first_line}")
    print(f"resumed at step {resumed['step']} == the step it stopped at: no step trained twice")
    wait_for(
        lambda: (
            "Complete"
            in kubectl(
                "get", "job", "-n", namespace, job, "-o", "jsonpath={.status.conditions[*].type}"
            )
        ),
        timeout=120,
        what=f"{job} to finish its {max_steps} steps",
    )
    final = harness.trainer_state(checkpoints, max_steps)
    epochs = [e["step"] for e in final["log_history"] if "loss" in e]
    whole = epochs == list(range(5, max_steps + 1, 5))
    print(
        f"{job} Complete: global_step {final['global_step']}, checkpoints "
        f"{harness.checkpoint_steps(checkpoints)}; log_history has the loss of every epoch "
        f"(steps 5..{max_steps}) exactly once: {whole}; best eval_loss {final['best_metric']:.3g}"
    )
    if not whole:
        raise SystemExit(f"the training history has gaps or repeats: {epochs}")
    pruned_after_finish(namespace, checkpoints, max_steps, final)


CHECKPOINT_POLICY = "llm-real-checkpoints"


def checkpoint_policy(namespace: str) -> dict[str, Any]:
    best = {"metric": "eval_loss", "order": "Min"}
    return {
        "apiVersion": "trainwarden.dev/v1alpha1",
        "kind": "CheckpointPolicy",
        "metadata": {"name": CHECKPOINT_POLICY},
        "spec": {
            "mode": "Enforce",
            "scope": {"namespaces": [namespace]},
            "storage": {"pvc": {}},
            "layout": {"type": "HuggingFace"},
            "retention": {"keepLast": 2, "keepBest": best, "minAge": "5s"},
            "afterCompletion": {"keepLast": 1, "keepBest": best, "delay": "1s"},
            "schedule": {"interval": "15s"},
        },
    }


def pruned_after_finish(
    namespace: str, checkpoints: Path, max_steps: int, final: dict[str, Any]
) -> None:
    say("The CheckpointPolicy prunes the finished run down to its final and best checkpoints")
    best = int(Path(final["best_model_checkpoint"]).name.split("-")[1])
    wanted = {max_steps, best}

    def pruned() -> dict[str, Any] | None:
        status = json.loads(kubectl("get", "cpp", CHECKPOINT_POLICY, "-o", "json")).get("status")
        where = ((status or {}).get("locations") or [{}])[0]
        # The report of the run that left exactly the final and the best: recorded.
        done = where.get("jobState") == "Finished" and where.get("kept") == len(wanted)
        return status if done and set(harness.checkpoint_steps(checkpoints)) == wanted else None

    status = wait_for(pruned, timeout=120, what="the pruner to apply afterCompletion")
    where = status["locations"][0]
    print(
        f"on disk now: {harness.checkpoint_steps(checkpoints)} (the final, checkpoint-{max_steps}, "
        f"and the trainer's own best_model_checkpoint, checkpoint-{best}); freed "
        f"{status['bytesFreed']} bytes in all, last run by pruner Job {where['lastJob']}"
    )
    show("get", "cpp", CHECKPOINT_POLICY)
    events = json.loads(
        kubectl(
            "get", "events", "-n", namespace, "--field-selector",
            "involvedObject.name=checkpoints,reason=CheckpointsPruned", "-o", "json",
        )
    )["items"]  # fmt: skip
    for event in events[-2:]:
        print(f"Event {event['reason']} on PVC {namespace}/checkpoints: {event['message']}")
    annotations = json.loads(kubectl("get", "pvc", "-n", namespace, "checkpoints", "-o", "json"))[
        "metadata"
    ].get("annotations", {})
    print(
        f"PVC annotation trainwarden.dev/pruned-by: {annotations.get('trainwarden.dev/pruned-by')}"
    )


def main() -> None:
    started = time.monotonic()
    say("Installing the trainwarden CRDs (generated from the pydantic models)")
    print(kubectl("apply", "--server-side", "--force-conflicts", "-f", str(ROOT / "crds")), end="")
    kubectl(
        "wait", "--for=condition=Established", "crd", "-l", "app.kubernetes.io/name=trainwarden"
    )

    say("Starting the operator (helm install on the real node, or trainwarden run locally)")
    ensure_operator()

    say("Simulated GPU nodes (kwok) with their accelerators")
    show("get", "nodes", "-L", "nvidia.com/gpu.product", "-L", "nvidia.com/gpu.count")

    # A re-run starts from a clean slate: what an earlier run left would change the story.
    kubectl("delete", "tb", "research-gpu-daily", "--ignore-not-found")
    kubectl("delete", "irp", "vision-idle-gpus", "--ignore-not-found")
    kubectl("delete", "namespace", "vision", "research", "--ignore-not-found", "--timeout=120s")

    say("Submitting simulated training jobs for the vision and research teams")
    for namespace, team in (("vision", "vision"), ("research", "research")):
        kubectl(
            "apply",
            "-f",
            "-",
            stdin=json.dumps(
                {
                    "apiVersion": "v1",
                    "kind": "Namespace",
                    "metadata": {"name": namespace, "labels": {"team": team}},
                }
            ),
        )
    jobs = [
        (
            "vision",
            "resnet-sweep-a",
            {"team": "vision", "project": "resnet", "experiment": "a"},
            4,
            "40s",
        ),
        (
            "vision",
            "vit-pretrain",
            {"team": "vision", "project": "vit", "experiment": "base"},
            8,
            None,
        ),
        (
            "vision",
            "vit-crash",
            {"team": "vision", "project": "vit", "experiment": "lr-hi"},
            2,
            None,
        ),
        (
            "research",
            "llm-finetune",
            {"team": "research", "project": "llm", "trainwarden.dev/budget": "research-weekly"},
            8,
            None,
        ),
    ]
    for namespace, name, labels, gpus, lifetime in jobs:
        kubectl(
            "apply", "-n", namespace, "-f", "-", stdin=training_job(name, labels, gpus, lifetime)
        )
        print(
            f"job {namespace}/{name}: {gpus} GPU(s), "
            + (
                f"completes after {lifetime}"
                if lifetime
                else "fails after 15s"
                if name.endswith("crash")
                else "runs until stopped"
            )
        )

    def all_running() -> list[dict[str, Any]] | None:
        pods = json.loads(kubectl("get", "pods", "-A", "-l", "team", "-o", "json"))["items"]
        placed = [p for p in pods if p["status"].get("phase") in ("Running", "Succeeded", "Failed")]
        return pods if len(placed) >= len(jobs) else None

    pods = wait_for(all_running, timeout=90, what="the training pods to start")
    for pod in pods:
        busy = 3.0 if pod["metadata"]["name"].startswith("vit-pretrain") else 87.0
        gpus = int(pod["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"])
        set_utilization(
            pod["metadata"]["namespace"],
            pod["metadata"]["name"],
            busy,
            gpus,
            pod["spec"]["nodeName"],
        )
    show("get", "pods", "-A", "-l", "team", "-o", "wide")

    say(
        "Applying the sample policies (crds/samples/) and one with a mistake only the operator sees"
    )
    print(kubectl("apply", "-f", str(ROOT / "crds" / "samples")), end="")
    broken = {
        "apiVersion": "trainwarden.dev/v1alpha1",
        "kind": "TrainingBudget",
        "metadata": {"name": "typo-in-timezone"},
        "spec": {
            "scope": {"namespaces": ["research"]},
            "limits": {"acceleratorHours": 50},
            "period": {"type": "Daily", "timeZone": "Europe/Pariss"},
        },
    }
    print(kubectl("apply", "-f", "-", stdin=json.dumps(broken)), end="")

    say("A policy the API server rejects outright (negative limit, unknown period)")
    bad = json.loads(json.dumps(broken))
    bad["metadata"]["name"] = "rejected"
    bad["spec"]["limits"]["acceleratorHours"] = -10
    bad["spec"]["period"] = {"type": "Fortnightly"}
    result = subprocess.run(
        [*KUBECTL, "apply", "-f", "-"],
        input=json.dumps(bad),
        capture_output=True,
        text=True,
        check=False,
    )
    print(result.stderr.strip())

    def conditions_written() -> bool:
        objs = json.loads(kubectl("get", "tb,irp,cpp", "-o", "json"))["items"]
        return all(o.get("status", {}).get("conditions") for o in objs)

    wait_for(conditions_written, timeout=60, what="the operator to report on every policy")

    say("What the operator reports on each policy")
    show("get", "tb,irp,cpp")
    objs = json.loads(kubectl("get", "tb,irp,cpp", "-o", "json"))["items"]
    for obj in objs:
        for c in obj["status"]["conditions"]:
            name = f"{obj['kind']}/{obj['metadata']['name']}"
            print(f"{name}: {c['type']}={c['status']} ({c['reason']}) {c['message']}")

    say("Accelerator utilization per pod, from the real Prometheus (DCGM_FI_DEV_GPU_UTIL)")
    query = 'avg by (namespace, pod) (DCGM_FI_DEV_GPU_UTIL{namespace=~"vision|research"})'
    wait_for(lambda: len(prometheus(query)) >= len(pods), timeout=60, what="a utilization scrape")
    for series in prometheus(query):
        m = series["metric"]
        print(f"{m['namespace']}/{m['pod']}: {float(series['value'][1]):.0f} %")

    say("Job outcomes as the Job controller sees them")
    wait_for(lambda: "Failed" in kubectl("get", "jobs", "-A"), timeout=60, what="vit-crash to fail")
    show("get", "jobs", "-A")

    enforce_budget()
    reclaim_idle()
    real_training()

    say(f"Operator metrics (http://127.0.0.1:{METRICS_PORT}/metrics)")
    with urllib.request.urlopen(f"http://127.0.0.1:{METRICS_PORT}/metrics", timeout=5) as response:
        for line in response.read().decode().splitlines():
            if line.startswith(
                (
                    "trainwarden_policy_ready",
                    "trainwarden_budget_used_percent",
                    "trainwarden_actions_total",
                    "trainwarden_idle_pods",
                    "trainwarden_idle_accelerator_hours_reclaimed_total",
                )
            ):
                print(line)

    say("Last operator log lines (JSON, one object per line)")
    for line in operator_log_tail(5):
        print(line)

    say(f"Demo ready in {time.monotonic() - started:.0f}s. The cluster and operator keep running:")
    print(f"  {' '.join(KUBECTL)} get tb,irp,cpp,jobs -A")
    print("  make demo-down       # stop the demo's operator, keep the cluster")
    print("  make cluster-down    # stop everything and remove its state")


if __name__ == "__main__":
    main()
