"""One real local cluster for the whole e2e run, and the operator running against it."""

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import config

from harness import CLUSTER_DIR, ROOT, Cluster, Operator, read_env, start_operator


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


@pytest.fixture(scope="module")
def operator(
    cluster: Cluster, crds: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Operator]:
    """`trainwarden run` as a real process, one per test module so no two ever overlap."""
    running = start_operator(cluster, tmp_path_factory.mktemp("operator") / "operator.log")
    yield running
    running.stop()
