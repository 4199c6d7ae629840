"""TrainingBudget, one folder (docs/architecture.md, docs/budgets.md): controller.py says when
a budget is evaluated; reconcile.py runs one evaluation (decide.py decides, enforce.py and
targets.py suspend and resume, holds.py starts held work, record.py writes status;
catchup.py, efficiency.py, labels.py). Pure decisions, no I/O: ledger (periods, accrual),
meters, enforcement (what stops a pod, what is suspended), holding, status."""
