"""What every scene of the demo uses: the cluster's environment, kubectl, Prometheus, the DCGM
exporter stand-in, printing, and the label that gives every policy to the demo's operator."""

import contextlib
import json
import os
import subprocess
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

from harness import CLUSTER_DIR, DEMO_INSTANCE, read_env
from trainwarden.testing.builders import INSTANCE_LABEL
from trainwarden.testing.policies import PolicyBuilder

JSON = dict[str, Any]
ENV = read_env(CLUSTER_DIR / "cluster.env")
KUBECTL = [str(CLUSTER_DIR / "bin" / "kubectl"), "--kubeconfig", ENV["KUBECONFIG"]]
STATE = CLUSTER_DIR / "state"
OPERATOR_LOG = STATE / "logs" / "operator.log"
# Shifted with the cluster's ports, so a second checkout can run its own demo alongside.
_OFFSET = int(os.environ.get("TRAINWARDEN_CLUSTER_PORT_OFFSET", "0"))
METRICS_PORT, HEALTH_PORT = 18080 + _OFFSET, 18081 + _OFFSET
WEBHOOK_PORT = 18443 + _OFFSET
WEBHOOK_URL = f"https://127.0.0.1:{WEBHOOK_PORT}/hold"
"""The API server reaches the demo's webhook on the host: its operator runs as a local
process or on the real node's host network."""
POLICIES = "tb,irp,cpp,vrp"
OURS = f"{INSTANCE_LABEL}={DEMO_INSTANCE}"
"""The selector of the demo's policies: only they are governed by its operator."""


def say(text: str) -> None:
    print(f"\n\033[1m==> {text}\033[0m", flush=True)


def _why(error: BaseException) -> str:
    if isinstance(error, subprocess.CalledProcessError):
        return f"{' '.join(map(str, error.cmd[3:]))[:200]} said: {str(error.stderr).strip()[:300]}"
    return f"{type(error).__name__}: {error}"[:500]


@contextlib.contextmanager
def scene(what: str, cleanup: Callable[[], None] | None = None) -> Iterator[None]:
    """A scene that fails says why and the demo goes on; `cleanup` runs either way."""
    try:
        yield
    except (Exception, SystemExit) as error:  # a wait timed out, kubectl failed, ...
        print(f"\nscene '{what}' failed: {_why(error)}; the demo goes on")
    if cleanup is not None:
        try:
            cleanup()
        except (Exception, SystemExit) as error:
            print(f"scene '{what}': cleaning up failed: {_why(error)}")


def kubectl(*args: str, stdin: str | None = None) -> str:
    result = subprocess.run(
        [*KUBECTL, *args], input=stdin, capture_output=True, text=True, check=True, timeout=60
    )
    return result.stdout


def get(*args: str) -> JSON:
    """`kubectl get ... -o json`, parsed."""
    found: JSON = json.loads(kubectl("get", *args, "-o", "json"))
    return found


def apply(manifest: JSON, *, namespace: str | None = None) -> str:
    """`kubectl apply` of one manifest; what kubectl says ("... created")."""
    where = ["-n", namespace] if namespace else []
    return kubectl("apply", *where, "-f", "-", stdin=json.dumps(manifest))


def show(*args: str) -> None:
    print(f"$ kubectl {' '.join(args)}")
    print(kubectl(*args), end="")


def demo_policy(builder: PolicyBuilder[Any]) -> JSON:
    """The policy labelled for the demo's operator (`trainwarden run --instance=demo`)."""
    return builder.instance(DEMO_INSTANCE).build()


def label_for_demo(manifest: JSON) -> JSON:
    """A policy as written (a sample, a deliberate mistake) with the demo's label added."""
    labels = manifest.setdefault("metadata", {}).setdefault("labels", {})
    labels[INSTANCE_LABEL] = DEMO_INSTANCE
    return manifest


def set_utilization(
    namespace: str,
    pod: str,
    value: float,
    gpus: int,
    node: str,
    per_gpu: list[float] | None = None,
) -> None:
    """What the DCGM exporter stand-in reports for the pod's GPUs from now on (`per_gpu`:
    one value for each GPU)."""
    state: JSON = {"utilization": value, "gpus": gpus, "hostname": node}
    if per_gpu is not None:
        state["perGpu"] = per_gpu
    body = json.dumps(state).encode()
    request = urllib.request.Request(
        f"{ENV['DCGM_EXPORTER_URL']}/gpus/{namespace}/{pod}", data=body, method="PUT"
    )
    urllib.request.urlopen(request, timeout=5).close()


def prometheus(query: str) -> list[JSON]:
    url = f"{ENV['PROMETHEUS_URL']}/api/v1/query?" + urllib.parse.urlencode({"query": query})
    with urllib.request.urlopen(url, timeout=10) as response:
        result: list[JSON] = json.load(response)["data"]["result"]
    return result


def budget_status(name: str) -> JSON:
    status: JSON = get("tb", name).get("status", {})
    return status


def job_state(namespace: str, name: str) -> str:
    job = get("job", "-n", namespace, name)
    by = job["metadata"].get("labels", {}).get("trainwarden.dev/suspended-by")
    return f"suspend={job['spec'].get('suspend', False)}" + (f", suspended-by={by}" if by else "")


def pods_of(namespace: str, job: str) -> list[JSON]:
    pods: list[JSON] = get("pods", "-n", namespace, "-l", f"job-name={job}")["items"]
    return pods


def raise_limit(budget: str, hours: float) -> None:
    patch = json.dumps({"spec": {"limits": {"acceleratorHours": hours}}})
    kubectl("patch", "tb", budget, "--type=merge", "-p", patch)
