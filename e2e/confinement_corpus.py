"""Every write the operator's code makes, made by that code: the budget's suspend, resume
and marks, holds started and handed over, idle marks, scale-downs, evictions, cordons,
the pruned PVC's annotation, a run's receipt mark, Kueue's deactivation, check state and
Active condition, the webhook's caBundle, and pruner Jobs of every shape `manifest`
renders. Each runs through `KubeClient` (or, for the caBundle, the ApiClient certs.py
uses) on a `DryRunApi`, so what reaches the API server is what production sends.
"""

import json
from collections.abc import Awaitable
from dataclasses import dataclass
from datetime import UTC, datetime

from confinement_writes import JSON, DryRunApi, Sent
from trainwarden.adapters import workloads
from trainwarden.adapters.kube_client import KubeClient
from trainwarden.admission import certs
from trainwarden.api.v1alpha1.checkpoint import CheckpointPolicySpec
from trainwarden.api.v1alpha1.names import (
    HELD_BY,
    IDLE_SINCE,
    IDLE_WARNED_AT,
    PRUNED,
    PRUNED_BY,
    RECEIPT,
)
from trainwarden.budget.holding import start_patch
from trainwarden.cache.cluster import ClusterCache
from trainwarden.cache.kueue import admission_check
from trainwarden.checkpoints import pruner
from trainwarden.core import nodes, reclaim
from trainwarden.core.keep import Keep
from trainwarden.core.kueue import kueue_workload
from trainwarden.core.locations import JobState, Location
from trainwarden.idle import actions as idle_actions
from trainwarden.idle import nodes as idle_nodes
from trainwarden.kueue import reconcile as kueue

NOW = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)
SPEC = {"scope": {"namespaces": ["team-a"]}, "storage": {"pvc": {}}}


@dataclass(frozen=True)
class Done:
    """A write the operator's code made: what, as sent."""

    what: str
    sent: Sent | None
    error: str | None = None
    """What the operator's client raised (a refusal), if anything."""


@dataclass(frozen=True)
class World:
    """What the writes are to, read as the operator reads it."""

    namespace: str
    node: str
    check: str
    """The AdmissionCheck this instance answers for."""
    controller: str
    configuration: str
    """The chart's MutatingWebhookConfiguration."""
    settings: pruner.PrunerSettings


class Corpus:
    def __init__(self, dry: DryRunApi, world: World) -> None:
        self.dry = dry
        self.kube = KubeClient(dry.api)
        self.world = world
        self.done: list[Done] = []

    async def read(self, api_version: str, kind: str, name: str) -> JSON:
        """As the operator reads it: nodes and AdmissionChecks from its cache (list)."""
        if kind in ("Node", "AdmissionCheck"):
            listed = await self.kube.list(api_version, kind)
            found = next((o for o in listed if o["metadata"]["name"] == name), None)
        else:
            found = await self.kube.get(api_version, kind, self.world.namespace, name)
        assert found is not None, f"{kind} {name}"
        return found

    async def made(self, what: str, call: Awaitable[object]) -> None:
        """Run the operator's code; what it sent is one write each (none: nothing to do)."""
        self._take()
        try:
            await call
        except Exception as error:  # a refusal, as the operator's client raises it
            said = _said(error)
            self.done += [Done(what, s, said) for s in self._take()] or [Done(what, None, said)]
            return
        self.done += [Done(what, sent) for sent in self._take()]

    def _take(self) -> list[Sent]:
        """The writes sent since the last take, but Events (create-only, not confined)."""
        return [s for s in self.dry.take() if "/events" not in s.path]

    async def workloads(self) -> None:
        job = await self.read("batch/v1", "Job", "train")
        labels, notes = workloads.budget_marks("team-budget", "exhausted", 3, NOW)
        await self.made("a budget suspends a Job", workloads.suspend(self.kube, job, labels, notes))
        idle, why = workloads.reclaim_marks("idle-gpus", "idle for 30m")
        await self.made(
            "an idle policy suspends a Job", workloads.suspend(self.kube, job, idle, why)
        )
        await self.made("a budget marks a Job", workloads.mark(self.kube, job, labels, notes))
        receipt = {"metadata": {"annotations": {RECEIPT: "run-train-1234"}}}
        await self.made(
            "a run's receipt is named on its Job (receipts/reconcile.py _annotate)",
            self.kube.merge_patch("batch/v1", "Job", self.world.namespace, "train", receipt),
        )
        suspended = await self.read("batch/v1", "Job", "suspended")
        await self.made("a budget resumes a Job", workloads.resume(self.kube, suspended))
        await self.made("a budget drops its marks", workloads.unmark(self.kube, suspended))
        held = await self.read("batch/v1", "Job", "held")
        await self.made(
            "a held Job is started (budget/holding.py start_patch)",
            workloads.patch_object(self.kube, held, start_patch(held)),
        )
        meta = held["metadata"]
        over = {
            "metadata": {"resourceVersion": meta["resourceVersion"], "annotations": {HELD_BY: "b2"}}
        }
        await self.made(
            "a hold is handed over (budget/holds.py _hand_over)",
            workloads.patch_object(self.kube, held, over),
        )
        for api_version, kind, name in (
            ("jobset.x-k8s.io/v1alpha2", "JobSet", "js"),
            ("kubeflow.org/v1", "PyTorchJob", "pt"),
            ("ray.io/v1", "RayJob", "rj"),
        ):
            obj = await self.read(api_version, kind, name)
            await self.made(
                f"a budget suspends a {kind}",
                workloads.suspend(self.kube, obj, labels, notes),
            )
            await self.made(f"a budget resumes a {kind}", workloads.resume(self.kube, obj))
        for kind in ("Deployment", "StatefulSet"):
            obj = await self.read("apps/v1", kind, kind.lower())
            await self.made(
                f"an idle policy scales a {kind} to zero",
                workloads.scale_down(self.kube, obj, idle, why),
            )

    async def pods(self) -> None:
        bare = await self.read("v1", "Pod", "bare")
        view = reclaim.PodView(
            bare["metadata"]["uid"], self.world.namespace, "bare", NOW, 1.0, "bare"
        )
        warned = {
            IDLE_SINCE: "2026-12-03T11:00:00Z",
            IDLE_WARNED_AT: "2026-12-03T11:30:00Z",
        }
        await self.made("an idle warning on a pod", idle_actions._mark_pod(self.kube, view, warned))
        withdrawn = dict.fromkeys(reclaim.MARKS)
        await self.made(
            "an idle warning withdrawn", idle_actions._mark_pod(self.kube, view, withdrawn)
        )
        await self.made(
            "a budget evicts a bare pod (adapters/workloads.py suspend)",
            workloads.suspend(self.kube, bare, {}, {}),
        )
        gated = await self.read("v1", "Pod", "gated")
        await self.made(
            "a held pod's gate is lifted (budget/holding.py start_patch)",
            workloads.patch_object(self.kube, gated, start_patch(gated)),
        )

    async def nodes(self) -> None:
        obj = await self.read("v1", "Node", self.world.node)
        facts = nodes.NodeFacts(
            uid=obj["metadata"]["uid"],
            name=self.world.node,
            resource_version=obj["metadata"]["resourceVersion"],
        )
        name = self.world.node
        for acts in (
            nodes.NodeActions(cordon=(name,), label=(name,)),
            nodes.NodeActions(uncordon=(name,), unlabel=(name,)),
        ):
            verbs, patch = idle_nodes._patches(acts, "idle-nodes")[name]
            await self.made(
                f"an idle node: {' and '.join(verbs)}",
                idle_nodes._patch(self.kube, "idle-nodes", facts, verbs, patch, NOW),
            )

    async def checkpoints(self) -> None:
        # As checkpoints/locations.py _said marks a pruned PVC.
        marks = {PRUNED_BY: "CheckpointPolicy/keep-3", PRUNED: "2026-12-03T12:00:00Z: 2 deleted"}
        await self.made(
            "a pruned PVC is annotated (checkpoints/locations.py _said)",
            self.kube.merge_patch(
                "v1",
                "PersistentVolumeClaim",
                self.world.namespace,
                "ckpt",
                {"metadata": {"annotations": marks}},
            ),
        )
        for mode in ("Enforce", "DryRun"):
            spec = CheckpointPolicySpec.model_validate({**SPEC, "mode": mode})
            states: tuple[JobState, ...] = ("Running", "Finished", "Unknown")
            for state, path, pins in zip(
                states, ("/", "/runs/a", "/runs/b/c"), (0, 1, 2), strict=True
            ):
                location = Location(
                    self.world.namespace,
                    "ckpt",
                    path,
                    pins=frozenset(f"checkpoint-{i}" for i in range(pins)),
                    resume_from=frozenset(f"checkpoint-{10 + i}" for i in range(pins)),
                )
                body = pruner.manifest(location, "keep-3", spec, state, NOW, self.world.settings)
                await self.made(f"a pruner Job ({mode}, {state}, {path})", self.kube.create(body))

    async def kueue(self) -> None:
        wl = await self.read("kueue.x-k8s.io/v1beta2", "Workload", "wl")
        labels, notes = workloads.budget_marks("team-budget", "exhausted", 3, NOW)
        await self.made(
            "a budget deactivates a Kueue Workload",
            workloads.deactivate(self.kube, wl, labels, notes),
        )
        await self.made(
            "a budget reactivates a Kueue Workload", workloads.reactivate(self.kube, wl)
        )
        cache = ClusterCache()
        check = await self.read("kueue.x-k8s.io/v1beta2", "AdmissionCheck", self.world.check)
        cache.kueue.set_check(check["metadata"]["uid"], admission_check(check))
        ctx = kueue.Checks(self.kube, cache, self.world.controller, [], NOW)
        record = kueue_workload(wl, Keep())
        await self.made(
            "the budget check decided on a Workload (kueue/reconcile.py decide_one)",
            kueue.decide_one(ctx, record, self.world.check, {}),
        )
        await self.made(
            "our AdmissionCheck marked Active (kueue/reconcile.py activate)",
            kueue.activate(self.kube, cache, self.world.controller, NOW),
        )

    async def webhook(self) -> None:
        ca, _ = certs.new_ca(NOW)
        await self.made(
            "the webhook's caBundle (admission/certs.py inject)",
            self.kube._run(lambda: certs.inject(self.dry.api, self.world.configuration, ca)),
        )

    async def all(self) -> list[Done]:
        for part in (
            self.workloads,
            self.pods,
            self.nodes,
            self.checkpoints,
            self.kueue,
            self.webhook,
        ):
            await part()
        return self.done


def _said(error: Exception) -> str:
    """The API server's message in what the client raised."""
    try:
        message = json.loads(getattr(error, "body", None) or "{}").get("message")
    except ValueError:
        message = None
    return f"{type(error).__name__}: {message or error}"[:500]
