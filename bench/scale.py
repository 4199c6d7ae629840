"""Benchmark: trainwarden at the size of a real GPU cluster, side by side with a naive
janitor and a bare watch client (issue 12). Needs the local cluster (`make cluster`).

    .venv/bin/python bench/scale.py                 # 1,000 nodes, 10,000 pods, 100 budgets
    .venv/bin/python bench/scale.py --quick         # 50 nodes, 500 pods: a few minutes
    .venv/bin/python bench/scale.py --help          # every size, duration and deadline
    .venv/bin/python bench/scale.py --cleanup-only  # remove what an interrupted run left

It builds a world of kwok GPU nodes, namespaces, policies, Jobs and pods; starts the
operator exactly as a user does (`trainwarden run`); measures initial sync, steady state
and churn; prints one table per phase with ratios against both references and the issue's
targets; and deletes what it created. How each figure is measured: docs/scale.md and the
modules of bench/scale/.
"""

import sys

from scale.main import main  # bench/scale/, the package next to this file

if __name__ == "__main__":
    sys.exit(main())
