"""Benchmark: IdleReclaimPolicy evaluations against real pods on kwok GPU nodes.

Run (the local cluster must be up: `make cluster`):
    .venv/bin/python bench/idle_evaluation.py [--json FILE] [pods ...]   default: 100 2000

`--json bench/results/idle_evaluation.json` records the run; docs/idle.md's table is
rendered from that file (`bench/docs.py`), so the figures there are the last run's.

For each pod count it creates bench-only kwok nodes (tainted, so nothing else lands
there), that many 1-GPU pods on them, and their utilization in the DCGM stand-in (90 %
busy, 10 % idle) which the real Prometheus scrapes; then it runs `trainwarden run` with a
DryRun policy over them and forces evaluations by touching the policy. It prints, read
from the operator's own metrics: evaluation time, Prometheus queries per evaluation and
their latency, status size, and the operator's resident memory.
"""

import argparse
import json
import subprocess
import sys
import tempfile
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "e2e"))

from kubernetes import client, config
from record import recorded

from harness import (
    CLUSTER_DIR,
    ROOT,
    create_policy,
    forget_utilization,
    get_policy,
    idle_policy_manifest,
    publish_utilization,
    read_env,
    start_operator,
    wait_for,
)
from harness import Cluster as HarnessCluster

PODS_PER_NODE = 100
BENCH = "trainwarden.dev/bench"
NAMESPACE = "bench-idle"
POLICY = "bench-idle"
WINDOW_SECONDS = 120
EVALUATIONS = 8


def node(name: str) -> dict[str, Any]:
    capacity = {"cpu": "512", "memory": "4Ti", "pods": "110", "nvidia.com/gpu": "100"}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {"kwok.x-k8s.io/node": "fake"},
            "labels": {BENCH: "true", "type": "kwok", "nvidia.com/gpu.present": "true"},
        },
        "spec": {"taints": [{"key": BENCH, "value": "true", "effect": "NoSchedule"}]},
        "status": {"allocatable": capacity, "capacity": capacity},
    }


def pod(i: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"train-{i:05d}", "labels": {"team": f"t{i % 10}"}},
        "spec": {
            "nodeSelector": {BENCH: "true"},
            "tolerations": [{"key": BENCH, "operator": "Exists"}],
            "terminationGracePeriodSeconds": 0,
            "containers": [
                {
                    "name": "trainer",
                    "image": "example.invalid/trainer:1",
                    "resources": {"limits": {"nvidia.com/gpu": "1"}, "requests": {"cpu": "100m"}},
                }
            ],
        },
    }


def metric(text: str, name: str, labels: str = "") -> float:
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name) and labels in line and not line.startswith("#"):
            head, value = line.rsplit(" ", 1)
            if head.split("{")[0] == name:
                total += float(value)
    return total


def scrape(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as response:
        text: str = response.read().decode()
    return text


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def run(cluster: HarnessCluster, count: int) -> dict[str, Any]:
    core = client.CoreV1Api(cluster.api)
    nodes = [f"bench-gpu-{i}" for i in range((count + PODS_PER_NODE - 1) // PODS_PER_NODE)]
    for name in nodes:
        core.create_node(node(name))
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=NAMESPACE)))
    started = time.monotonic()
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda i: core.create_namespaced_pod(NAMESPACE, pod(i)), range(count)))

    def running() -> bool:
        pods = core.list_namespaced_pod(NAMESPACE, field_selector="status.phase=Running")
        return len(pods.items) == count

    wait_for(running, timeout=900, every=2, what=f"{count} pods running")
    print(f"  {count} pods created and running in {time.monotonic() - started:.0f}s")
    names = [f"train-{i:05d}" for i in range(count)]

    def publish(i: int) -> None:
        percent = 1.0 if i % 10 == 0 else 60.0
        publish_utilization(cluster, NAMESPACE, names[i], percent)

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(publish, range(count)))
    log = Path(tempfile.mkdtemp()) / "operator.log"
    operator = start_operator(cluster.kubeconfig, log, prometheus_url=cluster.prometheus_url)
    try:
        manifest = idle_policy_manifest(POLICY, NAMESPACE, mode="DryRun")
        manifest["spec"]["signal"]["window"] = f"{WINDOW_SECONDS}s"
        create_policy(cluster, "idlereclaimpolicies", manifest)

        def watched_all() -> dict[str, Any] | None:
            status = get_policy(cluster, "idlereclaimpolicies", POLICY).get("status", {})
            return status if status.get("podsWatched") == count else None

        wait_for(watched_all, timeout=300, what=f"the policy watching {count} pods")
        # A full window of samples must accumulate before verdicts are real (not Unknown).
        wait_for(
            lambda: (s := watched_all()) and s.get("podsUnknown") == 0 and s.get("podsIdle"),
            timeout=WINDOW_SECONDS + 180,
            every=2,
            what="every pod judged from a full window",
        )
        before = scrape(operator.metrics_url)
        custom = client.CustomObjectsApi(cluster.api)
        last = get_policy(cluster, "idlereclaimpolicies", POLICY)["status"]["lastEvaluated"]
        for i in range(EVALUATIONS):
            patch = {"metadata": {"annotations": {"bench.trainwarden.dev/poke": str(i)}}}
            custom.patch_cluster_custom_object(
                "trainwarden.dev", "v1alpha1", "idlereclaimpolicies", POLICY, patch
            )
            previous = last

            def evaluated(previous: str = previous) -> str | None:
                status = get_policy(cluster, "idlereclaimpolicies", POLICY)["status"]
                stamp: str = status["lastEvaluated"]
                return stamp if stamp != previous else None

            last = wait_for(evaluated, timeout=120, every=0.2, what="an evaluation")
        after = scrape(operator.metrics_url)
        status = get_policy(cluster, "idlereclaimpolicies", POLICY)["status"]
        kind = 'kind="IdleReclaimPolicy"'
        seconds = "trainwarden_reconcile_duration_seconds"
        evals = metric(after, f"{seconds}_count", kind) - metric(before, f"{seconds}_count", kind)
        spent = metric(after, f"{seconds}_sum", kind) - metric(before, f"{seconds}_sum", kind)
        queries = metric(after, "trainwarden_prometheus_queries_total") - metric(
            before, "trainwarden_prometheus_queries_total"
        )
        q = "trainwarden_prometheus_query_duration_seconds"
        query_time = metric(after, f"{q}_sum") - metric(before, f"{q}_sum")
        return {
            "pods": count,
            "evaluations": int(evals),
            "evaluation_ms": 1000 * spent / evals,
            "queries_per_evaluation": queries / evals,
            "query_ms": 1000 * query_time / max(queries, 1),
            "status_kib": len(json.dumps(status)) / 1024,
            "idle_seen": status.get("podsIdle", 0),
            "unknown": status.get("podsUnknown", 0),
            "operator_rss_mib": rss_mib(operator.process.pid),
        }
    finally:
        operator.stop()
        custom = client.CustomObjectsApi(cluster.api)
        custom.delete_cluster_custom_object(
            "trainwarden.dev", "v1alpha1", "idlereclaimpolicies", POLICY
        )
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda n: forget_utilization(cluster, NAMESPACE, n), names))
        core.delete_namespace(NAMESPACE)
        wait_for(
            lambda: NAMESPACE not in {n.metadata.name for n in core.list_namespace().items},
            timeout=600,
            every=2,
            what="the bench namespace gone",
        )
        for name in nodes:
            core.delete_node(name)


def main(counts: list[int], out: Path | None) -> None:
    subprocess.run([str(ROOT / "e2e" / "cluster" / "up.sh")], check=True, cwd=ROOT)
    env = read_env(CLUSTER_DIR / "cluster.env")
    kubeconfig = Path(env["KUBECONFIG"])
    config.load_kube_config(str(kubeconfig))
    api = config.new_client_from_config(config_file=str(kubeconfig))
    cluster = HarnessCluster(kubeconfig, env["PROMETHEUS_URL"], env["DCGM_EXPORTER_URL"], api)
    rows = []
    for count in counts:
        print(f"== {count} GPU pods")
        rows.append(run(cluster, count))
        print("  " + json.dumps(rows[-1]))
    print(
        "\npods   evaluations  eval ms  queries/eval  query ms  status KiB  idle  unknown  RSS MiB"
    )
    for r in rows:
        print(
            f"{r['pods']:>5}  {r['evaluations']:>11}  {r['evaluation_ms']:>7.1f}  "
            f"{r['queries_per_evaluation']:>12.2f}  {r['query_ms']:>8.1f}  "
            f"{r['status_kib']:>10.1f}  {r['idle_seen']:>4}  {r['unknown']:>7}  "
            f"{r['operator_rss_mib']:>7.0f}"
        )
    if out is not None:
        out.write_text(json.dumps(recorded(rows), indent=1) + "\n")
        print(f"\nrecorded in {out}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, help="record the run in this file")
    parser.add_argument("pods", type=int, nargs="*", default=[100, 2000])
    args = parser.parse_args()
    main(args.pods, args.json)
