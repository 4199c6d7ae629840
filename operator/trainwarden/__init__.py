"""trainwarden: budgets, idle reclaim and checkpoint retention for ML training on Kubernetes."""
