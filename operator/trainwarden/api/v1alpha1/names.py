"""Every `trainwarden.dev/...` name a tenant or an admin sees: the labels, annotations,
scheduling gate, finalizer and controller names trainwarden writes or reads, and the
names of its kinds. This is
their one home (tests/test_names.py fails on such a string anywhere else in the package,
and on a key the docs name that is not here).

Each says who writes it, who reads it, and whether a tenant may write it. What a tenant
may write is hostile input: it is bounded and validated where it is read, and it never
widens a policy's scope nor makes one policy stop another (docs/security.md).
"""

from typing import Final

PREFIX: Final = "trainwarden.dev/"
"""Every key below starts with this (the `*.trainwarden.dev/` prefixes aside). Cached
records keep only the keys the code names (core/reads.py); receipts copy a run's labels
except these (receipts/ledger.py)."""

# --- The kinds (the models' `kind`; tests/test_names.py holds them equal) ---------------

BUDGET_KIND: Final = "TrainingBudget"
"""Cluster-scoped, written by admins; read by the budget slice, Kueue's check, the webhook."""
IDLE_KIND: Final = "IdleReclaimPolicy"
"""Cluster-scoped, written by admins; read by the idle slice."""
CHECKPOINT_KIND: Final = "CheckpointPolicy"
"""Cluster-scoped, written by admins; read by the checkpoints slice and receipts."""
RECEIPT_KIND: Final = "RunReceipt"
"""Namespaced, written by the operator alone (sealed); read by teams and `report --runs`."""
VOLUME_KIND: Final = "VolumeReclaimPolicy"
"""Cluster-scoped, written by admins; read by the volumes slice (docs/storage.md)."""
USAGE_KIND: Final = "BudgetUsage"
"""Namespaced, written by the operator (budget/usage.py) from its budget's status; read by
the namespace's teams. Never read back by the operator as truth."""

# --- Policies and the operator itself (admins) -----------------------------------------

INSTANCE_LABEL: Final = "trainwarden.dev/instance"
"""Label. On policies: written by an admin, read by the controllers (controllers/base.py)
and the webhook (admission/view.py) to tell which `trainwarden run --instance` governs the
policy. On RunReceipts: written by the operator (receipts/ledger.py) to find its own.
Policies are cluster-scoped: no tenant writes them."""
FINALIZER: Final = "trainwarden.dev/finalizer"
"""kopf's finalizer on the policy kinds (handlers/operator.py); written and removed by the
operator, on its own CRs only, never on a tenant's object."""
REPORTING_COMPONENT: Final = "trainwarden.dev/operator"
"""The reportingController of every Event the operator posts (adapters/kube_client.py)."""
CHECK_CONTROLLER: Final = "trainwarden.dev/budget"
"""An AdmissionCheck's spec.controllerName trainwarden answers for (default instance;
`<this>-<instance>` otherwise, core/kueue.py). Written by an admin, read by kueue/."""

DOCTOR_PROBE: Final = "trainwarden.dev/doctor-probe"
"""Annotation of `trainwarden doctor`'s dry-run probe pod (doctor/probe.py); the webhook
(admission/review.py) answers a dry run of such a pod with PROBE_ANSWERED and its view's
currency, which proves the API server reached it. A tenant may set it: it only ever changes
the answer to a dry run, which creates nothing."""

# --- On workloads and pods, written by tenants (hostile) -------------------------------

BUDGET_LABEL: Final = "trainwarden.dev/budget"
"""Label: the budget a workload asks to be charged to. Written by a tenant; read by the
pod → budget index (cache/budgets.py, core/scope.py), honoured only inside the named
budget's scope. The operator also puts it on the BudgetUsage objects it writes
(budget/usage.py), to list its own; there it narrows a list, never proves anything."""
EXPECTED_DURATION: Final = "trainwarden.dev/expected-duration"
"""Annotation (or label): the run time a workload declares, e.g. "6h". Written by a
tenant; read by the estimates (core/estimate.py) for holds and Kueue's check, parsed
defensively."""
EXEMPT: Final = "trainwarden.dev/exempt"
"""Annotation `"true"` on a pod or its owner: do not reclaim it when idle. Written by a
tenant; read by the idle policy (core/exemptions.py), honoured only where the policy's
allowOptOut says so."""
KEEP_UNTIL: Final = "trainwarden.dev/keep-until"
"""Annotation: a time until which an idle pod is kept. Written by a tenant; read by the
idle policy (core/exemptions.py), capped by the policy's maxKeepDuration from when it was
first seen."""
CHECKPOINT_PATH: Final = "trainwarden.dev/checkpoint-path"
"""Annotation on a training job: where its checkpoints are, `<pvc>:<path>` or
`s3://<bucket>/<prefix>`. Written by a tenant; read by CheckpointPolicies
(core/locations.py) and receipts; a malformed value is reported, never pruned."""
CHECKPOINT_PIN: Final = "trainwarden.dev/checkpoint-pin"
"""Annotation on a training job: checkpoints never to prune, comma-separated. Written by a
tenant; read by CheckpointPolicies (core/locations.py)."""
RESUME_FROM: Final = "trainwarden.dev/resume-from"
"""Annotation on a training job: the checkpoint it resumes from (kept). Written by a
tenant; read by CheckpointPolicies (core/locations.py)."""

# --- On VolumeSnapshots, written by a trainer or a person (hostile) ---------------------

SNAPSHOT_STEP: Final = "trainwarden.dev/step"
"""Annotation: the training step a VolumeSnapshot holds. Read by storage/snapshots.py."""
SNAPSHOT_PIN: Final = "trainwarden.dev/pin"
"""Annotation `"true"`: never prune this VolumeSnapshot. Read by storage/snapshots.py."""
SNAPSHOT_RESUME_POINT: Final = "trainwarden.dev/resume-point"
"""Annotation `"true"`: a job resumes from this VolumeSnapshot (kept). Read by
storage/snapshots.py."""
SNAPSHOT_METRIC: Final = "metric.trainwarden.dev/"
"""Annotation prefix: `<this><name>: "0.31"`, a metric keepBest ranks VolumeSnapshots by.
Read by storage/snapshots.py; an unparsable number is ignored."""

# --- Holds on new work: the webhook writes them, a tenant could forge them ---------------

HOLD_GATE: Final = "trainwarden.dev/budget"
"""The scheduling gate a bare pod held by an exhausted budget waits behind. Added by the
webhook (core/admission.py), removed by the budget (budget/holding.py) when it has room."""
HELD_BY: Final = "trainwarden.dev/held-by"
"""Annotation: the budget holding the workload. Written only by the webhook, which removes
it from anything it does not hold itself; read by the budget (budget/held.py)."""
HOLD_REASON: Final = "trainwarden.dev/hold-reason"
"""Annotation: why the webhook held the workload, for people. Written by the webhook."""
HELD_AT: Final = "trainwarden.dev/held-at"
"""Annotation: when the webhook held the workload, for people; the budget removes it with
the other two marks when it starts the workload (budget/holding.py)."""

# --- Marks the operator writes on what it acts on (tenants may change them: read back only
# to find the operator's own work, never trusted to widen what it may do) -----------------

SUSPENDED_BY: Final = "trainwarden.dev/suspended-by"
"""Label on what a budget suspended (its own record is in its status); only workloads
carrying it are ever resumed by a budget (adapters/workloads.py)."""
SUSPEND_REASON: Final = "trainwarden.dev/suspend-reason"
"""Annotation: why a budget suspended the workload, for people."""
SUSPENDED_AT: Final = "trainwarden.dev/suspended-at"
"""Annotation: when a budget suspended the workload."""
SUSPENDED_IN: Final = "trainwarden.dev/suspended-in"
"""Annotation: the budget's "<generation>/<period start>" at suspension: resume needs a
change since."""
RECLAIMED_BY: Final = "trainwarden.dev/reclaimed-by"
"""Label on what an idle policy suspended or scaled down."""
RECLAIM_REASON: Final = "trainwarden.dev/reclaim-reason"
"""Annotation: why an idle policy reclaimed the workload, for people."""
RECLAIMED_AT: Final = "trainwarden.dev/reclaimed-at"
"""Annotation: when an idle policy reclaimed the workload."""
SCALED_DOWN_FROM: Final = "trainwarden.dev/scaled-down-from"
"""Annotation: the replicas a Deployment/StatefulSet had before an idle policy scaled it to
zero, for whoever scales it back."""
IDLE_SINCE: Final = "trainwarden.dev/idle-since"
"""Annotation on a pod an idle policy warned about: since when it has been idle. Read back
(core/reclaim.py) after a restart only when IDLE_POLICY names the policy reading it."""
IDLE_WARNED_AT: Final = "trainwarden.dev/idle-warned-at"
"""Annotation on a pod: when an idle policy warned about it (read back as IDLE_SINCE)."""
IDLE_POLICY: Final = "trainwarden.dev/idle-policy"
"""Annotation on a pod: the idle policy that warned about it."""
IDLE_RECLAIMED_AT: Final = "trainwarden.dev/idle-reclaimed-at"
"""Annotation on a pod: when an idle policy reclaimed it (idle/actions.py)."""
CORDONED_BY: Final = "trainwarden.dev/cordoned-by"
"""Annotation on a node an idle policy cordoned: only those are uncordoned by it."""
IDLE_NODE_LABEL: Final = "trainwarden.dev/idle-node"
"""Label `"true"` an idle policy sets on idle accelerator nodes, for the autoscaler."""
RECEIPT: Final = "trainwarden.dev/receipt"
"""Annotation on a finished run's workload: its receipt in compact JSON (core/receipts.py),
written by the receipts controller."""
PARAMS: Final = "trainwarden.dev/params"
"""Annotation on a workload (a bare pod's own): the run's key parameters, a JSON object or
`k=v,k=v`. Written by a tenant; bounded and validated by core/ledger.py (the valid part is
recorded on the run's receipt, what was dropped is said there)."""
DATA_VERSION: Final = "trainwarden.dev/data-version"
"""Annotation on a workload: the version of the data the run reads. Written by a tenant;
recorded on the receipt and compared by the admission webhook's repeat check."""
CODE_VERSION: Final = "trainwarden.dev/code-version"
"""Annotation on a workload: the version of the code the run executes (a commit, say)."""
REPEAT_INTENDED: Final = "trainwarden.dev/repeat-intended"
"""Annotation `"true"` on new work: it repeats a finished run on purpose; a budget with
repeats: Hold only warns. Written by a tenant; read by the admission webhook."""
REPEAT_OF: Final = "trainwarden.dev/repeat-of"
"""Annotation the admission webhook puts on new work that repeats a finished run: that
run's RunReceipt. A claim only: the receipts slice names the earlier run in an Event only
after finding it in its own ledger for what the work declares."""
REPEAT_HELD_BY: Final = "trainwarden.dev/repeat-held-by"
"""Annotation the admission webhook puts on a repeat it held: the budget whose repeats:
Hold did (its submitter starts it by unsuspending it)."""
CONFIG_HASH: Final = "trainwarden.dev/config-hash"
"""Annotation on a workload: the run's configuration hash; without one the operator
computes one from params, data version and code version (core/ledger.py)."""

# --- Checkpoint pruning ----------------------------------------------------------------

PRUNER_FOR: Final = "trainwarden.dev/pruner-for"
"""Label on pruner Jobs: the location key they prune. Written and read by
checkpoints/pruner.py, which adopts a Job only if its spec is the one it would create."""
PRUNER_POLICY: Final = "trainwarden.dev/policy"
"""Label on pruner Jobs: the policy (hash-shortened past 63 characters, as label values
must be)."""
PRUNER_REASON: Final = "trainwarden.dev/reason"
"""Annotation on pruner Jobs: which policy prunes what, for people."""
PRUNED_BY: Final = "trainwarden.dev/pruned-by"
"""Annotation on a PVC: the CheckpointPolicy that last pruned it, for people."""
PRUNED: Final = "trainwarden.dev/pruned"
"""Annotation on a PVC: when and what that pruning did, for people."""

# --- Orphaned volumes (volumes/, docs/storage.md) ------------------------------------

PROTECT_LABEL: Final = "trainwarden.dev/protect"
"""Label `"true"` on a PVC: no VolumeReclaimPolicy ever deletes it. Written by a tenant;
read by core/orphans.py (only the exact value "true" protects)."""
ORPHANED_SINCE: Final = "trainwarden.dev/orphaned-since"
"""Annotation on a PVC (Enforce only): since when the operator's own record says no pod
mounted it. Output only: never read back (the record is the policy's status)."""
VOLUME_POLICY: Final = "trainwarden.dev/volume-policy"
"""Annotation on a PVC, and label on the VolumeSnapshot taken of it: the
VolumeReclaimPolicy that reported it and why. Output only."""
SOURCE_CLAIM_UID: Final = "trainwarden.dev/source-claim-uid"
"""Label on a VolumeSnapshot the operator took: the uid of the claim it copies. The
snapshot is waited for only if this label and the name both match."""

# --- RunReceipts (written by the operator; namespaced, so a team may read them) ---------

WORKLOAD_UID: Final = "trainwarden.dev/workload-uid"
"""Label on a RunReceipt: the run's workload uid, to find its receipt (receipts/ledger.py);
the receipt's seal, not this label, is what the operator trusts."""
SEAL: Final = "trainwarden.dev/seal"
"""Annotation on a RunReceipt: `<key id>.<HMAC-SHA256 in hex>` (receipts/identity.py)."""
SEAL_KEY: Final = "trainwarden.dev/seal-key"
"""Label on a RunReceipt naming the seal's key id, for people:
`kubectl delete rcpt -l ...=<a lost key's id>`. Never read by the operator."""

# --- The local cluster's simulated pods (testing/, e2e/cluster/stages) -------------------

SIM_COMPLETE_AFTER: Final = "sim.trainwarden.dev/complete-after"
"""Annotation on a simulated pod: kwok's stage completes it after this Go duration. Never
read by the operator."""
SIM_FAIL_AFTER: Final = "sim.trainwarden.dev/fail-after"
"""Annotation on a simulated pod: kwok's stage fails it after this Go duration. Never read
by the operator."""
