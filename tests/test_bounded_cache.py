"""Bounded cache (issue 25): whatever a tenant writes on a pod, workload, namespace, node or
Kueue object, the record the operator keeps of it stays under a stated size, and keeps
every key a policy reads.

Hypothesis generates the hostile objects (thousands of labels and annotations, values of
every length and width, many owners, containers and resource names, odd types where the
API lets a custom resource have them) and the policies (scope selectors, attribution
labels, rates, idle node selectors, accelerators). Each record's deep size (below) is
checked against its bound, and every decision a policy takes from labels (scopes, the
budget label, rates, idle node selectors, pods waiting for room, Kueue's pod sets) is
checked to be the same on the record as on the whole object. The bounds are stated in
docs/security.md.
"""

import functools
import gc
import operator
import sys
from collections.abc import Hashable, Iterable, Mapping
from types import BuiltinFunctionType, FunctionType, ModuleType
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trainwarden.api.v1alpha1.budget import TrainingBudgetSpec
from trainwarden.api.v1alpha1.checkpoint import CheckpointPolicySpec
from trainwarden.api.v1alpha1.idle import IdleReclaimPolicySpec
from trainwarden.cache.cluster import namespace_facts
from trainwarden.cache.kueue import admission_check
from trainwarden.core.budgets import prices
from trainwarden.core.claims import claim_facts
from trainwarden.core.estimate import demand, estimate
from trainwarden.core.keep import LABEL_KEY, Keep
from trainwarden.core.kueue import MAX_CHECKS, kueue_workload
from trainwarden.core.nodes import MAX_NODE_LABELS, node_facts
from trainwarden.core.pods import LEDGER_KEYS, MAX_NODE_SELECTOR, facts
from trainwarden.core.reads import CODE, WELL_KNOWN_NODE_LABELS, Spec, keep
from trainwarden.core.scope import charge, in_scope, selects
from trainwarden.core.workloads import BY_KEY, KINDS, workload_facts

JSON = dict[str, Any]
EXAMPLES = settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# --- the deep size of a record, and the stated bounds ------------------------------------


def deep_size(record: object) -> int:
    """Bytes of `record` and of everything it references, each object once (an interned
    string shared with other records is counted here too); types and functions, which
    every record shares with the code, not at all. `gc.get_referents` does not visit the
    keys of a dict of strings, so dict keys are added explicitly."""
    seen: set[int] = set()
    todo: list[object] = [record]
    total = 0
    while todo:
        obj = todo.pop()
        shared_with_code = isinstance(obj, type | ModuleType | FunctionType | BuiltinFunctionType)
        if id(obj) in seen or shared_with_code:
            continue
        seen.add(id(obj))
        total += sys.getsizeof(obj)
        todo.extend(gc.get_referents(obj))
        if isinstance(obj, dict):
            todo.extend(obj.keys())
    return total


ENTRY_HEAD = 256
POD = 8 * 1024 + 16 * 320
"""A pod's record besides its kept labels, node selector and requests: names, owner,
trainwarden's annotations (each at its cap, 4 bytes a character), times, counts, the 16
claims it mounts at most (core/pods.py MAX_POD_CLAIMS: ASCII names of at most 253
characters, or a mark)."""
WORKLOAD = 24 * 1024
"""A workload's record: names, owner, 3 labels, trainwarden's annotations at their caps
(a checkpoint path of 1,280 characters, two lists of names of 1,024, 4 bytes each)."""
LEDGER = 4 * (4097 + 3 * 257) + 4 * ENTRY_HEAD
"""The experiment ledger's four annotations at their caps (core/ledger.py ANNOTATIONS), 4
bytes a character: kept of a workload, and of a pod only when no controller owns it."""
NAMESPACE = 512
NODE = 2 * 1024
KUEUE = 16 * 1024
"""A Kueue Workload besides its pod sets' kept labels and resources: 8 checks, their
messages of at most 1 KiB (ASCII, or a mark)."""
CHECK = 2 * 1024
CLAIM = 2 * 1024
"""A PersistentVolumeClaim's record besides its kept labels: names and class (ASCII within
the API's lengths, else a mark), 4 requests in force, two times."""
ENTRY = 256
"""One kept label or resource, besides its key's characters: the key's string header,
a value of at most 63 ASCII characters (or a float), and its share of the dict."""


def entries(keys: Iterable[str], most: int | None = None) -> int:
    sizes = sorted((len(k) + ENTRY for k in keys), reverse=True)
    return sum(sizes[:most] if most is not None else sizes)


def pod_bound(k: Keep) -> int:
    node_selector = MAX_NODE_SELECTOR * (LABEL_KEY + ENTRY)  # a waiting pod's, any keys
    return POD + entries(k.pod_labels) + entries(k.resources) + node_selector


def workload_bound(k: Keep) -> int:
    return WORKLOAD + LEDGER


def node_bound(k: Keep) -> int:
    others = MAX_NODE_LABELS * (LABEL_KEY + ENTRY)
    return NODE + entries(k.node_labels) + others + entries(k.resources)


def kueue_bound(k: Keep) -> int:
    pod_set = entries(k.pod_labels) + entries(k.node_labels) + entries(k.resources)
    return KUEUE + MAX_CHECKS * (pod_set + ENTRY)


# --- what tenants write ------------------------------------------------------------------
# Strategies are built once: hypothesis validates every new strategy object it draws from,
# which would cost more than building the hostile objects themselves.

POOL = (
    "team",
    "project",
    "experiment",
    "app",
    "trainwarden.dev/budget",
    "jobset.sigs.k8s.io/jobset-name",
    "ray.io/cluster",
    "kueue.x-k8s.io/queue-name",
    "nvidia.com/gpu.product",
    "kubernetes.io/hostname",
    "topology.kubernetes.io/zone",
    "k" * 63,
    "p" * 253 + "/" + "n" * 63,
)
"""Label keys that policies and objects share (among them the longest the API allows)."""
KEYS = (*POOL, "a.b/c", "team.example.com/cost-center", "x", "y.z/w")
VALUES = ("", "a", "b", "vision", "nlp", "A-b_c.9", "x" * 63)
RESOURCES = ("cpu", "memory", "nvidia.com/gpu", "amd.com/gpu", "example.com/tpu", "r" * 253)
WIDE = ("x", "é", "\u4e2d", "\U0001f600", "\ud800")
"""A character of each width CPython stores (1, 1, 2 and 4 bytes), and a lone surrogate
(JSON may carry one)."""
LENGTHS = (0, 5, 63, 64, 253, 254, 1024, 1025, 300_000)

keys, values = st.sampled_from(KEYS), st.sampled_from(VALUES)
flags = st.booleans()
TEXT = st.builds(operator.mul, st.sampled_from(WIDE), st.sampled_from(LENGTHS))
"""Free text a tenant writes (annotation values, names and messages in custom resources)."""


@functools.cache
def pick(*options: Hashable) -> st.SearchStrategy[Any]:
    return st.sampled_from(options)


def filler(prefix: str, count: int, value: str) -> dict[str, str]:
    """Many keys no policy reads (none of them in KEYS)."""
    return {f"{prefix}{i}.example.com/f": value for i in range(count)}


@st.composite
def label_sets(draw: st.DrawFn, most: int = 10_000) -> dict[str, str]:
    """Labels as the API accepts them on a pod, node or namespace: every key and value
    valid, but any number of them (the review's 10,000)."""
    found = draw(st.dictionaries(keys, values, max_size=12))
    return {**filler("l", draw(pick(0, 0, 1, 100, most)), "y" * 63), **found}


@st.composite
def annotation_sets(draw: st.DrawFn, read: tuple[str, ...]) -> dict[str, Any]:
    """Any string values on the keys the code reads, and 250 more of 1 KB (the review's
    probe)."""
    found = {key: draw(TEXT) for key in read if draw(flags)}
    return {**filler("trainwarden.dev/a", draw(pick(0, 250)), "z" * 1000), **found}


KNOWN = (*(k.key for k in KINDS), ("v1", "ConfigMap"), ("v1", "Pod"))
ODD = ("odd", 7, None, (1,))


@st.composite
def owner_lists(draw: st.DrawFn) -> list[Any]:
    refs: list[Any] = []
    for _ in range(draw(pick(0, 1, 2, 50))):
        api_version, kind = draw(pick(*KNOWN))
        refs.append(
            {
                "apiVersion": draw(pick(api_version, "a" * 317, "b" * 318)),
                "kind": draw(pick(kind, "K" * 63, "K" * 64, "Ķ")),
                "name": draw(pick("j", "n" * 253) | TEXT),
                "uid": draw(pick("0" * 36, "u" * 64) | TEXT),
                "controller": draw(pick(True, False, None, "true")),
            }
        )
    if draw(flags):
        refs.append(draw(pick(*ODD)))  # a custom resource's schema may let one through
    return refs


LABELS, OWNERS = label_sets(), owner_lists()
TEMPLATE_LABELS = label_sets(most=500)
"""A pod set's labels: fewer, as each of 9 pod sets is read whole by the test too."""
POD_ANNOTATIONS = annotation_sets(tuple(CODE.pod_annotations))
WORKLOAD_ANNOTATIONS = annotation_sets(tuple(CODE.workload_annotations))
NODE_KEYS = (*KEYS, *WELL_KNOWN_NODE_LABELS, "trainwarden.dev/idle-node", "zone.example.com/z")
NODE_SELECTORS = st.dictionaries(pick(*NODE_KEYS), values, max_size=MAX_NODE_SELECTOR + 2)
UNSCHEDULABLE = {
    "type": "PodScheduled",
    "status": "False",
    "reason": "Unschedulable",
    "lastTransitionTime": "2026-01-01T00:00:00+05:00",
}


def containers(count: int, names: int) -> list[JSON]:
    """`count` containers asking for every resource in RESOURCES and `names` more."""
    requests = dict.fromkeys(RESOURCES, "1") | filler("r", names, "1")
    return [
        {"name": f"c{i}", "resources": {"requests": requests, "limits": requests}}
        for i in range(count)
    ]


def volumes(count: int, fill: object) -> list[JSON]:
    """`count` claims of the longest names (or not strings), and as many ephemeral ones."""
    claims = [
        {"name": f"v{i}", "persistentVolumeClaim": {"claimName": f"{i}" + str(fill) * 250}}
        for i in range(count)
    ]
    return claims + [{"name": f"e{i}" + "x" * 60, "ephemeral": {}} for i in range(count)]


@st.composite
def pod_objects(draw: st.DrawFn) -> JSON:
    many = draw(pick(1, 3, 200))
    restarts = draw(pick(1, 2**31 - 1, 2**70, "x"))
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "n" * 253,
            "namespace": "s" * 63,
            "uid": "0" * 36,
            "resourceVersion": "9" * 20,
            "labels": draw(LABELS),
            "annotations": draw(POD_ANNOTATIONS),
            "ownerReferences": draw(OWNERS),
        },
        "spec": {
            **({} if draw(flags) else {"nodeName": "n" * 253}),  # unbound: it may wait
            "priorityClassName": "p" * 253,
            "priority": draw(pick(0, 2**31 - 1, 2**70, "high", None)),
            "containers": containers(many, draw(pick(0, 60))),
            "initContainers": containers(draw(pick(0, 50)), 5),
            "overhead": {"cpu": "1", "vendor.example.com/o": "1"},
            "nodeSelector": draw(NODE_SELECTORS),
            "schedulingGates": [{"name": f"g{i}"} for i in range(draw(pick(0, 100)))],
            "volumes": volumes(draw(pick(0, 3, 500)), draw(pick("c", "\u00e9", 7))),
        },
        "status": {
            "phase": draw(pick("Pending", "Running", "Failed", "Succeeded")),
            "startTime": "2026-01-01T00:00:00+03:00",
            "conditions": [UNSCHEDULABLE] * draw(pick(1, 100)),
            "containerStatuses": [{"restartCount": restarts}] * many,
        },
    }


CONDITIONS = (
    ({"type": "Complete", "status": "True", "lastTransitionTime": "x" * 70},),
    ("odd", 3),
    "odd",
)


@st.composite
def workload_objects(draw: st.DrawFn) -> JSON:
    kind = draw(pick(*KINDS))
    suspend: Any = draw(pick(True, False, "yes", ODD))
    return {
        "apiVersion": draw(pick(kind.api_version, "a" * 400)),
        "kind": draw(pick(kind.kind, "K" * 64)),
        "metadata": {
            "name": "n" * 253,
            "namespace": "s" * 63,
            "uid": "0" * 36,
            "creationTimestamp": draw(pick("2026-01-01T00:00:00Z", "x" * 1000)),
            "labels": draw(LABELS) | filler("trainwarden.dev/l", draw(pick(0, 1000)), "v"),
            "annotations": draw(WORKLOAD_ANNOTATIONS),
            "ownerReferences": draw(OWNERS),
        },
        "spec": {"suspend": suspend, "runPolicy": {"suspend": suspend} if draw(flags) else "odd"},
        "status": {
            "conditions": list(CONDITIONS[draw(pick(0, 1, 2))]),
            "jobStatus": "SUCCEEDED",
            "jobDeploymentStatus": "Complete",
            "endTime": "x" * 1000,
        },
    }


@st.composite
def node_objects(draw: st.DrawFn) -> JSON:
    allocatable = dict.fromkeys(RESOURCES, "8") | filler("r", draw(pick(0, 500)), "1")
    allocatable["nvidia.com/gpu"] = draw(pick("8", "lots", ODD))
    return {
        "metadata": {
            "name": "n" * 253,
            "uid": "0" * 36,
            "labels": draw(LABELS),
            "annotations": {"trainwarden.dev/cordoned-by": draw(TEXT)},
        },
        "spec": {"unschedulable": draw(flags)},
        "status": {"allocatable": allocatable},
    }


FREE_LABELS = st.dictionaries(keys, TEXT, max_size=6)


@st.composite
def kueue_objects(draw: st.DrawFn) -> JSON:
    """Kueue's Workload: its pod sets' template labels are a plain string map (no label
    syntax), its checks' messages up to 32 KiB."""
    template = {
        "metadata": {"labels": draw(TEMPLATE_LABELS) | draw(FREE_LABELS)},
        "spec": {
            "containers": containers(draw(pick(1, 5)), 30),
            "nodeSelector": draw(NODE_SELECTORS),
        },
    }
    sets = [
        {"name": f"ps{i}", "count": 2, "template": template} for i in range(draw(pick(1, 8, 9)))
    ]
    checks = [
        {
            "name": draw(pick("budget", "c" * 316)),
            "state": "Pending",
            "message": draw(TEXT),
            "lastTransitionTime": "x" * 1000,
        }
        for _ in range(draw(pick(0, 8, 40)))
    ]
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {
            "name": "n" * 253,
            "namespace": "s" * 63,
            "uid": "0" * 36,
            "labels": draw(LABELS) | {"kueue.x-k8s.io/job-uid": draw(TEXT)},
            "annotations": {"trainwarden.dev/expected-duration": draw(TEXT)},
            "ownerReferences": draw(OWNERS),
        },
        "spec": {"podSets": sets, "maximumExecutionTimeSeconds": 3600},
        "status": {"admissionChecks": checks, "conditions": draw(pick((), ("odd",)))},
    }


# --- the policies that decide what is read -----------------------------------------------

OPERATORS = st.lists(pick("In", "NotIn", "Exists", "DoesNotExist"), max_size=3)
SOME_VALUES = st.lists(values, min_size=1, max_size=3)


@st.composite
def selector_objects(draw: st.DrawFn) -> JSON:
    expressions = [
        {"key": draw(keys), "operator": op, "values": draw(SOME_VALUES)}
        if op in ("In", "NotIn")
        else {"key": draw(keys), "operator": op}
        for op in draw(OPERATORS)
    ]
    match = draw(st.dictionaries(keys, values, min_size=0 if expressions else 1, max_size=3))
    return {"matchLabels": match, "matchExpressions": expressions}


SELECTORS = selector_objects()


@st.composite
def scope_objects(draw: st.DrawFn) -> JSON:
    scope: JSON = {"namespaces": ["s" * 63]}
    if draw(flags):
        scope["namespaceSelector"] = draw(SELECTORS)
    if draw(flags):
        scope["selector"] = draw(SELECTORS)
    return scope


SCOPES = scope_objects()
ACCELERATORS = st.lists(pick(*RESOURCES[2:]), min_size=1, max_size=3, unique=True)
KEY_LISTS = st.lists(keys, max_size=4, unique=True)
RATE_SELECTORS = st.dictionaries(keys, values, max_size=2)


@st.composite
def policy_lists(draw: st.DrawFn) -> list[Spec]:
    """TrainingBudgets, IdleReclaimPolicies and a CheckpointPolicy, each with what it
    reads drawn: scope selectors, attribution labels, rates' node selectors, lease and
    idle node selectors, reported node labels, accelerators."""
    rate = {"resource": "nvidia.com/gpu", "price": 2.0}
    found: list[Spec] = [
        TrainingBudgetSpec.model_validate(
            {
                "scope": draw(SCOPES),
                "limits": {"acceleratorHours": 10},
                "accelerators": draw(ACCELERATORS),
                "attributionLabels": draw(KEY_LISTS),
                "rates": {"acceleratorHour": [rate | {"nodeSelector": draw(RATE_SELECTORS)}]},
            }
        )
        for _ in range(draw(pick(1, 2, 3)))
    ]
    for _ in range(draw(pick(0, 1, 2))):
        idle = {
            "scope": draw(SCOPES),
            "accelerators": draw(ACCELERATORS),
            "lease": {"maxLifetime": "72h", "selector": draw(SELECTORS)},
            "idleNodes": {"nodeSelector": draw(SELECTORS)},
            "nodeLabels": draw(KEY_LISTS),
        }
        found.append(IdleReclaimPolicySpec.model_validate(idle))
    if draw(flags):
        storage = {"pvc": {"selector": draw(SELECTORS)}}
        found.append(
            CheckpointPolicySpec.model_validate({"scope": draw(SCOPES), "storage": storage})
        )
    return found


@st.composite
def claim_objects(draw: st.DrawFn) -> JSON:
    quantity = pick("10Gi", "1e400", "99999Ei", "-1", "NaN", "x" * 300, 2**70, None, (1,))
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {
            "name": draw(TEXT),
            "namespace": "s" * 63,
            "uid": draw(TEXT),
            "labels": draw(LABELS),
            "annotations": draw(POD_ANNOTATIONS),
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "deletionTimestamp": draw(pick(None, "2026-01-02T00:00:00Z", "x" * 300, 7)),
        },
        "spec": {
            "storageClassName": draw(st.one_of(TEXT, pick(*ODD))),
            "resources": {"requests": {"storage": draw(quantity)}},
        },
    }


POLICIES, PODS, WORKLOADS = policy_lists(), pod_objects(), workload_objects()
CLAIMS = claim_objects()
NODES, KUEUE_WORKLOADS = node_objects(), kueue_objects()
NAMESPACES = st.builds(lambda labels: {"metadata": {"name": "s" * 63, "labels": labels}}, LABELS)


# --- the invariants ---------------------------------------------------------------------


Labels = Mapping[str, str]


def same_scopes(
    specs: list[Spec], ns_full: Labels, ns_kept: Labels, full: Labels, kept: Labels
) -> None:
    """Every scope, lease selector and budget label decides the same on what is kept of
    a pod and its namespace as on the whole objects."""
    namespace = "s" * 63
    for spec in specs:
        assert in_scope(spec.scope, namespace, ns_full, full) == in_scope(
            spec.scope, namespace, ns_kept, kept
        )
        lease = (
            spec.lease.selector if isinstance(spec, IdleReclaimPolicySpec) and spec.lease else None
        )
        if lease is not None:
            assert selects(lease, full) == selects(lease, kept)
    budgets = {str(i): s.scope for i, s in enumerate(specs) if isinstance(s, TrainingBudgetSpec)}
    assert charge(budgets, namespace, ns_full, full) == charge(budgets, namespace, ns_kept, kept)


@EXAMPLES
@given(st.data())
def test_a_pod_record_is_bounded_and_decides_every_scope_as_the_pod(data: st.DataObject) -> None:
    specs = data.draw(POLICIES)
    k = keep(specs)
    pod = data.draw(PODS)
    namespace = data.draw(NAMESPACES)
    record, ns = facts(pod, k), namespace_facts(namespace, k)
    assert deep_size(record) <= pod_bound(k) + (LEDGER if record.owner is None else 0)
    assert deep_size(ns) <= NAMESPACE + entries(k.namespace_labels)
    full, ns_full = pod["metadata"]["labels"], namespace["metadata"]["labels"]
    same_scopes(specs, ns_full, ns.labels, full, record.snapshot.labels)
    for spec in specs:
        if isinstance(spec, TrainingBudgetSpec):
            for key in spec.attribution_labels:
                assert record.snapshot.labels.get(key) == full.get(key), "attributed as the pod"
    for name, cap in k.pod_annotations.items():
        value = pod["metadata"]["annotations"].get(name)
        if record.owner is not None and name in LEDGER_KEYS:
            value = None  # the ledger's are read on the workload, never on its pods
        assert record.annotations.get(name) == (None if value is None else value[:cap])
    if record.node_selector:  # a waiting pod, judged against nodes
        assert dict(record.node_selector) == pod["spec"]["nodeSelector"]


@EXAMPLES
@given(st.data())
def test_a_claim_record_is_bounded_and_decides_every_scope_as_the_claim(
    data: st.DataObject,
) -> None:
    """A PersistentVolumeClaim (budget storage, docs/storage.md; the PVCs a CheckpointPolicy
    picks): its labels are scoped by the pods' selectors and picked by PVC selectors, so the
    record keeps both's keys, and selects as the claim."""
    specs = data.draw(POLICIES)
    k = keep(specs)
    claim, namespace = data.draw(CLAIMS), data.draw(NAMESPACES)
    record, ns = claim_facts(claim, k), namespace_facts(namespace, k)
    assert record is not None
    assert deep_size(record) <= CLAIM + entries(k.pod_labels | k.claim_labels)
    full = claim["metadata"]["labels"]
    same_scopes(specs, namespace["metadata"]["labels"], ns.labels, full, record.labels)
    for spec in specs:
        if isinstance(spec, CheckpointPolicySpec) and spec.storage.pvc is not None:
            picks = spec.storage.pvc.selector
            assert selects(picks, full) == selects(picks, record.labels), "picked as the claim"
    assert 0 <= record.request <= 2**63 - 1


@EXAMPLES
@given(st.data())
def test_a_node_record_is_bounded_and_prices_and_selects_as_the_node(data: st.DataObject) -> None:
    specs = data.draw(POLICIES)
    k = keep(specs)
    node = data.draw(NODES)
    record = node_facts(node, k)
    assert deep_size(record) <= node_bound(k)
    full = node["metadata"]["labels"]
    for spec in specs:
        if isinstance(spec, TrainingBudgetSpec):
            table = prices(spec)
            assert table.accelerator_price("nvidia.com/gpu", full) == table.accelerator_price(
                "nvidia.com/gpu", record.labels
            )
        if isinstance(spec, IdleReclaimPolicySpec):
            chosen = spec.idle_nodes.node_selector if spec.idle_nodes else None
            if chosen is not None:
                assert selects(chosen, full) == selects(chosen, record.labels)
    assert {n: record.labels.get(n) for n in k.node_labels} == {
        n: full.get(n) for n in k.node_labels
    }, "every label something reads, however many others"
    assert all(record.labels[n] == v for n, v in full.items() if n in record.labels)
    if len(full) <= MAX_NODE_LABELS:  # any waiting pod's node selector: judged as on the node
        assert dict(record.labels) == full


@EXAMPLES
@given(st.data())
def test_a_workload_record_is_bounded_whatever_its_kind(data: st.DataObject) -> None:
    k = keep([])  # a workload keeps no policy's keys: only those the code reads
    obj = data.draw(WORKLOADS)
    record = workload_facts(obj, k)
    assert deep_size(record) <= workload_bound(k)
    owner = record.owner
    if owner is not None and (owner.api_version, owner.kind) in BY_KEY:
        ref = next(
            r
            for r in obj["metadata"]["ownerReferences"]
            if isinstance(r, dict) and r.get("controller") is True
        )
        assert (ref["apiVersion"], ref["kind"]) == (owner.api_version, owner.kind), (
            "never a kind it did not name"
        )


@EXAMPLES
@given(st.data())
def test_a_kueue_workload_record_is_bounded_and_costs_and_scopes_as_the_workload(
    data: st.DataObject,
) -> None:
    specs = data.draw(POLICIES)
    k = keep(specs)
    obj = data.draw(KUEUE_WORKLOADS)
    record = kueue_workload(obj, k)
    assert deep_size(record) <= kueue_bound(k)
    full = demand({**obj, "kind": "Workload"})
    for spec in [s for s in specs if isinstance(s, TrainingBudgetSpec)]:
        for whole, kept in zip(full.groups, record.demand.groups, strict=False):
            assert in_scope(spec.scope, "s" * 63, {}, whole.labels) == in_scope(
                spec.scope, "s" * 63, {}, kept.labels
            )
        cut = type(full)(full.kind, full.groups[:MAX_CHECKS], full.duration)
        assert estimate(record.demand, spec.accelerators, prices(spec)) == estimate(
            cut, spec.accelerators, prices(spec)
        )


@EXAMPLES
@given(st.data())
def test_an_admission_check_record_is_bounded(data: st.DataObject) -> None:
    condition = {
        "type": "Active",
        "status": data.draw(TEXT),
        "message": data.draw(TEXT),
        "observedGeneration": data.draw(pick(1, 2**80, "x")),
        "lastTransitionTime": data.draw(TEXT),
    }
    obj = {
        "metadata": {"name": data.draw(TEXT), "generation": data.draw(pick(3, 2**80))},
        "spec": {"controllerName": data.draw(TEXT)},
        "status": {"conditions": [condition] * data.draw(pick(1, 1000)) + ["odd"]},
    }
    assert deep_size(admission_check(obj)) <= CHECK


def test_the_review_s_probes_cost_a_bounded_record() -> None:
    """The review's figures: 250 annotations of 1 KB (280 KiB a pod) and 10,000 labels
    (1.6 MiB a pod) were kept whole; now each pod's record is under the bound of the
    policies' reads, whatever else it carries."""
    k = keep([])
    base: JSON = {
        "metadata": {"name": "p", "namespace": "n", "uid": "u"},
        "spec": {"containers": []},
    }
    small = deep_size(facts(base, k))
    annotated = {
        **base,
        "metadata": {
            **base["metadata"],
            "annotations": filler("trainwarden.dev/a", 250, "z" * 1000),
        },
    }
    labelled = {**base, "metadata": {**base["metadata"], "labels": filler("l", 10_000, "y" * 63)}}
    assert deep_size(facts(annotated, k)) == small
    assert deep_size(facts(labelled, k)) == small
    assert small <= pod_bound(k)
