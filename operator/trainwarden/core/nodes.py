"""Accelerator nodes that no accelerator pod uses: how long, and what to do about it.

A node counts as idle once no running pod on it has requested an accelerator for
`after`. Cordoning is reversible and marked: trainwarden lifts only the cordons it set, and
a user who uncordons a node wins (it is not cordoned again until it has been busy).
"""

import sys
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from trainwarden.api.v1alpha1.idle import MAX_LISTED
from trainwarden.api.v1alpha1.names import CORDONED_BY, IDLE_NODE_LABEL
from trainwarden.core.keep import LABEL_VALUE, NAME, SHORT, Keep, bounded, kept_labels, label_key
from trainwarden.core.quantity import parse_quantity
from trainwarden.core.shapes import mapping

MAX_NODE_LABELS = 128
"""Labels a node's record keeps besides those the code and the policies read (which it
always keeps): the others, by key, that pods waiting for room may select. Nodes are
written by admins and kubelets, not tenants: this only bounds the record."""


@dataclass(frozen=True, slots=True)
class NodeFacts:
    """The index entry for one node."""

    labels: Mapping[str, str] = field(default_factory=dict)
    allocatable: Mapping[str, float] = field(default_factory=dict)
    unschedulable: bool = False
    cordoned_by: str | None = None
    uid: str = ""
    name: str = ""
    resource_version: str = ""
    """The version seen: our writes are conditional on it (a cordon that an admin set
    meanwhile must never be marked as ours, nor be lifted by us later)."""

    def accelerators(self, resources: Iterable[str]) -> float:
        return sum(self.allocatable.get(r, 0.0) for r in resources)


def node_facts(node: Mapping[str, Any], keep: Keep) -> NodeFacts:
    """The record the cache keeps of a node: the labels and resources `keep` names."""
    meta = mapping(node.get("metadata"))
    raw, allocatable = mapping(mapping(node.get("status")).get("allocatable")), {}
    for name in keep.resources:
        try:
            allocatable[name] = float(parse_quantity(raw[name]))
        except (KeyError, ValueError, AttributeError):
            continue
    cordoned_by = mapping(meta.get("annotations")).get(CORDONED_BY)
    return NodeFacts(
        labels=_labels(mapping(meta.get("labels")), keep.node_labels),
        allocatable=allocatable,
        unschedulable=bool(mapping(node.get("spec")).get("unschedulable")),
        cordoned_by=bounded(cordoned_by, NAME) if cordoned_by is not None else None,
        uid=bounded(meta.get("uid") or "", SHORT),
        name=bounded(meta.get("name") or "", NAME),
        resource_version=bounded(meta.get("resourceVersion") or "", SHORT),
    )


def _labels(labels: Mapping[str, Any], read: frozenset[str]) -> dict[str, str]:
    found = kept_labels(labels, read)
    others = sorted(k for k in labels if k not in found and label_key(k))[:MAX_NODE_LABELS]
    return found | {sys.intern(k): sys.intern(bounded(labels[k], LABEL_VALUE)) for k in others}


def idle_since(
    nodes: Mapping[str, NodeFacts],
    busy: Collection[str],
    previous: Mapping[str, datetime],
    *,
    resources: Collection[str],
    now: datetime,
) -> dict[str, datetime]:
    """Since when each accelerator node without accelerator pods has been without them."""
    return {
        name: previous.get(name, now)
        for name, facts in nodes.items()
        if facts.accelerators(resources) > 0 and name not in busy
    }


UNCORDON: Mapping[str, Any] = {
    "spec": {"unschedulable": False},
    "metadata": {"annotations": {CORDONED_BY: None}},
}
"""The merge patch lifting an idle policy's cordon and its mark."""
UNLABEL: Mapping[str, Any] = {"metadata": {"labels": {IDLE_NODE_LABEL: None}}}
"""The merge patch dropping the idle-node label."""


@dataclass(frozen=True)
class NodeActions:
    cordon: tuple[str, ...] = ()
    uncordon: tuple[str, ...] = ()
    label: tuple[str, ...] = ()
    unlabel: tuple[str, ...] = ()


def node_actions(
    nodes: Mapping[str, NodeFacts],
    idle: Collection[str],
    busy: Collection[str],
    *,
    policy: str,
    cordon: bool,
    label: bool,
) -> NodeActions:
    """Cordon/label idle nodes; undo only our own marks, and only on nodes an accelerator
    pod runs on again. A node that is merely not idle *yet* (the quiet time forgotten by a
    restart) or whose accelerators left its allocatable for a moment (a device plugin
    restarting) keeps its marks: lifting them would be undone a moment later."""
    to_cordon, to_uncordon, to_label, to_unlabel = [], [], [], []
    for name, facts in sorted(nodes.items()):
        ours = facts.cordoned_by == policy
        if name in idle:
            if cordon and not facts.unschedulable and facts.cordoned_by is None:
                to_cordon.append(name)
            if label and facts.labels.get(IDLE_NODE_LABEL) != "true":
                to_label.append(name)
        elif name in busy:
            if ours:
                to_uncordon.append(name)
            if label and facts.labels.get(IDLE_NODE_LABEL) == "true":
                to_unlabel.append(name)
    return NodeActions(tuple(to_cordon), tuple(to_uncordon), tuple(to_label), tuple(to_unlabel))


def left_behind(
    nodes: Mapping[str, NodeFacts], policy: str, reported: Collection[str], kept: Collection[str]
) -> NodeActions:
    """What a deleted policy's marks come to: every cordon its mark names is lifted; the
    idle-node label (which names no policy) comes off the nodes it last reported idle,
    unless another policy reports them idle too (`kept`). A cordon an admin set, or
    another policy's, is never lifted."""
    return NodeActions(
        uncordon=tuple(n for n, f in sorted(nodes.items()) if f.cordoned_by == policy),
        unlabel=tuple(
            n
            for n in sorted(set(reported) - set(kept))
            if n in nodes and nodes[n].labels.get(IDLE_NODE_LABEL) == "true"
        ),
    )


def reported_idle(body: Mapping[str, Any]) -> list[str]:
    """The nodes a policy's status reports idle (names only; whatever else is there is
    ignored: status is ours, but an older version or a hand may have written it)."""
    listed = (body.get("status") or {}).get("idleNodes") if isinstance(body, Mapping) else None
    if not isinstance(listed, list):
        return []
    return [str(n["name"]) for n in listed[:MAX_LISTED] if isinstance(n, dict) and "name" in n]


def idle_for(since: Mapping[str, datetime], now: datetime, after: timedelta) -> list[str]:
    return sorted(name for name, t in since.items() if now - t >= after)
