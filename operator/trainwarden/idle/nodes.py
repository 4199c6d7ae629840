"""Accelerator nodes no accelerator pod uses: found from the cache, reported, and (if the
policy says so) cordoned or labelled for the autoscaler, reversibly."""

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from trainwarden import logs, metrics
from trainwarden.adapters.kube import JSON, Conflict, Gone, Kube
from trainwarden.api.v1alpha1.idle import IdleNode, IdleNodes, IdleReclaimPolicySpec
from trainwarden.api.v1alpha1.names import CORDONED_BY, IDLE_NODE_LABEL
from trainwarden.api.v1alpha1.names import IDLE_KIND as KIND
from trainwarden.cache.cluster import ClusterCache
from trainwarden.core import nodes
from trainwarden.core.nodes import NodeFacts
from trainwarden.core.scope import selects

log = logs.get(__name__)


@dataclass(frozen=True)
class Found:
    idle: list[IdleNode]
    since: dict[str, datetime]
    """Since when each quiet node has been quiet: memory for the next evaluation."""
    pending: list[str]


def _patches(acts: nodes.NodeActions, policy: str) -> dict[str, tuple[list[str], JSON]]:
    """Per node, what to do and one merge patch doing all of it (a reader never sees a
    node cordoned but not yet labelled)."""
    each: dict[str, JSON] = {
        "cordon": {
            "spec": {"unschedulable": True},
            "metadata": {"annotations": {CORDONED_BY: policy}},
        },
        "uncordon": dict(nodes.UNCORDON),
        "label": {"metadata": {"labels": {IDLE_NODE_LABEL: "true"}}},
        "unlabel": dict(nodes.UNLABEL),
    }
    found: dict[str, tuple[list[str], JSON]] = {}
    for verb, names in (
        ("cordon", acts.cordon),
        ("uncordon", acts.uncordon),
        ("label", acts.label),
        ("unlabel", acts.unlabel),
    ):
        for name in names:
            verbs, patch = found.setdefault(name, ([], {}))
            verbs.append(verb)
            found[name] = (verbs, _combined(patch, each[verb]))
    return found


def _combined(a: JSON, b: JSON) -> JSON:
    """Two merge patches as one: nested objects merged, nulls kept (they remove keys)."""
    out = dict(a)
    for key, value in b.items():
        both = isinstance(value, dict) and isinstance(out.get(key), dict)
        out[key] = _combined(out[key], value) if both else value
    return out


def _busy(cache: ClusterCache, resources: list[str]) -> set[str]:
    return {
        f.node
        for f in cache.pods_now()
        if f.node
        and f.snapshot.outcome == "Running"
        and not f.deleting
        and any(f.snapshot.requests.get(r, 0.0) > 0 for r in resources)
    }


async def _patch(
    kube: Kube, policy: str, node: NodeFacts, verbs: list[str], patch: JSON, why: str
) -> str | None:
    """One node's changes, with an Event each saying `why`; a pendingActions line if
    deferred. The patch is conditional on the version the decision saw (Conflict: decided
    again)."""
    if node.resource_version:
        patch = _combined(patch, {"metadata": {"resourceVersion": node.resource_version}})
    try:
        await kube.merge_patch("v1", "Node", None, node.name, patch)
    except (Conflict, Gone) as error:
        return f"deferred: {' and '.join(verbs)} Node/{node.name}: {error}"
    # The node's uid, so `kubectl describe node` lists the Events.
    obj = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": node.name, "uid": node.uid}}
    for verb in verbs:
        message = f"IdleReclaimPolicy {policy}: {verb} ({why})"
        reason = f"IdleNode{verb.capitalize()}"
        await kube.event(obj, type_="Normal", reason=reason, message=message, action=verb)
        log.info("idle node", object=f"Node/{node.name}", policy=f"{KIND}/{policy}", action=verb)
        metrics.report_action(KIND, policy, verb.capitalize(), "done")
    return None


async def idle_nodes(
    kube: Kube,
    cache: ClusterCache,
    wanted: IdleNodes,
    *,
    policy: str,
    resources: list[str],
    known: Mapping[str, datetime],
    enforce: bool,
    now: datetime,
) -> Found:
    """Accelerator nodes no accelerator pod has used for `wanted.after`; cordoned or
    labelled if the policy says so (DryRun: only said)."""
    found = {
        name: facts
        for name, facts in cache.nodes_now().items()
        if wanted.node_selector is None or selects(wanted.node_selector, facts.labels)
    }
    busy = _busy(cache, resources)
    since = nodes.idle_since(found, busy, known, resources=resources, now=now)
    idle = nodes.idle_for(since, now, wanted.after)
    acts = nodes.node_actions(
        found, set(idle), busy, policy=policy, cordon=wanted.cordon, label=wanted.label
    )
    pending = []
    for node, (verbs, patch) in _patches(acts, policy).items():
        if not enforce:
            pending += [f"would {verb} Node/{node}" for verb in verbs]
            continue
        quiet = since.get(node, now).isoformat(timespec="seconds")
        why = f"no accelerator pods since {quiet}"
        line = await _patch(kube, policy, found[node], verbs, patch, why)
        if line is not None:
            pending.append(line)
    return Found([IdleNode(name=n, since=since[n]) for n in idle], since, pending)


async def quiet_nodes(
    kube: Kube,
    cache: ClusterCache,
    spec: IdleReclaimPolicySpec,
    since: dict[str, datetime] | None,
    reported: Sequence[IdleNode],
    name: str,
    now: datetime,
) -> tuple[dict[str, datetime] | None, list[IdleNode], list[str]]:
    """One policy's idle nodes: since when each has been quiet (None: not watched; from
    `reported` in status after a restart), the nodes to report, what is pending."""
    wanted = spec.idle_nodes
    if wanted is None:
        return None, [], []
    known = since if since is not None else {n.name: n.since for n in reported}
    found = await idle_nodes(
        kube,
        cache,
        wanted,
        policy=name,
        resources=list(spec.accelerators),
        known=known,
        enforce=spec.mode == "Enforce",
        now=now,
    )
    return found.since, list(found.idle), found.pending


async def let_go(
    kube: Kube, cache: ClusterCache, policy: str, reported: Collection[str], kept: Collection[str]
) -> list[str]:
    """A deleted policy's marks on nodes lifted: the cordons its mark names, and the
    idle-node label on the nodes it last reported idle (`reported`, from the status its
    DELETED event carried) unless another policy reports them idle too (`kept`). What
    was deferred, as lines (empty: done)."""
    found = cache.nodes_now()
    acts = nodes.left_behind(found, policy, reported, kept)
    deferred = []
    for node, (verbs, patch) in _patches(acts, policy).items():
        line = await _patch(kube, policy, found[node], verbs, patch, "the policy was deleted")
        if line is not None:
            deferred.append(line)
    return deferred
