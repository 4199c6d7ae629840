"""Kueue's budget AdmissionCheck, one folder (docs/architecture.md, docs/budgets.md):
controller.py decides the check on every Workload from the budgets' published views
(core/admission.py BudgetView, core/kueue.py); reconcile.py acts on it."""
