"""What a benchmark run records next to its figures: when, on which commit, on what
machine and under what load (this machine is shared: a figure without its load is
half a figure). Docs render their tables from these records (bench/docs.py)."""

import os
import subprocess
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def _commit() -> str:
    done = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    dirty = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=no"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    return done.stdout.strip() + ("+changes" if dirty.stdout.strip() else "")


def recorded(rows: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "measured": datetime.now(UTC).isoformat(timespec="seconds"),
        "commit": _commit(),
        "cpus": os.cpu_count(),
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "rows": rows,
    }
