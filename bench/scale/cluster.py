"""The local cluster as the benchmark sees it, and the measured clients' identities.

Each measured client (the operator, the naive janitor, the bare watcher) gets its own user:
a client certificate signed by the cluster's CA with CN trainwarden-bench-<name>, bound to
cluster-admin (so no permission ever changes what it does), and a FlowSchema matching only
that user, so the API server counts its requests in
apiserver_flowcontrol_dispatched_requests_total{flow_schema="bench-scale-<name>"}. The
FlowSchema sends it to the priority level a ServiceAccount would get (workload-low), as for
an operator installed with its Helm chart. Its kubeconfig points at the counting proxy.
"""

from __future__ import annotations

import base64
import subprocess
from dataclasses import dataclass
from pathlib import Path

import yaml

from scale.kube import CLUSTER_ROLE_BINDINGS, FLOW_SCHEMAS, Kube, Obj

ROOT = Path(__file__).resolve().parents[2]
CLUSTER_DIR = ROOT / ".cluster"
BENCH_LABEL = "bench.trainwarden.dev/scale"
PRIORITY_LEVEL = "workload-low"


@dataclass(frozen=True)
class Env:
    """What `make cluster` wrote to .cluster/cluster.env."""

    kubeconfig: Path
    api_url: str
    prometheus_url: str
    dcgm_url: str
    kubectl: Path
    pki: Path

    @property
    def api_port(self) -> int:
        return int(self.api_url.rsplit(":", 1)[1])

    @property
    def apiserver_pid(self) -> int | None:
        try:
            return int((CLUSTER_DIR / "state" / "pids" / "kube-apiserver.pid").read_text())
        except (OSError, ValueError):
            return None


def read_env() -> Env:
    path = CLUSTER_DIR / "cluster.env"
    if not path.exists():
        raise SystemExit(f"{path} is missing: start the local cluster first (make cluster)")
    pairs = dict(line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)
    return Env(
        kubeconfig=Path(pairs["KUBECONFIG"]),
        api_url=pairs["KUBE_APISERVER_URL"],
        prometheus_url=pairs["PROMETHEUS_URL"],
        dcgm_url=pairs["DCGM_EXPORTER_URL"],
        kubectl=Path(pairs["KUBECTL"]),
        pki=CLUSTER_DIR / "state" / "pki",
    )


def kubectl(env: Env, *args: str, stdin: str | None = None, timeout: float = 120) -> str:
    result = subprocess.run(
        [str(env.kubectl), "--kubeconfig", str(env.kubeconfig), *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if result.returncode != 0:
        raise RuntimeError(f"kubectl {' '.join(args)}: {result.stderr.strip()}")
    return result.stdout


def install_crds(env: Env) -> None:
    """The CRDs of the checked-out version, as the e2e suite installs them."""
    kubectl(env, "apply", "--server-side", "--force-conflicts", "-f", str(ROOT / "crds"))
    kubectl(
        env,
        "wait",
        "--for=condition=Established",
        "--timeout=60s",
        "crd",
        "-l",
        "app.kubernetes.io/name=trainwarden",
    )


@dataclass(frozen=True)
class Identity:
    name: str
    user: str
    flow_schema: str
    kubeconfig: Path
    """Points at the proxy's port for this client."""


def _b64(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode()


def make_identity(env: Env, admin: Kube, name: str, proxy_port: int, workdir: Path) -> Identity:
    user = f"trainwarden-bench-{name}"
    key, crt, csr = (workdir / f"{name}.{ext}" for ext in ("key", "crt", "csr"))
    ext = workdir / f"{name}.ext"
    ext.write_text(
        "basicConstraints=critical,CA:FALSE\n"
        "keyUsage=critical,digitalSignature\n"
        "extendedKeyUsage=clientAuth\n"
    )
    subprocess.run(
        ["openssl", "req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
         "-nodes", "-keyout", str(key), "-out", str(csr),
         "-subj", f"/O=trainwarden-bench/CN={user}"],
        check=True,
        capture_output=True,
    )  # fmt: skip
    subprocess.run(
        ["openssl", "x509", "-req", "-in", str(csr), "-CA", str(env.pki / "ca.crt"),
         "-CAkey", str(env.pki / "ca.key"), "-CAcreateserial", "-CAserial", str(workdir / "ca.srl"),
         "-days", "7", "-sha256", "-extfile", str(ext), "-out", str(crt)],
        check=True,
        capture_output=True,
    )  # fmt: skip
    kubeconfig = workdir / f"{name}.kubeconfig"
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "bench",
                "cluster": {
                    "server": f"https://127.0.0.1:{proxy_port}",
                    "certificate-authority-data": _b64(env.pki / "ca.crt"),
                },
            }
        ],
        "users": [
            {
                "name": user,
                "user": {"client-certificate-data": _b64(crt), "client-key-data": _b64(key)},
            }
        ],
        "contexts": [
            {"name": "bench", "context": {"cluster": "bench", "user": user, "namespace": "default"}}
        ],
        "current-context": "bench",
    }
    kubeconfig.write_text(yaml.safe_dump(config))
    kubeconfig.chmod(0o600)
    flow = f"bench-scale-{name}"
    labels = {BENCH_LABEL: "true"}
    admin.delete(CLUSTER_ROLE_BINDINGS, flow)
    admin.create(
        CLUSTER_ROLE_BINDINGS,
        {
            "metadata": {"name": flow, "labels": labels},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "cluster-admin",
            },
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
        },
    )
    admin.delete(FLOW_SCHEMAS, flow)
    admin.create(FLOW_SCHEMAS, flow_schema(flow, user))
    return Identity(name, user, flow, kubeconfig)


def flow_schema(name: str, user: str) -> Obj:
    return {
        "metadata": {"name": name, "labels": {BENCH_LABEL: "true"}},
        "spec": {
            # Before the catch-all schemas (service-accounts 9000, global-default 9900);
            # the user matches nothing else.
            "matchingPrecedence": 1000,
            "priorityLevelConfiguration": {"name": PRIORITY_LEVEL},
            "distinguisherMethod": {"type": "ByUser"},
            "rules": [
                {
                    "subjects": [{"kind": "User", "user": {"name": user}}],
                    "resourceRules": [
                        {
                            "verbs": ["*"],
                            "apiGroups": ["*"],
                            "resources": ["*"],
                            "clusterScope": True,
                            "namespaces": ["*"],
                        }
                    ],
                    "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}],
                }
            ],
        },
    }
