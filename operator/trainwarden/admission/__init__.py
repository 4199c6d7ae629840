"""The admission webhook, one folder (docs/architecture.md, docs/security.md): webhook.py
serves it (its certificate: certs.py), review.py answers an AdmissionReview, view.py keeps
the budgets and namespaces it decides on. The decision itself (core/admission.py) is the
kernel's: the budget and Kueue slices read the same BudgetView."""
