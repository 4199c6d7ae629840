"""RunReceipts, one folder (docs/architecture.md, docs/receipts.md): controller.py gathers
runs (runs.py) and writes each closed run's receipt (reconcile.py), keeping the ledger
bounded (ledger.py); locations.py reads what a CheckpointPolicy's status says of a run's
checkpoints. Pure, no I/O: identity.py (the seal)."""
