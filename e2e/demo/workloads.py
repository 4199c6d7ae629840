"""Scene: the vision and research teams' simulated training jobs on the kwok GPU nodes, the
utilization their GPUs report (through the DCGM exporter stand-in and the real Prometheus),
and what became of each Job."""

from dataclasses import dataclass
from typing import Any

from demo.shell import (
    apply,
    get,
    kubectl,
    prometheus,
    say,
    set_utilization,
    show,
)
from harness import simulated, wait_for
from trainwarden.testing.builders import JobBuilder, NamespaceBuilder

IDLE_JOB = "vit-pretrain"
"""The one job whose GPUs sit at 3 %: the idle scene reclaims it."""
OVERSIZED_JOB = "detr-finetune"
"""Holds 4 GPUs and keeps 2 busy: the idle policy recommends requesting 2."""
OVERSIZED_GPUS = [86.0, 84.0, 2.0, 1.0]


@dataclass(frozen=True)
class TrainingJob:
    namespace: str
    name: str
    labels: dict[str, str]
    gpus: int
    lifetime: str | None = None
    """How long it runs before it completes; None: until stopped (or it crashes)."""

    def manifest(self) -> dict[str, Any]:
        job = simulated(JobBuilder(self.name), self.gpus).suspended(False).backoff_limit(0)
        job.labels(self.labels).pod_labels(self.labels)
        if self.name.endswith("-crash"):
            job.fails_after("15s")
        elif self.lifetime:
            job.completes_after(self.lifetime)
        return job.build()

    def story(self) -> str:
        if self.lifetime:
            return f"completes after {self.lifetime}"
        return "fails after 15s" if self.name.endswith("crash") else "runs until stopped"


def _vision(project: str, experiment: str) -> dict[str, str]:
    return {"team": "vision", "project": project, "experiment": experiment}


JOBS = [
    TrainingJob("vision", "resnet-sweep-a", _vision("resnet", "a"), 4, lifetime="40s"),
    TrainingJob("vision", IDLE_JOB, _vision("vit", "base"), 8),
    TrainingJob("vision", "vit-crash", _vision("vit", "lr-hi"), 2),
    TrainingJob("vision", OVERSIZED_JOB, _vision("detr", "base"), 4),
    TrainingJob(
        "research",
        "llm-finetune",
        {"team": "research", "project": "llm", "trainwarden.dev/budget": "research-weekly"},
        8,
    ),
]


def clean_slate() -> None:
    """A re-run starts from a clean slate: what an earlier run left would change the story."""
    kubectl("delete", "tb", "research-gpu-daily", "--ignore-not-found")
    kubectl("delete", "irp", "vision-idle-gpus", "--ignore-not-found")
    kubectl("delete", "namespace", "vision", "research", "--ignore-not-found", "--timeout=120s")


def submit() -> list[dict[str, Any]]:
    """The teams' namespaces and jobs; once their pods run, their GPUs' utilization."""
    say("Submitting simulated training jobs for the vision and research teams")
    for team in ("vision", "research"):
        apply(NamespaceBuilder(team).labels(team=team).build())
    for job in JOBS:
        apply(job.manifest(), namespace=job.namespace)
        print(f"job {job.namespace}/{job.name}: {job.gpus} GPU(s), {job.story()}")
    pods = wait_for(_all_placed, timeout=90, what="the training pods to start")
    for pod in pods:
        name = pod["metadata"]["name"]
        busy = 3.0 if name.startswith(IDLE_JOB) else 87.0
        per_gpu = OVERSIZED_GPUS if name.startswith(OVERSIZED_JOB) else None
        gpus = int(pod["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"])
        node = pod["spec"]["nodeName"]
        set_utilization(pod["metadata"]["namespace"], name, busy, gpus, node, per_gpu)
    show("get", "pods", "-A", "-l", "team", "-o", "wide")
    return pods


def _all_placed() -> list[dict[str, Any]] | None:
    """The demo's pods once each job has one on a node (other namespaces' pods with a team
    label, a test's running alongside, are not the demo's)."""
    teams = {job.namespace for job in JOBS}
    pods = [
        p for p in get("pods", "-A", "-l", "team")["items"] if p["metadata"]["namespace"] in teams
    ]
    placed = [
        p
        for p in pods
        if p["spec"].get("nodeName")
        and p["status"].get("phase") in ("Running", "Succeeded", "Failed")
    ]
    return placed if len(placed) >= len(JOBS) else None


def show_utilization(pods: list[dict[str, Any]]) -> None:
    say("Accelerator utilization per pod, from the real Prometheus (DCGM_FI_DEV_GPU_UTIL)")
    query = 'avg by (namespace, pod) (DCGM_FI_DEV_GPU_UTIL{namespace=~"vision|research"})'
    wait_for(lambda: len(prometheus(query)) >= len(pods), timeout=60, what="a utilization scrape")
    for series in prometheus(query):
        m = series["metric"]
        print(f"{m['namespace']}/{m['pod']}: {float(series['value'][1]):.0f} %")


def show_outcomes() -> None:
    say("Job outcomes as the Job controller sees them")
    wait_for(lambda: "Failed" in kubectl("get", "jobs", "-A"), timeout=60, what="vit-crash to fail")
    show("get", "jobs", "-A")


def show_nodes() -> None:
    say("Simulated GPU nodes (kwok) with their accelerators")
    show("get", "nodes", "-L", "nvidia.com/gpu.product", "-L", "nvidia.com/gpu.count")
