"""`make demo`: the local cluster, the operator, sample policies and simulated GPU training.

Runs against the cluster `make cluster` started, leaves everything running so you can
explore with `.cluster/bin/kubectl --kubeconfig .cluster/kubeconfig`, and prints what the
operator saw and did. `make demo-down` stops the demo's operator, `make cluster-down` it all.

The operator runs as instance `demo` (`trainwarden run --instance=demo`, the chart's
`operator.instance`) and every policy the demo applies carries the label
trainwarden.dev/instance=demo, so `make test` can run next to it: the tests' operators
govern only unlabelled policies, the demo's operator only its own.

One module per scene, run in this order by __main__.py:

    operators   start the operator: the chart on the real node, or a local process
    workloads   the teams' simulated training jobs and their GPUs' utilization
    policies    the sample policies, one with a mistake only the operator sees, one the
                API server rejects, and what the operator reports on each
    budget      an Enforce budget warns, suspends a job and resumes it
    storage     a budget's storage limit: two claims charged, a new one refused
    idle        an idle job is warned, then suspended
    trainer     a real trainer suspended by its budget, resumed from its checkpoint
    pruning     its checkpoints pruned to the final and the best once it finished
    receipts    its run receipt: held, used, cost, interruptions and the work they lost
    ledger      what the run was and reached on its receipt; a repeat warned before it starts
    report      the operator's metrics and logs

shell.py has what they share: the cluster's environment, kubectl, printing, and the label.
"""
