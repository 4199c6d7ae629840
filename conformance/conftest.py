"""The conformance suite: real checkpoints written by the real libraries (tiny models, CPU,
a few steps), pruned by `trainwarden prune` in DryRun and Enforce, then handed back to the
library: its best still loads, training resumes from the newest checkpoint left,
`ckpt_path="best"` works.

The libraries live in their own venv (.venv-conformance, `make conformance`); trainwarden
runs as the command the pruner Job runs, from the project's venv, or from the command
named by TRAINWARDEN_CLI (another checkout's `.venv/bin/trainwarden`, to try its code).
"""

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
CLI = os.environ.get("TRAINWARDEN_CLI", str(ROOT / ".venv" / "bin" / "trainwarden"))
AGE = 600
"""Seconds every checkpoint is made older by, past the policies' minAge."""

Prune = Callable[..., dict[str, Any]]


def policy(layout: str, **retention: Any) -> dict[str, Any]:
    """A CheckpointPolicy in Enforce mode as it sits in a GitOps repo."""
    return {
        "apiVersion": "trainwarden.dev/v1alpha1",
        "kind": "CheckpointPolicy",
        "metadata": {"name": "conformance"},
        "spec": {
            "mode": "Enforce",
            "scope": {"namespaces": ["ml"]},
            "storage": {"pvc": {"path": "/"}},
            "layout": {"type": layout},
            "retention": {"minAge": "60s", **retention},
        },
    }


def age(directory: Path, seconds: int = AGE) -> None:
    """Every file and directory below `directory` written `seconds` earlier (their order
    kept), so that minAge protects none of them. Links are left as they are."""
    for path in [directory, *directory.rglob("*")]:
        if path.is_symlink():
            continue
        info = path.stat()
        os.utime(path, (info.st_atime - seconds, info.st_mtime - seconds))


def entries(directory: Path) -> set[str]:
    return {p.name for p in directory.iterdir()}


def _run(directory: Path, spec: dict[str, Any], *extra: str) -> dict[str, Any]:
    policy_file = directory.parent / f"{directory.name}-policy.yaml"
    policy_file.write_text(yaml.safe_dump(spec))
    done = subprocess.run(
        [CLI, "prune", str(directory), "--policy", str(policy_file), "-o", "json", *extra],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    if done.returncode != 0:
        raise AssertionError(f"trainwarden prune failed ({done.returncode}): {done.stderr}")
    report: dict[str, Any] = json.loads(done.stdout)
    print(f"\n--- trainwarden prune {' '.join(extra)} {directory.name}", file=sys.stderr)
    for c in report.get("checkpoints", []):
        print(f"  {c['verdict']:<12} {c['rule']:<16} {c['name']}  {c['reason']}", file=sys.stderr)
    for note in report.get("notes", []):
        print(f"  note: {note}", file=sys.stderr)
    return report


@pytest.fixture
def prune() -> Prune:
    """Prune a directory: DryRun first, then Enforce, which must delete exactly what DryRun
    listed; returns the Enforce report (with `dryRun`, the DryRun one)."""

    def run(directory: Path, spec: dict[str, Any]) -> dict[str, Any]:
        age(directory)
        before = entries(directory)
        planned = _run(directory, spec, "--dry-run")
        assert entries(directory) == before, "DryRun touched nothing"
        enforced = _run(directory, spec)
        after = entries(directory)
        assert sorted(enforced["deleted"]) == sorted(planned["deleted"]), "Enforce did as planned"
        assert before - after == set(enforced["deleted"]), "what was reported is what went"
        enforced["dryRunReport"] = planned
        return enforced

    return run
