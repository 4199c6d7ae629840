"""One real local cluster for the whole e2e run, and the operator running against it."""

import os
import socket
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import config

from harness import CLUSTER_DIR, ROOT, Cluster, Operator, read_env, wait_for


@pytest.fixture(scope="session")
def cluster() -> Cluster:
    """Start (or reuse) the local control plane: `make cluster` is idempotent and fast warm."""
    subprocess.run([str(ROOT / "e2e" / "cluster" / "up.sh")], check=True, cwd=ROOT)
    env = read_env(CLUSTER_DIR / "cluster.env")
    kubeconfig = Path(env["KUBECONFIG"])
    api = config.new_client_from_config(config_file=str(kubeconfig))
    return Cluster(kubeconfig, env["PROMETHEUS_URL"], env["DCGM_EXPORTER_URL"], api)


@pytest.fixture(scope="session")
def crds(cluster: Cluster) -> None:
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(ROOT / "crds"))
    cluster.kubectl(
        "wait",
        "--for=condition=Established",
        "--timeout=60s",
        "crd",
        "-l",
        "app.kubernetes.io/name=trainwarden",
    )


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.fixture(scope="session")
def operator(
    cluster: Cluster, crds: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Operator]:
    """`trainwarden run` as a real process against the cluster, exactly as a user runs it."""
    metrics_port, health_port = _free_port(), _free_port()
    log = tmp_path_factory.mktemp("operator") / "operator.log"
    with log.open("wb") as sink:
        process = subprocess.Popen(
            [
                str(ROOT / ".venv" / "bin" / "trainwarden"),
                "run",
                "--metrics-address=127.0.0.1",
                f"--metrics-port={metrics_port}",
                "--health-address=127.0.0.1",
                f"--health-port={health_port}",
            ],
            stdout=sink,
            stderr=subprocess.STDOUT,
            env={**os.environ, "KUBECONFIG": str(cluster.kubeconfig)},
        )
    running = Operator(
        f"http://127.0.0.1:{metrics_port}/metrics",
        f"http://127.0.0.1:{health_port}/healthz",
        log,
        process,
    )

    def healthy() -> bool:
        assert process.poll() is None, f"operator exited:\n{log.read_text()[-3000:]}"
        with urllib.request.urlopen(running.health_url, timeout=2) as response:
            return bool(response.status == 200)

    wait_for(healthy, timeout=60, what="the operator's health endpoint")
    yield running
    process.terminate()
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        process.kill()
