"""IdleReclaimPolicy, one folder (docs/architecture.md, docs/idle.md): controller.py says when
a policy is evaluated; reconcile.py runs one evaluation (observe.py, actions.py, nodes.py,
pressure.py, rightsizing.py, status.py). Pure decisions, no I/O: demand.py (the shared
idleness rules, core/reclaim.py and core/idleness.py, stay in the kernel: core/reads.py
names their annotations)."""
