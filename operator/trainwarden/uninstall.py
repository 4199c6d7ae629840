"""What `trainwarden release-all` releases before an uninstall: the decision, over listed
objects, with no I/O (release_all_command.py lists, patches and reports).

With the operator gone nothing ever releases what it holds: Jobs the webhook held, pods
behind its scheduling gate, workloads a budget suspended, nodes an idle policy cordoned.
Only what one of the instance's own policies marked is released, and each on the same
evidence the operator itself would act on: a hold only while it is exactly as the webhook
left it for that budget (budget/holding.py `still_held`); a suspension only if the
budget's status records that uid (status is the only trusted record: budget/targets.py
`ours`) and the workload still carries its label and is suspended; a cordon only where
the node's mark names one of the instance's IdleReclaimPolicies (and the idle-node label,
which names no policy, only where one of them reports the node idle). A Job its owner
suspended, a node an admin cordoned, another instance's holds: none of them is touched.
"""

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from trainwarden.api.v1alpha1.names import (
    BUDGET_KIND,
    CORDONED_BY,
    HELD_BY,
    IDLE_KIND,
    IDLE_NODE_LABEL,
    INSTANCE_LABEL,
    SUSPENDED_BY,
)
from trainwarden.budget.holding import HeldRef, start_patch, still_held
from trainwarden.core.nodes import UNCORDON, UNLABEL, reported_idle
from trainwarden.core.shapes import mapping, mappings
from trainwarden.core.workloads import EPOCH, KUEUE_QUEUE, is_suspended, label_value

Verb = Literal["start", "resume", "uncordon", "unlabel"]
REASON = "released by trainwarden release-all: uninstall"
"""The message of every release's Event."""


@dataclass(frozen=True)
class Action:
    """One release: what, on which object (the version listed), for which policy."""

    verb: Verb
    obj: Mapping[str, Any] = field(compare=False, repr=False)
    policy: str
    """The budget or IdleReclaimPolicy whose mark the object carries."""
    kueue: bool = False
    """A Kueue-managed workload: resumed through its Kueue Workload, as the budget does."""

    @property
    def uid(self) -> str:
        return str(mapping(self.obj.get("metadata")).get("uid") or "")

    @property
    def target(self) -> str:
        meta = mapping(self.obj.get("metadata"))
        where = f"{meta.get('namespace')}/" if meta.get("namespace") else ""
        return f"{self.obj.get('kind')}/{where}{meta.get('name')}"

    @property
    def policy_kind(self) -> str:
        return IDLE_KIND if self.verb in ("uncordon", "unlabel") else BUDGET_KIND

    def __str__(self) -> str:
        via = " through its Kueue Workload" if self.kueue else ""
        return f"{self.verb} {self.target}{via} ({self.policy_kind} {self.policy})"

    def entry(self) -> dict[str, Any]:
        """As `-o json|yaml` lists it."""
        meta = mapping(self.obj.get("metadata"))
        found = {
            "verb": self.verb,
            "kind": self.obj.get("kind"),
            "namespace": meta.get("namespace"),
            "name": meta.get("name"),
            "uid": self.uid,
            "policyKind": self.policy_kind,
            "policy": self.policy,
            "throughKueue": self.kueue,
        }
        return {k: v for k, v in found.items() if v is not None}


def governed(policies: Iterable[Mapping[str, Any]], instance: str | None) -> set[str]:
    """The names of the policies this instance governs, exactly as its controllers select
    them (controllers/base.py `ours`): the instance label equal to `instance`, or absent
    for the default instance."""
    found = set()
    for policy in policies:
        meta = mapping(policy.get("metadata"))
        if mapping(meta.get("labels")).get(INSTANCE_LABEL) == instance and meta.get("name"):
            found.add(str(meta["name"]))
    return found


def records(budgets: Iterable[Mapping[str, Any]], names: set[str]) -> dict[str, set[str]]:
    """Per budget of `names`, the uids its status records as suspended by it."""
    found: dict[str, set[str]] = {}
    for budget in budgets:
        name = mapping(budget.get("metadata")).get("name")
        if name not in names:
            continue
        suspended = mappings(mapping(budget.get("status")).get("suspended"))
        uids = {str(mapping(r.get("ref")).get("uid")) for r in suspended}
        found[str(name)] = {u for u in uids if u and u != "None"}
    return found


def _held_by(obj: Mapping[str, Any], budgets: set[str]) -> str | None:
    """The instance's budget holding `obj`, if it is still held as the webhook left it."""
    meta = mapping(obj.get("metadata"))
    budget = mapping(meta.get("annotations")).get(HELD_BY)
    if budget not in budgets:
        return None
    ref = HeldRef(
        str(obj.get("apiVersion")),
        str(obj.get("kind")),
        str(meta.get("namespace")),
        str(meta.get("name")),
        str(meta.get("uid")),
        EPOCH,
    )
    return str(budget) if still_held(obj, ref, str(budget)) else None


def _suspended_by(obj: Mapping[str, Any], recorded: Mapping[str, set[str]]) -> str | None:
    """The instance's budget that suspended `obj`: it records the uid, and the workload is
    still suspended and carries that budget's label."""
    meta = mapping(obj.get("metadata"))
    label = mapping(meta.get("labels")).get(SUSPENDED_BY)
    if label is None or not is_suspended(obj):
        return None
    uid = meta.get("uid")
    return next(
        (b for b, uids in sorted(recorded.items()) if uid in uids and label_value(b) == label),
        None,
    )


def release(
    instance: str | None,
    budgets: Iterable[Mapping[str, Any]],
    idle_policies: Iterable[Mapping[str, Any]],
    workloads: Iterable[Mapping[str, Any]],
    pods: Iterable[Mapping[str, Any]],
    nodes: Iterable[Mapping[str, Any]],
) -> list[Action]:
    """Every release the instance owes, from the objects as listed: held workloads and
    gated pods started, recorded suspensions resumed, cordons and idle-node labels lifted.
    Nothing else."""
    listed, policies = list(budgets), list(idle_policies)
    ours = governed(listed, instance)
    recorded = records(listed, ours)
    actions: list[Action] = []
    for obj in workloads:
        held = _held_by(obj, ours)
        if held is not None:
            actions.append(Action("start", obj, held))
            continue
        suspender = _suspended_by(obj, recorded)
        if suspender is not None:
            kueue = KUEUE_QUEUE in mapping(mapping(obj.get("metadata")).get("labels"))
            actions.append(Action("resume", obj, suspender, kueue))
    for pod in pods:
        held = _held_by(pod, ours)
        if held is not None:
            actions.append(Action("start", pod, held))
    return actions + _nodes(policies, governed(policies, instance), nodes)


def _nodes(
    policies: list[Mapping[str, Any]], ours: set[str], nodes: Iterable[Mapping[str, Any]]
) -> list[Action]:
    """Cordons whose mark names one of the instance's policies lifted (and their idle-node
    label); the idle-node label, which names no policy, off the nodes an instance policy's
    status reports idle and no other instance's does (as idle/nodes.py `let_go` does for a
    deleted policy)."""
    reporting: dict[str, str] = {}
    kept: set[str] = set()
    for policy in sorted(policies, key=lambda p: str(mapping(p.get("metadata")).get("name"))):
        name = str(mapping(policy.get("metadata")).get("name"))
        for reported in reported_idle(policy):
            if name in ours:
                reporting.setdefault(reported, name)
            else:
                kept.add(reported)
    found = []
    for node in nodes:
        meta = mapping(node.get("metadata"))
        mark = mapping(meta.get("annotations")).get(CORDONED_BY)
        labelled = mapping(meta.get("labels")).get(IDLE_NODE_LABEL) == "true"
        if mark in ours:
            found.append(Action("uncordon", node, str(mark)))
        elif labelled and meta.get("name") in reporting and meta.get("name") not in kept:
            found.append(Action("unlabel", node, reporting[str(meta["name"])]))
    return found


def patch(action: Action) -> dict[str, Any] | None:
    """The merge patch a start, an uncordon or an unlabel makes, conditional on the version
    listed; None for a resume (adapters/workloads.py `resume`, or the Kueue route)."""
    if action.verb == "start":
        return start_patch(action.obj)
    version = mapping(action.obj.get("metadata")).get("resourceVersion")
    unlabel = {"resourceVersion": version, "labels": dict(UNLABEL["metadata"]["labels"])}
    if action.verb == "uncordon":
        annotations = dict(UNCORDON["metadata"]["annotations"])
        return {"spec": dict(UNCORDON["spec"]), "metadata": {**unlabel, "annotations": annotations}}
    if action.verb == "unlabel":
        return {"metadata": unlabel}
    return None
