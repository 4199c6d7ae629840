"""Pre-start estimates: the pods a manifest runs at once, its declared run time, and what
that costs by a budget's rates; checked against a brute-force sum over its pods."""

import math
from datetime import timedelta

from hypothesis import given
from hypothesis import strategies as st

from trainwarden.api.v1alpha1.names import EXPECTED_DURATION
from trainwarden.core.accounting import AcceleratorPrice, PriceTable
from trainwarden.core.estimate import KUEUE_MAX_EXEC, Demand, demand, describe, estimate, shares
from trainwarden.testing.builders import (
    GPU,
    JobBuilder,
    JobSetBuilder,
    ObjectBuilder,
    PodBuilder,
    PyTorchJobBuilder,
    RayJobBuilder,
)

A100 = {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}
PRICES = PriceTable(
    (AcceleratorPrice(GPU, A100, 2.0), AcceleratorPrice(GPU, {"x": "h100"}, 4.0)),
    cpu_core_hour=0.05,
    memory_gib_hour=0.01,
)


def test_a_job_runs_its_parallelism_never_more_than_its_completions() -> None:
    job = JobBuilder("j", "ns").gpus(8).cpu("4").parallelism(4)
    assert demand(job.build()).pods == 4
    assert demand(job.completions(2).build()).pods == 2
    assert demand(JobBuilder("one", "ns").build()).pods == 1


def test_each_kind_counts_the_pods_of_every_template() -> None:
    worker = PodBuilder("w").gpus(8)
    head = PodBuilder("h").cpu("2")
    jobset = JobSetBuilder("js", "ns").replicated_job("w", replicas=3, template=worker)
    pytorch = (
        PyTorchJobBuilder("pt", "ns")
        .replica("Master", template=worker)
        .replica("Worker", replicas=7, template=worker)
    )
    ray = RayJobBuilder("rj", "ns").field(
        "spec.rayClusterSpec",
        {
            "headGroupSpec": {"template": head.template()},
            "workerGroupSpecs": [{"groupName": "g", "replicas": 2, "template": worker.template()}],
        },
    )
    workload = ObjectBuilder("kueue.x-k8s.io/v1beta2", "Workload", "wl", "ns").field(
        "spec.podSets", [{"name": "main", "count": 5, "template": worker.template()}]
    )
    gpus = {
        kind: estimate(demand(m.build()), [GPU], PRICES).hourly.accelerator_hours.get(GPU, 0)
        for kind, m in [
            ("JobSet", jobset),
            ("PyTorchJob", pytorch),
            ("RayJob", ray),
            ("Workload", workload),
            ("Pod", worker),
        ]
    }
    assert gpus == {"JobSet": 24, "PyTorchJob": 64, "RayJob": 16, "Workload": 40, "Pod": 8}


def test_the_declared_duration_in_order_of_precedence() -> None:
    job = JobBuilder("j", "ns").active_deadline(7200)
    assert demand(job.build()).duration == timedelta(hours=2)
    assert demand(job.labels({KUEUE_MAX_EXEC: "600"}).build()).duration == timedelta(minutes=10)
    declared = demand(job.annotations({EXPECTED_DURATION: "6h"}).build())
    assert (declared.duration, declared.duration_source) == (timedelta(hours=6), EXPECTED_DURATION)
    workload = ObjectBuilder("kueue.x-k8s.io/v1beta2", "Workload", "wl", "ns")
    assert demand(workload.field("spec.maximumExecutionTimeSeconds", 60).build()).duration == (
        timedelta(minutes=1)
    )


def test_an_unreadable_duration_is_reported_never_zero() -> None:
    for bad in ("soon", "0s", "-1h", "9" * 200):
        found = demand(JobBuilder("j", "ns").annotations({EXPECTED_DURATION: bad}).build())
        assert found.duration is None
        assert found.problem
        assert EXPECTED_DURATION in found.problem
        e = estimate(found, [GPU], PRICES)
        assert e.total is None
        assert found.problem in describe(found, e)
    for bad_seconds in ("ten", "0", "-5", str(10**12)):
        found = demand(JobBuilder("j", "ns").labels({KUEUE_MAX_EXEC: bad_seconds}).build())
        assert found.duration is None
        assert found.problem


def test_tenant_written_counts_cannot_blow_up_an_estimate() -> None:
    job = JobBuilder("j", "ns").gpus(1).build()
    for bad in (10**12, -3, "7", True, 1.5, None):
        job["spec"]["parallelism"] = bad
        assert demand(job).pods == 1
    assert demand({"kind": "Job", "spec": "nonsense"}).pods == 1
    assert demand({"kind": "Mystery"}).groups == ()
    assert demand({}).pods == 0


def test_a_rate_follows_the_node_model_the_pods_select_else_the_highest() -> None:
    pinned = JobBuilder("j", "ns").gpus(2).node_selector(A100).build()
    loose = JobBuilder("j", "ns").gpus(2).build()
    assert estimate(demand(pinned), [GPU], PRICES).hourly.cost == 4.0
    e = estimate(demand(loose), [GPU], PRICES)
    assert (e.hourly.cost, e.highest_rate) == (8.0, True)


def test_shares_of_what_remains() -> None:
    e = estimate(demand(JobBuilder("j", "ns").gpus(8).build()), [GPU], PRICES)
    wanted = e.hourly.scaled(2)  # 16 accelerator-hours
    found = shares(wanted, {"acceleratorHours": 10.0, "cpuCoreHours": 0.0})
    assert found["acceleratorHours"] == 160.0
    assert found["cpuCoreHours"] == 0.0, "it needs no cores: nothing to overrun"
    assert shares(wanted, {"acceleratorHours": 0.0})["acceleratorHours"] == math.inf


pods = st.builds(
    lambda gpus, cpu, mem, replicas, pinned: (gpus, cpu, mem, replicas, pinned),
    st.integers(0, 8),
    st.integers(0, 64),
    st.integers(0, 512),
    st.integers(0, 20),
    st.booleans(),
)


@given(st.lists(pods, min_size=1, max_size=5), st.integers(1, 10_000))
def test_the_estimate_is_the_sum_over_every_pod_it_runs(
    roles: list[tuple[int, int, int, int, bool]], seconds: int
) -> None:
    """A PyTorchJob of random roles against a pod-by-pod, second-by-second sum."""
    job = PyTorchJobBuilder("pt", "ns").annotations({EXPECTED_DURATION: f"{seconds}s"})
    for i, (gpus, cpu, mem, replicas, pinned) in enumerate(roles):
        pod = PodBuilder(f"p{i}").gpus(gpus).requests(cpu=str(cpu), memory=f"{mem}Gi")
        job.replica(f"r{i}", replicas=replicas, template=pod.node_selector(A100) if pinned else pod)
    found: Demand = demand(job.build())
    e = estimate(found, [GPU], PRICES)
    gpu_seconds = cost = 0.0
    for gpus, cpu, mem, replicas, pinned in roles:
        for _pod in range(replicas):
            rate = gpus * (2.0 if pinned else 4.0) + cpu * 0.05 + mem * 0.01
            gpu_seconds += gpus * seconds
            cost += rate * seconds / 3600
    assert e.total is not None
    assert math.isclose(e.total.accelerator_hours.get(GPU, 0.0), gpu_seconds / 3600, abs_tol=1e-9)
    assert math.isclose(e.total.cost, cost, rel_tol=1e-9, abs_tol=1e-9)
    assert found.pods == sum(r[3] for r in roles)
