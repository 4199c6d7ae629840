"""Helpers for tests against the real local cluster: no fakes, deadlines instead of sleeps."""

import json
import os
import re
import socket
import subprocess
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import yaml
from kubernetes import client
from prometheus_client.parser import text_string_to_metric_families

from trainwarden.testing.builders import (
    BudgetBuilder,
    IdlePolicyBuilder,
    JobBuilder,
    ObjectBuilder,
    PersistentVolumeBuilder,
    PodBuilder,
    PVCBuilder,
)
from trainwarden.testing.pods import GPU as GPU  # the tests' accelerator resource name
from trainwarden.testing.pods import PodSpecMethods

ROOT = Path(__file__).resolve().parent.parent
CLUSTER_DIR = ROOT / ".cluster"
KUBE_VERSION = re.search(
    r'^K8S_VERSION="(v[0-9.]+)"', (ROOT / "e2e" / "cluster" / "lib.sh").read_text(), re.MULTILINE
)[1]  # type: ignore[index]
"""The local cluster's Kubernetes version, for `helm template --kube-version`: helm's
offline default (v1.20) is below the chart's kubeVersion."""
T = TypeVar("T")


def wait_for(
    probe: Callable[[], T | None], *, timeout: float = 60, every: float = 0.5, what: str = ""
) -> T:
    """Poll until probe returns something truthy; fail with `what` at the deadline.

    Exceptions are treated as "not yet" (the API may be briefly unavailable), except an
    AssertionError, which means the probe saw something that will never get better.
    """
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        try:
            value = probe()
            if value:
                return value
        except AssertionError:
            raise
        except Exception as error:
            last_error = error
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}; last error: {last_error}")


def holds(probe: Callable[[], object], *, duration: float, every: float = 0.5, what: str) -> None:
    """Check that something stays true for `duration` seconds (the opposite of wait_for)."""
    deadline = time.monotonic() + duration
    while time.monotonic() < deadline:
        assert probe(), f"{what} stopped holding"
        time.sleep(every)


@dataclass(frozen=True)
class Cluster:
    kubeconfig: Path
    prometheus_url: str
    dcgm_exporter_url: str
    api: client.ApiClient

    def kubectl(self, *args: str, stdin: str | None = None, check: bool = True) -> str:
        result = subprocess.run(
            [str(CLUSTER_DIR / "bin" / "kubectl"), "--kubeconfig", str(self.kubeconfig), *args],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        if check and result.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed: {result.stderr}")
        return result.stdout + (result.stderr if not check else "")

    def prometheus_query(self, query: str) -> list[dict[str, Any]]:
        url = f"{self.prometheus_url}/api/v1/query?" + urllib.parse.urlencode({"query": query})
        with urllib.request.urlopen(url, timeout=10) as response:
            body = json.load(response)
        assert body["status"] == "success", body
        result: list[dict[str, Any]] = body["data"]["result"]
        return result


def helm(kubeconfig: Path | str, *args: str, stdin: str | None = None, timeout: int = 300) -> str:
    """`helm --kubeconfig KUBECONFIG ARGS` (the binary `make helm` builds): its output, or
    the test fails with helm's own error."""
    result = subprocess.run(
        [str(CLUSTER_DIR / "bin" / "helm"), "--kubeconfig", str(kubeconfig), *args],
        input=stdin, capture_output=True, text=True, timeout=timeout, check=False,
    )  # fmt: skip
    assert result.returncode == 0, f"helm {' '.join(args)} failed:\n{result.stderr}"
    return result.stdout


def helm_uninstall(kubeconfig: Path | str, release: str, namespace: str, *args: str) -> str:
    """`helm uninstall --wait` of a test's release (its pre-delete hook included)."""
    return helm(kubeconfig, "uninstall", release, "--namespace", namespace, "--wait",
                "--timeout=120s", *args)  # fmt: skip


def token_kubeconfig(cluster: Cluster, account: str, namespace: str, into: Path) -> Path:
    """A kubeconfig (`into`/kubeconfig) with nothing but a TokenRequest token of the
    ServiceAccount `namespace`/`account`: what a pod of that account is allowed."""
    token = cluster.kubectl(
        "create", "token", account, "--namespace", namespace, "--duration=2h"
    ).strip()
    server = read_env(CLUSTER_DIR / "cluster.env")["KUBE_APISERVER_URL"]
    ca = str(CLUSTER_DIR / "state" / "pki" / "ca.crt")
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "local", "cluster": {"server": server, "certificate-authority": ca}}],
        "users": [{"name": account, "user": {"token": token}}],
        "contexts": [{"name": account, "context": {"cluster": "local", "user": account}}],
        "current-context": account,
    }
    path = into / "kubeconfig"
    path.write_text(yaml.safe_dump(config))
    path.chmod(0o600)
    return path


def read_env(path: Path) -> dict[str, str]:
    pairs = (line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)
    return {key.strip(): value.strip().strip('"') for key, value in pairs}


@dataclass(frozen=True)
class Operator:
    metrics_url: str
    health_url: str
    log: Path
    process: subprocess.Popen[bytes]

    def log_lines(self) -> list[str]:
        return self.log.read_text().splitlines()

    def stop(self, *, kill: bool = False) -> None:
        """Stop the operator: TERM for a graceful stop, or SIGKILL to test crash safety."""
        if kill:
            self.process.kill()
        else:
            self.process.terminate()
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


Sample = tuple[dict[str, str], float]


def samples(operator: Operator, series: str, /, **labels: str) -> list[Sample]:
    """The samples of `series` in this operator process's own metrics whose labels include
    `labels` (one may be `name`): another operator on the cluster (a demo left running)
    cannot show up."""
    with urllib.request.urlopen(operator.metrics_url, timeout=5) as response:
        text = response.read().decode()
    return [
        (sample.labels, float(sample.value))
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == series and all(sample.labels.get(k) == v for k, v in labels.items())
    ]


def role(operator: Operator) -> str | None:
    """A replica's role from its health endpoint: "standby" while it waits for the Lease,
    "leader" once its controllers run; None when it is gone or between the two."""
    if operator.process.poll() is not None:
        return None
    try:
        with urllib.request.urlopen(operator.health_url, timeout=2) as response:
            body: dict[str, Any] = json.load(response)
    except OSError:
        return None  # between the standby endpoint and kopf's, for a moment
    if body.get("role") == "standby":
        return "standby"
    return "leader" if body.get("controllers") else None


def last_evaluated(operator: Operator, kind: str, name: str) -> float:
    """When the operator last evaluated a policy (0: never). Status is written only when
    it changes, so status.lastEvaluated is not proof of an evaluation; this metric is."""
    series = "trainwarden_policy_last_evaluated_timestamp_seconds"
    return max((v for _, v in samples(operator, series, kind=kind, name=name)), default=0.0)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


E2E_STATUS_INTERVAL = "30s"
"""The tests watch clock-moved figures (a budget's used, efficiency, storage) change in
status, so their operators write them every 30 s, not the 5-minute default the unit tests
and the chart keep (an older release's operator, `source`, has no such flag)."""


def start_operator(
    kubeconfig: Path,
    log: Path,
    *,
    ports: tuple[int, int] | None = None,
    detach: bool = False,
    prometheus_url: str | None = None,
    args: tuple[str, ...] = (),
    source: Path | None = None,
) -> Operator:
    """`trainwarden run` against the cluster, exactly as a user runs it, once healthy.

    `ports` are (metrics, health), free ones by default; `detach` lets it outlive the caller;
    `args` are further command-line flags; `source` is another checkout of this repository
    (a previous release) whose operator/ runs instead, with this venv's interpreter.
    """
    extra = [f"--prometheus-url={prometheus_url}"] if prometheus_url else []
    if source is None and not any(a.startswith("--status-interval") for a in args):
        extra.append(f"--status-interval={E2E_STATUS_INTERVAL}")
    extra += args
    metrics_port, health_port = ports or (free_port(), free_port())
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as sink:
        program = [str(ROOT / ".venv" / "bin" / "trainwarden")]
        env = {**os.environ, "KUBECONFIG": str(kubeconfig)}
        if source is not None:  # its package first on the path, before the installed one
            program = [str(ROOT / ".venv" / "bin" / "python"), "-m", "trainwarden"]
            env["PYTHONPATH"] = str(source / "operator")
        process = subprocess.Popen(
            [
                *program,
                "run",
                "--metrics-address=127.0.0.1",
                f"--metrics-port={metrics_port}",
                "--health-address=127.0.0.1",
                f"--health-port={health_port}",
                *extra,
            ],
            stdout=sink,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=detach,
        )
    running = Operator(
        f"http://127.0.0.1:{metrics_port}/metrics",
        f"http://127.0.0.1:{health_port}/healthz",
        log,
        process,
    )

    def healthy() -> bool:
        tail = "\n".join(log.read_text().splitlines()[-5:])
        assert process.poll() is None, f"the operator exited:\n{tail}"
        with urllib.request.urlopen(running.health_url, timeout=2) as response:
            return bool(response.status == 200)

    wait_for(healthy, timeout=60, what="the operator's health endpoint")
    return running


# --- the demo's operator, which may run next to the tests -------------------------------------

DEMO_INSTANCE = "demo"
"""`make demo`'s operator runs with --instance=demo and governs only policies labelled
trainwarden.dev/instance=demo; the tests' operators (no --instance) govern only unlabelled
ones, so neither ever acts on the other's policies."""
DEMO_RELEASE, DEMO_NAMESPACE = "trainwarden-demo", "trainwarden"
DEMO_OPERATOR_PID = CLUSTER_DIR / "state" / "pids" / "operator.pid"
"""Where the demo records its local operator process (on a cluster without a real node)."""


def demo_process() -> int | None:
    """The pid of the demo's local operator process if it runs (not a zombie, not a pid
    reused by something else)."""
    try:
        pid = int(DEMO_OPERATOR_PID.read_text())
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (OSError, ValueError):
        return None
    return pid if b"trainwarden" in cmdline and str(ROOT).encode() in cmdline else None


def demo_operator(api: client.ApiClient) -> str | None:
    """Where the demo's operator runs, if it does: its Helm release or a local process."""
    pid = demo_process()
    if pid is not None:
        return f"local process {pid}"
    try:
        deployment = client.AppsV1Api(api).read_namespaced_deployment(DEMO_RELEASE, DEMO_NAMESPACE)
    except client.ApiException as error:
        if error.status == 404:
            return None
        raise
    if not deployment.spec.replicas:
        return None
    return f"Helm release {DEMO_NAMESPACE}/{DEMO_RELEASE}"


POLICY_PLURALS = ("trainingbudgets", "idlereclaimpolicies", "checkpointpolicies")


def delete_policies_of(cluster: Cluster, namespace: str) -> None:
    """Tests name their policies after their namespace; remove them even if the test failed."""
    api = client.CustomObjectsApi(cluster.api)
    for plural in POLICY_PLURALS:
        try:
            found = api.list_cluster_custom_object("trainwarden.dev", "v1alpha1", plural)
        except client.ApiException as error:
            if error.status == 404:  # the CRDs are not installed: no policies to remove
                continue
            raise
        for item in found["items"]:
            if item["metadata"]["name"].startswith(namespace):
                api.delete_cluster_custom_object(
                    "trainwarden.dev", "v1alpha1", plural, item["metadata"]["name"]
                )


P = TypeVar("P", bound=PodSpecMethods)


def simulated(builder: P, gpus: int = 1) -> P:
    """The e2e tests' simulated trainer pod (or a workload's pod template): `gpus`
    accelerators and one core, no termination grace. kwok runs it until an annotation says
    it completes or fails (the builders' completes_after, fails_after)."""
    return builder.gpus(gpus).cpu("1").termination_grace(0)


def pod_template(
    gpus: int = 1,
    *,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A simulated training pod's template (metadata and spec)."""
    pod = simulated(PodBuilder("trainer"), gpus)
    return pod.labels(labels or {}).annotations(annotations or {}).template()


def gpu_job(
    name: str,
    gpus: int = 1,
    *,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    suspend: bool = False,
) -> dict[str, Any]:
    """A batch/v1 Job of one simulated training pod, its labels on the Job and the pod."""
    job = simulated(JobBuilder(name), gpus).suspended(suspend).backoff_limit(0)
    job.labels(labels or {}).pod_labels(labels or {}).pod_annotations(annotations or {})
    return job.build()


# --- the real node: manifests for pods that really run ---------------------------------------

REAL_NODE_LABEL = "trainwarden.dev/real-node"  # label and taint of the real node (real-0)
PV_ROOT = CLUSTER_DIR / "state" / "node" / "volumes"  # hostPath volumes of the real node
TRAINER_UID = 65532
"""The uid trainers write checkpoints as in the e2e tests and the demo, and the pruner's
(pruner pods must run as non-root, so the files they delete must not be root's)."""


def own(path: Path) -> None:
    """Hand what a test wrote as root on the host over to the trainers' uid, as if a
    trainer had written it (the pruner runs as that uid, never as root)."""
    for item in (path, *path.rglob("*")):
        os.chown(item, TRAINER_UID, TRAINER_UID, follow_symlinks=False)


REAL_NODE_TOLERATION = {"key": REAL_NODE_LABEL, "operator": "Exists", "effect": "NoSchedule"}


def on_real_node(spec: dict[str, Any]) -> dict[str, Any]:
    """A pod spec that selects the real node and tolerates its taint (nothing else lands there)."""
    return {
        **spec,
        "nodeSelector": {REAL_NODE_LABEL: "true"},
        "tolerations": [REAL_NODE_TOLERATION],
    }


def hostpath_volume(
    namespace: str, host_dir: Path, *, claim: str = "checkpoints", size: str = "1Gi"
) -> tuple[dict[str, Any], dict[str, Any]]:
    """A hostPath PersistentVolume on the real node and the PVC `claim` bound to it.

    Returns (PV, PVC) manifests. The PV (`<namespace>-<claim>`, Retain, no storage class)
    is reserved for the claim and pinned to the real node, so the files land in `host_dir`
    on this machine, where a test or the demo reads them directly. `host_dir` is made here,
    owned by TRAINER_UID, so that non-root trainers and pruners may write and delete in it.
    """
    host_dir.mkdir(parents=True, exist_ok=True)
    os.chown(host_dir, TRAINER_UID, TRAINER_UID)
    pv_name = f"{namespace}-{claim}"
    pv = (
        PersistentVolumeBuilder(pv_name)
        .size(size)
        .host_path(str(host_dir))
        .claim(namespace, claim)
        .on_nodes(REAL_NODE_LABEL, "true")
    )
    pvc = PVCBuilder(claim).size(size).storage_class("").volume(pv_name)
    return pv.build(), pvc.build()


def trainer_job(
    name: str,
    image: str,
    *,
    claim: str = "checkpoints",
    gpus: int = 1,
    labels: dict[str, str] | None = None,
    steps_per_epoch: int = 5,
    epoch_seconds: float = 1,
    save_steps: int = 20,
    max_steps: int = 0,
    checkpoint_path: str | None = None,
    retries: int = 0,
) -> dict[str, Any]:
    """A batch/v1 Job of `trainwarden demo-trainer` on the real node.

    It checkpoints to the PVC `claim` (mounted at /data; checkpoints in /data/checkpoints)
    every `save_steps`, at `steps_per_epoch / epoch_seconds` steps a second (5 by default),
    until `max_steps` (0: until stopped). It requests `gpus` nvidia.com/gpu (advertised by
    the real node, no device behind them), so budgets charge it like any training pod; 30 s
    of termination grace leave time for the final checkpoint on SIGTERM. `checkpoint_path`
    is its trainwarden.dev/checkpoint-path annotation ("<pvc>:<path>"); `retries` its
    backoffLimit (a pod that crashed is retried, resuming from the last checkpoint).
    """
    args = [
        "demo-trainer",
        "--output-dir=/data/checkpoints",
        f"--steps-per-epoch={steps_per_epoch}",
        f"--epoch-seconds={epoch_seconds:g}",
        f"--save-steps={save_steps}",
    ]
    if max_steps:
        args.append(f"--max-steps={max_steps}")
    job = (
        JobBuilder(name)
        .backoff_limit(retries)
        .labels(labels or {})
        .pod_labels({"app": "demo-trainer", **(labels or {})})
        .image(image, pull_policy="Never")
        .args(*args)
        .cpu("100m")
        .gpus(gpus)
        .claim(claim)
        .termination_grace(30)
        .run_as(TRAINER_UID, group=TRAINER_UID)
        .node_selector({REAL_NODE_LABEL: "true"})
        .toleration(REAL_NODE_LABEL)
    )
    if checkpoint_path is not None:
        job.checkpoint_path(checkpoint_path)
    return job.build()


def checkpoint_steps(directory: Path) -> list[int]:
    """Steps of the complete checkpoints (a temporary directory is never named checkpoint-*)."""
    if not directory.is_dir():
        return []
    return sorted(
        int(p.name.split("-")[1])
        for p in directory.iterdir()
        if p.name.startswith("checkpoint-") and (p / "trainer_state.json").is_file()
    )


def trainer_state(directory: Path, step: int) -> dict[str, Any]:
    """The Hugging Face `trainer_state.json` of `directory/checkpoint-<step>`."""
    loaded: dict[str, Any] = json.loads(
        (directory / f"checkpoint-{step}" / "trainer_state.json").read_text()
    )
    return loaded


def budget(name: str, namespace: str, hours: float) -> BudgetBuilder:
    """A TrainingBudget on one namespace: Enforce, Daily, `hours` GPU-hours, no grace."""
    return (
        BudgetBuilder(name)
        .enforce()
        .namespaces(namespace)
        .period("Daily")
        .accelerator_hours(hours)
        .grace("0s")
    )


def budget_manifest(name: str, namespace: str, hours: float, **spec: Any) -> dict[str, Any]:
    """budget(), with the top-level spec fields in `spec` replaced (mode="DryRun", ...)."""
    return _replaced(budget(name, namespace, hours), spec).build()


def create_budget(cluster: Cluster, name: str, namespace: str, hours: float, **spec: Any) -> None:
    client.CustomObjectsApi(cluster.api).create_cluster_custom_object(
        "trainwarden.dev",
        "v1alpha1",
        "trainingbudgets",
        budget_manifest(name, namespace, hours, **spec),
    )


def get_budget(cluster: Cluster, name: str) -> dict[str, Any]:
    obj: dict[str, Any] = client.CustomObjectsApi(cluster.api).get_cluster_custom_object(
        "trainwarden.dev", "v1alpha1", "trainingbudgets", name
    )
    return obj


def create_policy(cluster: Cluster, plural: str, manifest: dict[str, Any]) -> None:
    client.CustomObjectsApi(cluster.api).create_cluster_custom_object(
        "trainwarden.dev", "v1alpha1", plural, manifest
    )


def get_policy(cluster: Cluster, plural: str, name: str) -> dict[str, Any]:
    obj: dict[str, Any] = client.CustomObjectsApi(cluster.api).get_cluster_custom_object(
        "trainwarden.dev", "v1alpha1", plural, name
    )
    return obj


def idle_policy(name: str, namespace: str) -> IdlePolicyBuilder:
    """An IdleReclaimPolicy on one namespace on a test's time scale: idle after 30 s below
    5 % (10 s steps, twice the harness's scrape interval), suspended 15 s after the warning."""
    return (
        IdlePolicyBuilder(name)
        .enforce()
        .namespaces(namespace)
        .signal(threshold=5, window="30s", resolution="10s", warmup="5s")
        .grace("15s")
        .action("Suspend")
    )


def idle_policy_manifest(name: str, namespace: str, **spec: Any) -> dict[str, Any]:
    """idle_policy(), with the top-level spec fields in `spec` replaced (action=...)."""
    return _replaced(idle_policy(name, namespace), spec).build()


B = TypeVar("B", bound=ObjectBuilder)


def _replaced(builder: B, spec: dict[str, Any]) -> B:
    for key, value in spec.items():
        builder.field(f"spec.{key}", value)
    return builder


def publish_utilization(
    cluster: Cluster,
    namespace: str,
    pod: str,
    percent: float,
    gpus: int = 1,
    hostname: str | None = None,
    per_gpu: list[float] | None = None,
    view: str = "honorLabels",
) -> None:
    """What the DCGM exporter stand-in reports for a pod's GPUs from now on (`per_gpu`:
    one value per GPU instead). Like a real node, a stand-in host has a limited number of
    GPUs: by default each pod gets its own. `view`: "serviceMonitor" has the series
    scraped as GPU Operator's ServiceMonitor is (honorLabels false: exported_* labels)."""
    state: dict[str, Any] = {
        "utilization": percent,
        "gpus": gpus,
        "hostname": hostname or f"{namespace}.{pod}",
        "view": view,
    }
    if per_gpu is not None:
        state["perGpu"] = per_gpu
    body = json.dumps(state).encode()
    request = urllib.request.Request(
        f"{cluster.dcgm_exporter_url}/gpus/{namespace}/{pod}", data=body, method="PUT"
    )
    urllib.request.urlopen(request, timeout=5).close()


def forget_utilization(cluster: Cluster, namespace: str, pod: str) -> None:
    """The pod's series disappear, as when an exporter stops reporting it."""
    request = urllib.request.Request(
        f"{cluster.dcgm_exporter_url}/gpus/{namespace}/{pod}", method="DELETE"
    )
    urllib.request.urlopen(request, timeout=5).close()


def events_for(cluster: Cluster, namespace: str, name: str) -> list[client.CoreV1Event]:
    found: list[client.CoreV1Event] = (
        client.CoreV1Api(cluster.api)
        .list_namespaced_event(namespace, field_selector=f"involvedObject.name={name}")
        .items
    )
    return found
