"""One real local cluster for the whole e2e run, and the operator running against it."""

import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client, config

from harness import (
    CLUSTER_DIR,
    DEMO_INSTANCE,
    PV_ROOT,
    ROOT,
    Cluster,
    Operator,
    delete_policies_of,
    demo_operator,
    hostpath_volume,
    read_env,
    start_operator,
    wait_for,
)

OPERATOR_LOG_LINES = 300


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test here is of the e2e tier: `pytest -m "not e2e"` leaves them all out."""
    for item in items:
        item.add_marker(pytest.mark.e2e)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> pytest.TestReport:
    """A failing test's report carries the operator's log: CI keeps nothing else of it."""
    report: pytest.TestReport = yield
    if report.failed:
        for name, value in getattr(item, "funcargs", {}).items():
            if isinstance(value, Operator) and value.log.exists():
                tail = value.log_lines()[-OPERATOR_LOG_LINES:]
                report.sections.append((f"operator log ({name}, {value.log})", "\n".join(tail)))
    return report


@pytest.fixture(scope="session")
def cluster(request: pytest.FixtureRequest) -> Cluster:
    """Start (or reuse) the local control plane: `make cluster` is idempotent and fast warm.

    Says so when the demo's operator runs too: it is no reason to stop it (it governs only
    the policies labelled trainwarden.dev/instance=demo), but a reader of the log should know.
    """
    subprocess.run([str(ROOT / "e2e" / "cluster" / "up.sh")], check=True, cwd=ROOT)
    env = read_env(CLUSTER_DIR / "cluster.env")
    kubeconfig = Path(env["KUBECONFIG"])
    api = config.new_client_from_config(config_file=str(kubeconfig))
    where = demo_operator(api)
    if where is not None:
        _say(
            request.config,
            f"the demo's operator (instance {DEMO_INSTANCE}) is running ({where}); "
            "it governs only the demo's policies",
        )
    return Cluster(kubeconfig, env["PROMETHEUS_URL"], env["DCGM_EXPORTER_URL"], api)


def _say(config: pytest.Config, line: str) -> None:
    """One line on the terminal, past pytest's output capture."""
    capture = config.pluginmanager.get_plugin("capturemanager")
    terminal = config.pluginmanager.get_plugin("terminalreporter")
    if capture is None or terminal is None:
        print(line)
        return
    with capture.global_and_fixture_disabled():
        terminal.write_line(line)


@pytest.fixture
def namespace(cluster: Cluster) -> Iterator[str]:
    """A fresh namespace per test; budgets the test named after it go with it."""
    name = f"tw-{uuid.uuid4().hex[:6]}"
    core = client.CoreV1Api(cluster.api)
    core.create_namespace(
        client.V1Namespace(metadata=client.V1ObjectMeta(name=name, labels={"team": name}))
    )
    yield name
    delete_policies_of(cluster, name)
    core.delete_namespace(name)


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


@pytest.fixture(scope="session")
def image(cluster: Cluster, crds: None) -> str:
    """The trainwarden image of the code as it is now, in the real node's containerd.

    (`crds`: the namespace fixture's teardown lists the policies.)
    """
    if os.geteuid() != 0:
        pytest.skip("the real node needs root (containerd, runc, kubelet); make cluster as root")
    subprocess.run([str(ROOT / "e2e/cluster/node/node-up.sh")], check=True, cwd=ROOT)
    subprocess.run([str(ROOT / "e2e/cluster/node/image.sh"), "--import"], check=True, cwd=ROOT)
    return read_env(CLUSTER_DIR / "images" / "images.env")["TRAINWARDEN_IMAGE"]


@pytest.fixture
def volume(cluster: Cluster, namespace: str) -> Iterator[Path]:
    """A PVC `checkpoints` in the namespace, bound to a fresh hostPath directory on the
    real node; yields where its checkpoints go on this machine (`<dir>/checkpoints`)."""
    host_dir = PV_ROOT / namespace
    shutil.rmtree(host_dir, ignore_errors=True)
    pv, pvc = hostpath_volume(namespace, host_dir)
    core = client.CoreV1Api(cluster.api)
    core.create_persistent_volume(pv)
    core.create_namespaced_persistent_volume_claim(namespace, pvc)
    wait_for(
        lambda: (
            core.read_namespaced_persistent_volume_claim("checkpoints", namespace).status.phase
            == "Bound"
        ),
        timeout=60,
        what="the PVC to bind to the hostPath PV",
    )
    yield host_dir / "checkpoints"
    client.BatchV1Api(cluster.api).delete_collection_namespaced_job(
        namespace, propagation_policy="Background"
    )
    core.delete_namespaced_persistent_volume_claim("checkpoints", namespace)
    core.delete_persistent_volume(pv["metadata"]["name"])


@pytest.fixture(scope="module")
def operator(
    cluster: Cluster, crds: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Operator]:
    """`trainwarden run` as a real process, one per test module so no two ever overlap."""
    running = start_operator(
        cluster.kubeconfig,
        tmp_path_factory.mktemp("operator") / "operator.log",
        prometheus_url=cluster.prometheus_url,
    )
    yield running
    running.stop()
