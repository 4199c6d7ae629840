"""Starting the demo's operator as instance `demo`: the Helm chart on the real node, or a
local `trainwarden run` process where the cluster has none.

Either way it runs with --instance=demo, so it governs only the policies labelled
trainwarden.dev/instance=demo (the ones the demo applies) and none of the e2e tests'; their
operators (no --instance) leave the demo's alone. `make test` may run while it does.
"""

import json
import os
import signal
import subprocess
import urllib.request
from pathlib import Path
from typing import Any

import harness
from demo.shell import (
    ENV,
    HEALTH_PORT,
    METRICS_PORT,
    OPERATOR_LOG,
    WEBHOOK_PORT,
    WEBHOOK_URL,
    apply,
    get,
    kubectl,
    show,
)
from harness import (
    CLUSTER_DIR,
    DEMO_INSTANCE,
    DEMO_OPERATOR_PID,
    KUBE_VERSION,
    ROOT,
    read_env,
    wait_for,
)
from trainwarden.testing.builders import NamespaceBuilder

RELEASE, RELEASE_NAMESPACE = harness.DEMO_RELEASE, harness.DEMO_NAMESPACE
LOCAL = f"{RELEASE}-local"
"""The chart's webhook objects for the local process: named apart from the release's, so
that a later `helm install` on the real node never finds them in its way."""
HELM = [str(CLUSTER_DIR / "bin" / "helm"), "--kubeconfig", ENV["KUBECONFIG"]]


def ensure_operator() -> None:
    """On the real node the chart runs it in the cluster; without one (not root), a local
    `trainwarden run` process stands in."""
    if ENV.get("REAL_NODE"):
        install_with_helm()
        return
    args = (f"--instance={DEMO_INSTANCE}", "--volume-reclaim", *local_webhook())
    pid = harness.demo_process()
    if pid is not None and _runs_with(pid, args):
        print(f"operator already running (pid {pid})")
        return
    stop_local_operator()  # one an earlier demo started with other flags
    running = harness.start_operator(
        Path(ENV["KUBECONFIG"]),
        OPERATOR_LOG,
        ports=(METRICS_PORT, HEALTH_PORT),
        detach=True,
        prometheus_url=ENV["PROMETHEUS_URL"],
        args=args,
    )
    DEMO_OPERATOR_PID.parent.mkdir(parents=True, exist_ok=True)
    DEMO_OPERATOR_PID.write_text(str(running.process.pid))
    pid = running.process.pid
    print(
        f"operator running (pid {pid}, --instance={DEMO_INSTANCE}), "
        f"logs in {OPERATOR_LOG.relative_to(ROOT)}"
    )


def _runs_with(pid: int, args: tuple[str, ...]) -> bool:
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return all(a.encode() in argv for a in args)


def local_webhook() -> tuple[str, ...]:
    """The chart's webhook configuration and Secret, pointed at the local process; the
    flags that process serves them with."""
    print(apply(NamespaceBuilder(RELEASE_NAMESPACE).build()), end="")
    rendered = subprocess.run(
        [*HELM, "template", "--kube-version", KUBE_VERSION, LOCAL,
         str(ROOT / "helm" / "trainwarden"), "-n", RELEASE_NAMESPACE,
         "--show-only", "templates/webhook.yaml", "--set", "rbac.create=false",
         "--set", f"webhook.url={WEBHOOK_URL}"],
        capture_output=True, text=True, check=True, timeout=60,
    ).stdout  # fmt: skip
    print(kubectl("apply", "-n", RELEASE_NAMESPACE, "-f", "-", stdin=rendered), end="")
    return (
        f"--webhook-port={WEBHOOK_PORT}",
        "--webhook-address=127.0.0.1",
        f"--webhook-secret={RELEASE_NAMESPACE}/{LOCAL}-webhook",
        f"--webhook-configuration={LOCAL}-hold",
        "--webhook-name=127.0.0.1",
    )


def stop_local_operator() -> None:
    pid = harness.demo_process()
    if pid is not None:
        os.kill(pid, signal.SIGTERM)
        print(f"stopped the operator an earlier demo ran as a local process (pid {pid})")
    DEMO_OPERATOR_PID.unlink(missing_ok=True)


def install_with_helm() -> None:
    """The chart, as an admin installs it, running in the cluster on the real node.

    This cluster's API server listens on the host's loopback only, so the operator pod uses
    the host network and the in-cluster client is pointed at 127.0.0.1 (values the chart
    has for such clusters); everything else is the chart's defaults: its ServiceAccount and
    least-privilege role, leader election, restricted security context.
    """
    stop_local_operator()
    kubectl("delete", "mutatingwebhookconfiguration", f"{LOCAL}-hold", "--ignore-not-found")
    print("$ e2e/cluster/node/image.sh --import")
    subprocess.run([str(ROOT / "e2e/cluster/node/image.sh"), "--import"], check=True, cwd=ROOT)
    image = read_env(CLUSTER_DIR / "images" / "images.env")["TRAINWARDEN_IMAGE"]
    subprocess.run([str(ROOT / "e2e/cluster/helm.sh")], check=True, capture_output=True)
    print(apply(NamespaceBuilder(RELEASE_NAMESPACE).build()), end="")
    helm_install(image)
    wait_for(_leading, timeout=60, what="the in-cluster operator to lead")
    show("get", "pods", "-n", RELEASE_NAMESPACE, "-o", "wide")
    lease = get("lease", "-n", RELEASE_NAMESPACE, RELEASE)
    account = f"system:serviceaccount:{RELEASE_NAMESPACE}:{RELEASE}"
    print(
        f"Lease {RELEASE_NAMESPACE}/{RELEASE} held by {lease['spec'].get('holderIdentity')}; "
        f"the operator acts as {account} (the chart's role, nothing more)"
    )


def helm_values(image: str) -> dict[str, Any]:
    """The chart's values for this cluster: the real node, the loopback API server, and
    instance `demo`."""
    repository, tag = image.rsplit(":", 1)
    label = harness.REAL_NODE_LABEL
    return {
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
        # The API server calls the webhook on the host network, as it reaches the pod.
        "webhook": {"port": WEBHOOK_PORT, "url": WEBHOOK_URL},
        "operator": {
            "prometheusUrl": ENV["PROMETHEUS_URL"],
            "metricsPort": METRICS_PORT,
            "healthPort": HEALTH_PORT,
            "instance": DEMO_INSTANCE,
            # The scenes show figures only the clock moves (efficiency, storage): every
            # 30 s, as the e2e tests' operators (harness.E2E_STATUS_INTERVAL), not 5 min.
            "extraArgs": [f"--status-interval={harness.E2E_STATUS_INTERVAL}"],
        },
        "volumeReclaim": {"enabled": True},  # the orphaned-volume scene (e2e/demo/volumes.py)
        # The demo trainer writes its checkpoints as this uid: the pruner (never root) too.
        "pruner": {
            "runAsUser": harness.TRAINER_UID,
            "tolerations": [harness.REAL_NODE_TOLERATION],
        },
    }


def helm_install(image: str) -> None:
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
    print(
        f"$ helm {' '.join(command[:7])} -f <values: real node, {image}, "
        f"operator.instance={DEMO_INSTANCE}, --status-interval, volumeReclaim.enabled>"
    )
    result = subprocess.run(
        [*HELM, *command],
        input=json.dumps(helm_values(image)),
        capture_output=True,
        text=True,
        check=False,
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


def _leading() -> str | None:
    with urllib.request.urlopen(f"http://127.0.0.1:{HEALTH_PORT}/healthz", timeout=2) as r:
        body = json.load(r)
    return "leading" if body.get("controllers") else None


def operator_log_tail(lines: int) -> list[str]:
    if ENV.get("REAL_NODE"):
        deployment = f"deployment/{RELEASE}"
        return kubectl("logs", "-n", RELEASE_NAMESPACE, deployment, f"--tail={lines}").splitlines()
    return OPERATOR_LOG.read_text().splitlines()[-lines:]
