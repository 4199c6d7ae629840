"""A deleted budget's release against whatever tenants wrote (hypothesis over the fake API):
Jobs and bare pods with any mix of suspension, the budget's or another's labels and hold
marks, Kueue's queue label, an idle reclaim's label, and a last status whose records name
some of them, name uids that are not theirs, or name nothing that exists.

Invariant: after the release, a Job runs that was suspended before only if the budget's
record names its uid and it carried the budget's label (one Kueue has no Workload of was
suspended, so is resumed, through its own field), or the webhook's hold mark of the
budget was on it (not Kueue's, not suspended by a budget or reclaimed since); a pod lost
its gate only if it carried the budget's hold mark; nothing else changed at all.
"""

import asyncio
from datetime import timedelta
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trainwarden.api.v1alpha1.names import HELD_BY, RECLAIMED_BY, SUSPENDED_BY
from trainwarden.budget import departure
from trainwarden.budget.holds import HeldIndex
from trainwarden.core.admission import GATE
from trainwarden.core.workloads import KUEUE_QUEUE
from trainwarden.testing.builders import JobBuilder, NamespaceBuilder, PodBuilder
from world import JSON, World

NS = "team-a"
JOB = ("batch/v1", "Job")

jobs = st.fixed_dictionaries(
    {
        "suspended": st.booleans(),
        "suspended_by": st.sampled_from([None, "a", "b"]),
        "held_by": st.sampled_from([None, "a", "b"]),
        "kueue": st.booleans(),
        "reclaimed": st.booleans(),
        "recorded": st.sampled_from(["no", "yes", "wrong-uid"]),
    }
)
pods = st.fixed_dictionaries({"gated": st.booleans(), "held_by": st.sampled_from([None, "a", "b"])})


def _job(world: World, i: int, j: dict[str, Any]) -> JSON:
    labels = {k: v for k, v in ((SUSPENDED_BY, j["suspended_by"]),) if v}
    labels |= {KUEUE_QUEUE: "q"} if j["kueue"] else {}
    labels |= {RECLAIMED_BY: "idle"} if j["reclaimed"] else {}
    annotations = {HELD_BY: j["held_by"]} if j["held_by"] else {}
    made = JobBuilder(f"j{i}", NS).gpus(1).suspended(j["suspended"]).labels(labels)
    return world.put(made.annotations(annotations).build())


def _pod(world: World, i: int, p: dict[str, Any]) -> JSON:
    made = (
        PodBuilder(f"p{i}", NS).gpus(1).annotations({HELD_BY: p["held_by"]} if p["held_by"] else {})
    )
    body = made.build()
    if p["gated"]:
        body["spec"]["schedulingGates"] = [{"name": GATE}]
    return world.put(body)


def _record(job: JSON, how: str, world: World) -> JSON:
    meta = job["metadata"]
    uid = meta["uid"] if how == "yes" else "not-" + meta["uid"]
    ref = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "namespace": NS,
        "name": meta["name"],
        "uid": uid,
    }
    at = (world.now - timedelta(minutes=10)).isoformat()  # not fresh: the cache is believed
    return {"ref": ref, "suspendedAt": at, "generation": 1}


@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(jobs, max_size=6), st.lists(pods, max_size=3))
def test_a_deleted_budget_releases_only_what_it_can_prove_is_its_own(
    job_specs: list[dict[str, Any]], pod_specs: list[dict[str, Any]]
) -> None:
    world = World()
    world.put(NamespaceBuilder(NS).build())
    index = HeldIndex(lambda _: None)
    world.cache.listeners.add(index)
    made = [_job(world, i, j) for i, j in enumerate(job_specs)]
    gated = [_pod(world, i, p) for i, p in enumerate(pod_specs)]
    world.sync()
    records = [_record(job, j["recorded"], world) for job, j in zip(made, job_specs, strict=True)
               if j["recorded"] != "no"]  # fmt: skip
    body = {"apiVersion": "trainwarden.dev/v1alpha1", "kind": "TrainingBudget",
            "metadata": {"name": "a"}, "status": {"suspended": records}}  # fmt: skip
    held = list(index.by_budget.get("a", {}).values())
    d = departure.Departure(world.fake, world.cache, body, held, lambda: [], world.now)
    asyncio.run(departure.release(d))

    for job, j in zip(made, job_specs, strict=True):
        after = world.read(*JOB, NS, job["metadata"]["name"])
        marks_ok = not (j["kueue"] or j["suspended_by"] or j["reclaimed"])
        resumable = j["recorded"] == "yes" and j["suspended_by"] == "a"
        releasable = j["held_by"] == "a" and marks_ok
        if j["suspended"] and (resumable or releasable):
            assert after["spec"]["suspend"] is False, (j, after["metadata"])
        else:
            assert after["spec"] == job["spec"], j
            assert after["metadata"].get("labels") == job["metadata"].get("labels"), j
            assert after["metadata"].get("annotations") == job["metadata"].get("annotations"), j
    for pod, p in zip(gated, pod_specs, strict=True):
        after = world.read("v1", "Pod", NS, pod["metadata"]["name"])
        if p["gated"] and p["held_by"] == "a":
            assert not after["spec"].get("schedulingGates"), p
        else:
            assert after["spec"].get("schedulingGates") == pod["spec"].get("schedulingGates"), p
            assert after["metadata"].get("annotations") == pod["metadata"].get("annotations"), p
