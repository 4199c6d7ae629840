"""The scale benchmark (bench/scale.py): trainwarden at the size of a real GPU cluster, side by
side with a naive janitor and a bare watch client, against the local cluster with kwok.

Modules:
    params     sizes, durations, targets; the command line
    kube       raw JSON access to the API server (no client models), watches
    cluster    the local cluster: identities with their own flow schemas, API server metrics
    world      kwok nodes, namespaces, policies, Jobs and pods
    progress   the progress line; parallel creation with retries; deadlines
    cleanup    deleting everything the benchmark created
    meters     per-process CPU and RSS, requests and bytes per identity
    probes     budget-crossing and idle-window probes, and the watches that time them
    figures    evaluations, status sizes and staleness read from the cluster; event latencies
    clients    the measured processes: the operator, the janitor, the watcher, the proxy
    report     tables, ratios, targets, JSON
    main       the phases
Subprocesses (each runnable on its own): proxy, janitor, watcher, churn.
"""
