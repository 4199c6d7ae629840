"""What this operator reads of the objects it caches: the fixed label keys, annotations
and resource names its code reads, and what each policy names (scope selectors,
attribution labels, rates' node selectors, idle node selectors and labels, accelerators).

The cache keeps nothing else (core/keep.py). When a policy comes to read more, records
kept before lack it: the cache lists those objects again (runtime.py) before anything is
evaluated on them.
"""

from collections.abc import Iterable

from trainwarden.api.v1alpha1.budget import TrainingBudgetSpec
from trainwarden.api.v1alpha1.checkpoint import CheckpointPolicySpec
from trainwarden.api.v1alpha1.idle import IdleReclaimPolicySpec
from trainwarden.api.v1alpha1.names import (
    BUDGET_LABEL,
    CHECKPOINT_PATH,
    CHECKPOINT_PIN,
    EXEMPT,
    EXPECTED_DURATION,
    HELD_AT,
    HELD_BY,
    IDLE_NODE_LABEL,
    IDLE_POLICY,
    IDLE_RECLAIMED_AT,
    IDLE_SINCE,
    IDLE_WARNED_AT,
    KEEP_UNTIL,
    RECEIPT,
    REPEAT_HELD_BY,
    REPEAT_OF,
    RESUME_FROM,
)
from trainwarden.api.v1alpha1.types import DEFAULT_ACCELERATORS, LabelSelector, Scope
from trainwarden.api.v1alpha1.volumes import VolumeReclaimPolicySpec
from trainwarden.core.accounting import CPU, MEMORY
from trainwarden.core.keep import NAME, SHORT, Keep
from trainwarden.core.ledger import ANNOTATIONS
from trainwarden.core.pods import GROUP_LABELS
from trainwarden.core.workloads import KUEUE_QUEUE

Spec = TrainingBudgetSpec | IdleReclaimPolicySpec | CheckpointPolicySpec | VolumeReclaimPolicySpec

WELL_KNOWN_NODE_LABELS = (
    "kubernetes.io/hostname",
    "kubernetes.io/arch",
    "kubernetes.io/os",
    "topology.kubernetes.io/zone",
    "topology.kubernetes.io/region",
    "node.kubernetes.io/instance-type",
)
"""Kubernetes' own node labels, which pods waiting for room commonly select: always kept
of a node, however many others it has (core/nodes.py MAX_NODE_LABELS)."""
PATH = 1280
"""A checkpoint location: a claim name, ":" and a path of at most 1,024 characters."""
NAMES = 1024
"""A list of checkpoint names (pins, resume points): the names in its first KiB."""

CODE = Keep(
    pod_labels=frozenset({BUDGET_LABEL, KUEUE_QUEUE, *GROUP_LABELS}),
    node_labels=frozenset({IDLE_NODE_LABEL, *WELL_KNOWN_NODE_LABELS}),
    resources=frozenset({CPU, MEMORY, *DEFAULT_ACCELERATORS}),
    pod_annotations={
        EXEMPT: SHORT,
        KEEP_UNTIL: SHORT,
        IDLE_POLICY: NAME,
        IDLE_SINCE: SHORT,
        IDLE_WARNED_AT: SHORT,
        IDLE_RECLAIMED_AT: SHORT,
        HELD_BY: NAME,
        HELD_AT: SHORT,
        EXPECTED_DURATION: SHORT,
        RECEIPT: NAME,
        REPEAT_OF: NAME,
        REPEAT_HELD_BY: NAME,
        **ANNOTATIONS,
    },
    workload_annotations={
        HELD_BY: NAME,
        HELD_AT: SHORT,
        EXPECTED_DURATION: SHORT,
        CHECKPOINT_PATH: PATH,
        CHECKPOINT_PIN: NAMES,
        RESUME_FROM: NAMES,
        RECEIPT: NAME,
        REPEAT_OF: NAME,
        REPEAT_HELD_BY: NAME,
        **ANNOTATIONS,
    },
)
"""What the code reads whatever the policies: the budget, queue and group labels; the
idle-node label and Kubernetes' own node labels; CPU, memory and the default
accelerators; trainwarden's own annotations (holds, idle marks, opt-outs, checkpoint
locations, receipts, declared run times, the experiment ledger's: a pod keeps those only
when no controller owns it, core/pods.py)."""


def selector_keys(selector: LabelSelector | None) -> set[str]:
    """The label keys a selector reads."""
    if selector is None:
        return set()
    return {*selector.match_labels, *(r.key for r in selector.match_expressions)}


def _scope(scope: Scope) -> Keep:
    return Keep(
        pod_labels=frozenset(selector_keys(scope.selector)),
        namespace_labels=frozenset(selector_keys(scope.namespace_selector)),
    )


def reads(spec: Spec) -> Keep:
    """What one policy reads of pods, namespaces and nodes."""
    own = Keep(resources=frozenset(getattr(spec, "accelerators", ())))
    if isinstance(spec, TrainingBudgetSpec):
        rates = spec.rates.accelerator_hour if spec.rates else []
        own |= Keep(
            pod_labels=frozenset(spec.attribution_labels),
            node_labels=frozenset(k for rate in rates for k in rate.node_selector),
        )
    elif isinstance(spec, IdleReclaimPolicySpec):
        lease = spec.lease.selector if spec.lease else None
        nodes = spec.idle_nodes.node_selector if spec.idle_nodes else None
        own |= Keep(
            pod_labels=frozenset(selector_keys(lease)),
            node_labels=frozenset(selector_keys(nodes) | set(spec.node_labels)),
        )
    elif isinstance(spec, CheckpointPolicySpec) and spec.storage.pvc is not None:
        own |= Keep(claim_labels=frozenset(selector_keys(spec.storage.pvc.selector)))
    return _scope(spec.scope) | own


def keep(specs: Iterable[Spec]) -> Keep:
    """Everything the code and these policies read."""
    found = CODE
    for spec in specs:
        found |= reads(spec)
    return found
