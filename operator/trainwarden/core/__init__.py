"""Pure policy decisions: no I/O, no clocks (time is an argument), no Kubernetes client."""
