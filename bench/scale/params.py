"""Sizes, durations and deadlines of a run, and the issue's targets."""

from __future__ import annotations

import argparse
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Params:
    # --- the world ---------------------------------------------------------------------
    nodes: int = 1000
    """kwok GPU nodes (tainted: only benchmark pods land there)."""
    gpus_per_node: int = 64
    pods: int = 10_000
    """Long-running training pods, spread over the namespaces (Job pods included)."""
    namespaces: int = 100
    job_pods_per_namespace: int = 10
    """Of each namespace's pods, this many belong to one Job (placed by the scheduler); the
    rest are bare pods on a fixed node. Job pods go through kube-controller-manager at its
    default 20 QPS, so keep this modest."""
    budgets: int = 100
    idle_policies: int = 20
    checkpoint_policies: int = 50
    utilization: bool = True
    """Publish GPU utilization for every world pod through the DCGM exporter stand-in."""
    # --- phases ------------------------------------------------------------------------
    settle_seconds: int = 30
    """Pause after the operator's initial sync before the steady state is measured."""
    steady_seconds: int = 300
    churn_rates: tuple[float, ...] = (10, 50)
    churn_seconds: int = 180
    churn_pod_seconds: int = 30
    """How long a churn pod runs before kwok completes it."""
    janitor_interval: int = 30
    # --- probes ------------------------------------------------------------------------
    crossing_probes: int = 20
    """Enforce budgets per churn phase whose limit is crossed at a known time."""
    janitor_probes: int = 6
    """The same for the naive janitor (DryRun for the operator, enforced by the janitor)."""
    idle_probes: int = 10
    """Pods per churn phase that turn idle at a known time (an Enforce NotifyOnly policy)."""
    probe_lead_seconds: int = 30
    """The first crossing / idle start comes this long after the churn starts."""
    idle_window_seconds: int = 30
    # --- deadlines ---------------------------------------------------------------------
    sync_timeout: int = 600
    """How long to wait for the operator's first full evaluation of every budget."""
    reaction_timeout: int = 60
    """How long after a crossing (or an elapsed idle window) to wait for the reaction."""
    setup_timeout: int = 1800
    cleanup_timeout: int = 900
    # --- output ------------------------------------------------------------------------
    json_path: Path | None = None
    keep: bool = False
    quick: bool = False
    cleanup_only: bool = False

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["json_path"] = str(self.json_path) if self.json_path else None
        return out


QUICK: dict[str, Any] = {
    "nodes": 50,
    "pods": 500,
    "namespaces": 10,
    "job_pods_per_namespace": 5,
    "budgets": 10,
    "idle_policies": 4,
    "checkpoint_policies": 5,
    "settle_seconds": 10,
    "steady_seconds": 60,
    "churn_seconds": 60,
    "churn_pod_seconds": 20,
    "crossing_probes": 6,
    "janitor_probes": 3,
    "idle_probes": 4,
    "probe_lead_seconds": 20,
    "sync_timeout": 300,
}


@dataclass(frozen=True)
class Target:
    key: str
    text: str
    limit: float
    """The figure must be at most this."""


TARGETS = (
    Target("sync_seconds", "restarted into a full cluster, every budget evaluated (s)", 60),
    Target("rss_mib", "operator RSS, peak over every phase (MiB)", 400),
    Target("steady_cores", "steady-state CPU (cores)", 0.1),
    Target("churn10_cores", "CPU at 10 pods/s of churn (cores)", 0.5),
    Target("churn10_p99", "budget crossing -> suspension p99 at 10 pods/s (s)", 2),
    Target("steady_bytes_ratio", "steady API bytes/min, % of the naive janitor's", 1),
    Target("status_kib", "largest policy status (KiB)", 64),
)
TARGET_SIZE = "1,000 nodes / 10,000 pods / 100 budgets"


OWN_FLAGS = ("json_path", "keep", "quick", "cleanup_only")


def parse(argv: list[str] | None = None) -> Params:
    defaults = Params()
    parser = argparse.ArgumentParser(
        prog="bench/scale.py",
        description="trainwarden at the size of a real GPU cluster, side by side with a naive "
        "janitor and a bare watch client (needs `make cluster`; see docs/scale.md)",
    )
    parser.add_argument(
        "--quick", action="store_true", help="a small size that finishes in a few minutes"
    )
    parser.add_argument("--json", type=Path, dest="json_path", help="write the results here")
    parser.add_argument(
        "--keep", action="store_true", help="leave the world in the cluster at the end"
    )
    parser.add_argument(
        "--cleanup-only", action="store_true", help="remove what an earlier run left and exit"
    )
    for field in fields(Params):
        if field.name in OWN_FLAGS:
            continue
        flag = "--" + field.name.replace("_", "-")
        default = getattr(defaults, field.name)
        if isinstance(default, bool):
            parser.add_argument(flag, action=argparse.BooleanOptionalAction, default=None)
        elif isinstance(default, tuple):
            parser.add_argument(flag, type=float, nargs="+", default=None, metavar="RATE")
        else:
            parser.add_argument(flag, type=type(default), default=None, metavar="N")
    args = parser.parse_args(argv)
    params = replace(defaults, **QUICK) if args.quick else defaults
    chosen = {
        f.name: getattr(args, f.name)
        for f in fields(Params)
        if getattr(args, f.name, None) is not None and f.name != "quick"
    }
    if "churn_rates" in chosen:
        chosen["churn_rates"] = tuple(chosen["churn_rates"])
    return replace(params, **chosen, quick=args.quick)
