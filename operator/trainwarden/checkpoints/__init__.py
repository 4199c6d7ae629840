"""CheckpointPolicy, one folder (docs/architecture.md, docs/checkpoints.md): controller.py says
when a policy is evaluated; reconcile.py runs one evaluation over every location through
the one interface of locations.py (pvc.py with the pruner Job of pruner.py, snapshots.py,
s3.py). The retention rules and layouts are the kernel's (core/retention.py, storage/):
`trainwarden prune` runs them too."""
