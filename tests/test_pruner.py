"""The pruner Job's fixed template, and reading its report back."""

import json
from datetime import UTC, datetime
from typing import Any

import pytest

from trainwarden.api.v1alpha1.checkpoint import CheckpointPolicySpec
from trainwarden.core.locations import Location
from trainwarden.reconcile.pruner import PrunerSettings, job_name, manifest, outcome

DUE = datetime(2026, 12, 2, 12, tzinfo=UTC)
SPEC = {"scope": {"namespaces": ["team"]}, "storage": {"pvc": {}}}
WHERE = Location(
    "team", "ckpt", "/runs/a", pins=frozenset({"checkpoint-5"}), resume_from=frozenset({"c-9"})
)


def spec(**extra: Any) -> CheckpointPolicySpec:
    return CheckpointPolicySpec.model_validate({**SPEC, **extra})


def pod_spec(job: dict[str, Any]) -> dict[str, Any]:
    found: dict[str, Any] = job["spec"]["template"]["spec"]
    return found


def test_the_pruner_has_no_api_credentials_and_a_locked_down_container() -> None:
    job = manifest(WHERE, "p", spec(mode="Enforce"), "Running", DUE, PrunerSettings("img:1", 0))
    pod = pod_spec(job)
    assert pod["automountServiceAccountToken"] is False
    assert "serviceAccountName" not in pod
    container = pod["containers"][0]
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }
    assert pod["securityContext"]["runAsUser"] == 0
    assert job["spec"]["backoffLimit"] == 0
    assert job["spec"]["ttlSecondsAfterFinished"] > 0
    assert job["metadata"]["namespace"] == "team"
    assert pod["volumes"] == [
        {"name": "checkpoints", "persistentVolumeClaim": {"claimName": "ckpt", "readOnly": False}}
    ]


def test_the_pruner_runs_the_same_engine_with_the_directory_state() -> None:
    job = manifest(WHERE, "p", spec(mode="Enforce"), "Running", DUE, PrunerSettings("img:1"))
    args = pod_spec(job)["containers"][0]["args"]
    assert args[:2] == ["prune", "/checkpoints/runs/a"]
    policy = json.loads(args[args.index("--policy-json") + 1])
    assert CheckpointPolicySpec.model_validate(policy) == spec(mode="Enforce")
    assert {"--enforce", "--running"} <= set(args)
    assert args[args.index("--pin") + 1] == "checkpoint-5"
    assert args[args.index("--resume-from") + 1] == "c-9"
    assert "runAsUser" not in pod_spec(job)["securityContext"]


def test_dry_run_mounts_the_volume_read_only() -> None:
    job = manifest(WHERE, "p", spec(), "Finished", DUE, PrunerSettings("img:1"))
    pod = pod_spec(job)
    assert pod["volumes"][0]["persistentVolumeClaim"]["readOnly"] is True
    assert pod["containers"][0]["volumeMounts"][0]["readOnly"] is True
    assert {"--dry-run", "--finished"} <= set(pod["containers"][0]["args"])


def test_job_names_are_deterministic_per_scheduled_run() -> None:
    assert job_name(WHERE, DUE) == job_name(WHERE, DUE)
    assert job_name(WHERE, DUE) != job_name(WHERE, DUE.replace(hour=13))
    assert len(job_name(WHERE, DUE)) <= 63


def finished_job(kind: str = "Complete") -> dict[str, Any]:
    return {
        "metadata": {"name": "trainwarden-prune-x-1"},
        "status": {
            "completionTime": "2026-12-02T12:01:00Z",
            "conditions": [{"type": kind, "status": "True"}],
        },
    }


def pod(message: str) -> dict[str, Any]:
    return {"status": {"containerStatuses": [{"state": {"terminated": {"message": message}}}]}}


def test_the_report_comes_from_the_termination_message() -> None:
    got = outcome(finished_job(), [pod('{"scanned": 3, "deletedCount": 1}')])
    assert got.report == {"scanned": 3, "deletedCount": 1}
    assert got.finished_at == datetime(2026, 12, 2, 12, 1, tzinfo=UTC)
    assert got.error is None


@pytest.mark.parametrize(
    ("job", "pods", "error"),
    [
        (finished_job("Failed"), [pod("Traceback: PermissionError")], "PermissionError"),
        (finished_job("Failed"), [], "failed without a message"),
        (
            {
                "metadata": {"name": "j"},
                "status": {
                    "conditions": [
                        {
                            "type": "Failed",
                            "status": "True",
                            "reason": "DeadlineExceeded",
                            "message": "Job was active longer than specified deadline",
                        }
                    ]
                },
            },
            [],
            "DeadlineExceeded: Job was active longer",
        ),
        (finished_job(), [pod("not json")], "no readable summary"),
        (finished_job(), [pod("[1, 2]")], "no readable summary"),
    ],
)
def test_a_failed_or_unreadable_run_is_an_error_not_a_count(
    job: dict[str, Any], pods: list[dict[str, Any]], error: str
) -> None:
    got = outcome(job, pods)
    assert got.report is None
    assert got.error is not None
    assert error in got.error
