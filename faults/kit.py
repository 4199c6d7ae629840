"""What every scenario shares: the cluster, the operator processes it kills, fresh
namespaces, and recorders that see every change of the objects a scenario judges.

Reuses e2e/harness.py (start_operator, wait_for, the simulated GPU workloads) and the
builders in trainwarden.testing, so the suite drives the cluster exactly as e2e does.
"""

import json
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, cast

from kubernetes import client, config, watch

from trainwarden.api.v1alpha1.names import INSTANCE_LABEL

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "e2e"))

import harness as harness  # noqa: E402  (e2e/ is not a package: its path is set above)

GROUP, VERSION = "trainwarden.dev", "v1alpha1"
SUITE_LABEL = "faults.trainwarden.dev/suite"
wait_for = harness.wait_for


def connect() -> harness.Cluster:
    """The cluster `make cluster` started (its cluster.env), with the CRDs applied."""
    env_file = harness.CLUSTER_DIR / "cluster.env"
    if not env_file.exists():
        raise SystemExit(f"no {env_file}: run `make cluster` first (make faults does)")
    env = harness.read_env(env_file)
    kubeconfig = Path(env["KUBECONFIG"])
    api = config.new_client_from_config(config_file=str(kubeconfig))  # type: ignore[no-untyped-call]
    cluster = harness.Cluster(kubeconfig, env["PROMETHEUS_URL"], env["DCGM_EXPORTER_URL"], api)
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(ROOT / "crds"))
    cluster.kubectl(
        "wait", "--for=condition=Established", "--timeout=60s", "crd", "-l",
        "app.kubernetes.io/name=trainwarden",
    )  # fmt: skip
    return cluster


@dataclass
class Operators:
    """The operator processes of one scenario: started as users run them, SIGKILLed."""

    cluster: harness.Cluster
    logs: Path
    prometheus_url: str | None = None
    instance: str | None = None
    """`--instance`: this operator governs only the policies labelled for it."""
    running: list[harness.Operator] = field(default_factory=list)
    started: int = 0
    kubeconfig: Path | None = None
    """Where the operators reach the API server, if not directly (a fault proxy)."""

    def __post_init__(self) -> None:
        _EVERY.append(self)

    def start(
        self, *args: str, name: str = "operator", source: Path | None = None
    ) -> harness.Operator:
        """`source`: run another checkout's operator (a previous release, faults/upgrade.py)."""
        self.started += 1
        log = self.logs / f"{name}-{self.started:03d}.log"
        if self.instance:
            args = (f"--instance={self.instance}", *args)
        kubeconfig = self.kubeconfig or self.cluster.kubeconfig
        operator = harness.start_operator(
            kubeconfig,
            log,
            prometheus_url=self.prometheus_url,
            args=args,
            source=source,
        )
        self.running.append(operator)
        return operator

    def kill(self, operator: harness.Operator) -> None:
        operator.stop(kill=True)
        self.running.remove(operator)

    def exited(self, operator: harness.Operator, *, timeout: float) -> bool:
        """Wait for a process armed with a failpoint to kill itself (True), or give up."""
        try:
            operator.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:  # it did not get there
            return False
        self.running.remove(operator)
        return True

    def stop_all(self) -> None:
        for operator in list(self.running):
            operator.stop()
        self.running.clear()


_EVERY: list[Operators] = []


def stop_every_operator() -> None:
    """Whatever an area left running when it failed: the next area starts clean."""
    for ops in _EVERY:
        for operator in list(ops.running):
            operator.stop(kill=True)
        ops.running.clear()
    _EVERY.clear()


def new_namespace(cluster: harness.Cluster, prefix: str) -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:6]}"
    meta = client.V1ObjectMeta(name=name, labels={SUITE_LABEL: "true", "team": name})
    client.CoreV1Api(cluster.api).create_namespace(client.V1Namespace(metadata=meta))
    return name


def delete_namespace(cluster: harness.Cluster, name: str) -> None:
    """Delete a scenario's namespace and the policies named after it, without waiting."""
    harness.delete_policies_of(cluster, name)
    try:
        client.CoreV1Api(cluster.api).delete_namespace(name)
    except client.ApiException as error:
        if error.status not in (404, 409):  # gone, or already terminating
            raise


def custom(cluster: harness.Cluster) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(cluster.api)


def get_policy(cluster: harness.Cluster, plural: str, name: str) -> dict[str, Any]:
    return harness.get_policy(cluster, plural, name)


def patch_policy(cluster: harness.Cluster, plural: str, name: str, patch: dict[str, Any]) -> None:
    custom(cluster).patch_cluster_custom_object(GROUP, VERSION, plural, name, patch)


def condition(obj: dict[str, Any], kind: str) -> dict[str, Any] | None:
    found = [c for c in (obj.get("status") or {}).get("conditions") or [] if c["type"] == kind]
    return found[0] if found else None


@dataclass
class History:
    """The successive values of one boolean field of one object, each with when it was
    seen (monotonic clock of this process)."""

    values: list[tuple[float, bool]] = field(default_factory=list)

    def see(self, value: bool) -> None:
        if not self.values or self.values[-1][1] != value:
            self.values.append((time.monotonic(), value))

    def flips(self, to: bool) -> list[float]:
        """When the field turned `to` (not counting its first value)."""
        pairs = zip(self.values, self.values[1:], strict=False)
        return [t for (_, before), (t, now) in pairs if before != to and now == to]

    @property
    def current(self) -> bool | None:
        return self.values[-1][1] if self.values else None


class Recorder:
    """Every change of a collection, seen by a watch (with a relist on 410): a scenario
    counts actions on the objects themselves, never from the operator's own account."""

    def __init__(
        self,
        lister: Callable[..., Any],
        see: Callable[[dict[str, Any]], None],
        **kwargs: Any,
    ) -> None:
        self._lister, self._see, self._kwargs = lister, see, kwargs
        self._stop = threading.Event()
        self.gaps = 0
        """Times the watch had to relist (changes in between may be missed)."""
        self.synced = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _relist(self) -> str:
        listed = self._lister(**self._kwargs)
        for item in listed["items"]:
            self._see(item)
        self.synced.set()
        return str(listed["metadata"]["resourceVersion"])

    def _run(self) -> None:
        version: str | None = None
        while not self._stop.is_set():
            try:
                if version is None:
                    version = self._relist()
                stream = watch.Watch().stream(  # type: ignore[no-untyped-call]
                    self._lister, resource_version=version, timeout_seconds=5, **self._kwargs
                )
                for event in stream:
                    obj = event["raw_object"]
                    if event["type"] == "ERROR":
                        raise client.ApiException(status=obj.get("code", 500))
                    version = obj["metadata"]["resourceVersion"]
                    if event["type"] in ("ADDED", "MODIFIED"):
                        self._see(obj)
            except client.ApiException as error:
                if error.status == 410:
                    version, self.gaps = None, self.gaps + 1
                else:
                    self._stop.wait(0.5)
            except Exception:  # the API server restarting, a dropped stream: reconnect
                self._stop.wait(0.5)

    def stop(self) -> None:
        self._stop.set()


def raw(method: Callable[..., Any]) -> Callable[..., Any]:
    """A list method of the kubernetes client that returns plain dicts (faster, and
    what the watch's raw_object is)."""

    def call(*args: Any, **kwargs: Any) -> Any:
        if kwargs.get("watch"):
            return method(*args, **kwargs)
        response = method(*args, _preload_content=False, **kwargs)
        return json.loads(response.data)

    call.__doc__ = method.__doc__
    return call


class JobSuspensions:
    """spec.suspend of every Job in a namespace, as it changes."""

    def __init__(self, cluster: harness.Cluster, namespace: str) -> None:
        self.jobs: dict[str, History] = {}
        self.labels: dict[str, dict[str, str]] = {}
        batch = client.BatchV1Api(cluster.api)
        lister = raw(batch.list_namespaced_job)
        self.recorder = Recorder(lister, self._see, namespace=namespace)
        self.recorder.synced.wait(30)

    def _see(self, job: dict[str, Any]) -> None:
        name = job["metadata"]["name"]
        self.labels[name] = dict(job["metadata"].get("labels") or {})
        self.jobs.setdefault(name, History()).see(bool(job["spec"].get("suspend")))

    def suspensions(self, name: str) -> int:
        return len(self.jobs.get(name, History()).flips(True))

    def resumes(self, name: str) -> int:
        return len(self.jobs.get(name, History()).flips(False))

    def stop(self) -> None:
        self.recorder.stop()


@contextmanager
def namespaces(cluster: harness.Cluster) -> Iterator[list[str]]:
    """The namespaces a scenario makes, deleted when it ends (also when it fails)."""
    made: list[str] = []
    try:
        yield made
    finally:
        for name in made:
            delete_namespace(cluster, name)


@dataclass
class Context:
    """One run of the suite: the cluster, the random source (seeded: a run can be
    repeated), how many times each scenario runs, and where logs go."""

    cluster: harness.Cluster
    rng: Any
    runs: int
    per_kill: int
    """Scenario instances in flight at each kill, each at its own random phase."""
    failpoint_share: float
    """The share of kills made by a failpoint (the operator kills itself at a chosen
    point between decision and write) rather than at a random moment."""
    logs: Path
    outage_seconds: float
    say: Callable[[str], None]
    instance: str | None = None
    """Run under `trainwarden run --instance`: several suite processes (one area each)
    share a cluster, each operator governing only its own policies."""
    api_outage_seconds: float = 120
    """How long the API server is unreachable or down (area "api"; etcd at most 30 s)."""

    def operators(self, name: str, prometheus_url: str | None = None) -> Operators:
        return Operators(self.cluster, self.logs / name, prometheus_url, self.instance)

    def create_policy(self, plural: str, manifest: dict[str, Any]) -> None:
        """Create a policy for this run's operators (labelled with its instance)."""
        if self.instance:
            labels = manifest["metadata"].setdefault("labels", {})
            labels[INSTANCE_LABEL] = self.instance
        harness.create_policy(self.cluster, plural, manifest)

    def create_budget(self, name: str, namespace: str, hours: float, **spec: Any) -> None:
        self.create_policy(
            "trainingbudgets", harness.budget_manifest(name, namespace, hours, **spec)
        )

    def pick_failpoint(self, points: tuple[str, ...]) -> str | None:
        if points and self.rng.random() < self.failpoint_share:
            return str(self.rng.choice(points))
        return None


def create_job(cluster: harness.Cluster, namespace: str, manifest: dict[str, Any]) -> str:
    """Create a Job from a builder's manifest; returns its uid."""
    batch = client.BatchV1Api(cluster.api)
    created = batch.create_namespaced_job(namespace, cast(Any, manifest))
    return str(created.metadata.uid)  # type: ignore[union-attr]


def pods_running(cluster: harness.Cluster, namespace: str, count: int) -> list[dict[str, Any]]:
    """The namespace's pods once `count` of them run with a startTime (deadline 60 s)."""

    def probe() -> list[dict[str, Any]] | None:
        pods = list_pods(cluster, namespace)
        running = [p for p in pods if (p.get("status") or {}).get("startTime")]
        return running if len(running) >= count else None

    return wait_for(probe, timeout=60, what=f"{count} running pods in {namespace}")


def parse_time(stamp: str | None) -> datetime | None:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")) if stamp else None


def list_pods(cluster: harness.Cluster, namespace: str) -> list[dict[str, Any]]:
    """The namespace's pods as the API server returns them (plain dicts)."""
    core = client.CoreV1Api(cluster.api)
    response: Any = core.list_namespaced_pod(namespace, _preload_content=False)
    items: list[dict[str, Any]] = json.loads(response.data)["items"]
    return items


def job_pod(cluster: harness.Cluster, namespace: str, job: str) -> dict[str, Any]:
    """The running pod of a one-pod Job, once it has a startTime (deadline 60 s)."""

    def probe() -> dict[str, Any] | None:
        for pod in list_pods(cluster, namespace):
            labels = pod["metadata"].get("labels") or {}
            if labels.get("job-name") == job and (pod.get("status") or {}).get("startTime"):
                return pod
        return None

    return wait_for(probe, timeout=60, what=f"the pod of Job {namespace}/{job}")


IRP = "idlereclaimpolicies"


@dataclass
class IdleNamespace:
    """A namespace an idle policy watches, with one single-pod GPU Job per name."""

    namespace: str
    policy: str
    jobs: JobSuspensions
    pods: dict[str, str]
    """Each Job's pod name."""


def idle_namespace(
    ctx: Context, prefix: str, made: list[str], utilization: dict[str, float | None], grace: float
) -> IdleNamespace:
    """A new namespace with an Enforce idle policy (harness.idle_policy, `grace` seconds)
    and a running GPU Job per name of `utilization`, whose pod the stand-in exporter
    reports at that percent (None: no series at all)."""
    ns = new_namespace(ctx.cluster, prefix)
    made.append(ns)
    ctx.create_policy(IRP, harness.idle_policy(f"{ns}-irp", ns).grace(f"{grace:.0f}s").build())
    jobs = JobSuspensions(ctx.cluster, ns)
    for name in utilization:
        create_job(ctx.cluster, ns, harness.gpu_job(name))
    running = pods_running(ctx.cluster, ns, len(utilization))
    pods = {p["metadata"]["labels"]["job-name"]: p["metadata"]["name"] for p in running}
    for name, percent in utilization.items():
        if percent is not None:
            harness.publish_utilization(ctx.cluster, ns, pods[name], percent)
    return IdleNamespace(ns, f"{ns}-irp", jobs, pods)
