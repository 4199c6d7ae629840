"""The pruner Job's fixed template, and reading its report back."""

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from test_pruning import POLICY as HF_POLICY
from test_pruning import write
from trainwarden.adapters.workloads import label_value
from trainwarden.api.v1alpha1.checkpoint import CheckpointPolicySpec
from trainwarden.api.v1alpha1.names import PRUNER_POLICY
from trainwarden.checkpoints.pruner import (
    DEFAULT_UID,
    PrunerReport,
    PrunerSettings,
    adoptable,
    job_name,
    manifest,
    not_adopted,
    ours,
    outcome,
    parse_report,
)
from trainwarden.core.locations import Location
from trainwarden.storage.pruning import Report, load_spec, prune

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
    job = manifest(WHERE, "p", spec(mode="Enforce"), "Running", DUE, PrunerSettings("img:1", 1000))
    pod = pod_spec(job)
    assert pod["automountServiceAccountToken"] is False
    assert "serviceAccountName" not in pod
    container = pod["containers"][0]
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }
    assert pod["securityContext"] == {
        "runAsNonRoot": True,
        "runAsUser": 1000,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
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
    assert args[args.index("--within") + 1] == "/checkpoints", "no symlink below the mount"
    assert pod_spec(job)["securityContext"]["runAsUser"] == DEFAULT_UID == 65532


def test_the_pruner_never_runs_as_root() -> None:
    with pytest.raises(ValueError, match="non-root"):
        PrunerSettings("img:1", 0)


def test_a_long_policy_name_is_no_label_value_as_is() -> None:
    long = "p" * 200
    job = manifest(WHERE, long, spec(), "Running", DUE, PrunerSettings("img:1"))
    for labels in (job["metadata"]["labels"], job["spec"]["template"]["metadata"]["labels"]):
        assert len(labels[PRUNER_POLICY]) <= 63
        assert labels[PRUNER_POLICY] == label_value(long) != label_value("p" * 199)


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


def finished_job(kind: str = "Complete", uid: str = "job-uid") -> dict[str, Any]:
    job = manifest(WHERE, "p", spec(), "Running", DUE, PrunerSettings("img:1"))
    job["metadata"] |= {"name": "trainwarden-prune-x-1", "uid": uid}
    job["status"] = {
        "completionTime": "2026-12-02T12:01:00Z",
        "conditions": [{"type": kind, "status": "True"}],
    }
    return job


def pod(message: str, job: dict[str, Any] | None = None, **change: Any) -> dict[str, Any]:
    """The pod the Job controller makes: controlled by the Job, its template's container."""
    job = job or finished_job()
    container = {**pod_spec(job)["containers"][0], **change}
    return {
        "metadata": {
            "labels": {"job-name": job["metadata"]["name"]},
            "ownerReferences": [{"kind": "Job", "uid": job["metadata"]["uid"], "controller": True}],
        },
        "spec": {"containers": [container], "volumes": pod_spec(job)["volumes"]},
        "status": {
            "containerStatuses": [{"name": "pruner", "state": {"terminated": {"message": message}}}]
        },
    }


def summary(**change: Any) -> str:
    report = Report("/checkpoints", False, scanned=3, kept=2, deleted=["c-1"], bytes_freed=10)
    return json.dumps({**report.summary(), **change})


def test_the_report_comes_from_the_termination_message() -> None:
    got = outcome(finished_job(), [pod(summary())])
    assert got.report is not None
    assert (got.report.scanned, got.report.deleted_count, got.report.deleted) == (3, 1, ["c-1"])
    assert got.finished_at == datetime(2026, 12, 2, 12, 1, tzinfo=UTC)
    assert got.error is None


def test_every_summary_the_pruner_writes_is_a_report_the_operator_reads(tmp_path: Path) -> None:
    for step in range(1, 400):
        write(tmp_path / "run", step, 1.0)
    made = prune(tmp_path / "run", load_spec(yaml.safe_dump(HF_POLICY)), dry_run=True)
    parsed = parse_report(json.dumps(made.summary()))
    assert isinstance(parsed, PrunerReport), parsed
    failed = Report("/x", False, error="cannot read /x: Permission denied")
    assert parse_report(json.dumps(failed.summary())) == PrunerReport(
        root="/x",
        dry_run=False,
        failed=True,
        error=failed.error,
        scanned=0,
        kept=0,
        deleted_count=0,
        bytes_freed=0,
        bytes_retained=0,
    )


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ({"deletedCount": "lots"}, "deletedCount: Input should be a valid integer"),
        ({"bytesFreed": 1e400}, "bytesFreed: Input should be a valid integer"),
        ({"bytesFreed": 10**30}, "bytesFreed: Input should be less than or equal to"),
        ({"scanned": -1}, "scanned: Input should be greater than or equal to 0"),
        ({"dryRun": "no"}, "dryRun: Input should be a valid boolean"),
        ({"deleted": ["x"] * 5000}, "deleted: List should have at most 1000 items"),
        ({"notes": ["x" * 5000]}, "notes.0: String should have at most 300 characters"),
        ({"kept": 9}, "more checkpoints kept or deleted than scanned"),
        ({"deletedCount": 0, "deleted": []}, "bytes freed without a deletion"),
        ({"deleted": ["a", "b"]}, "more names deleted than deletedCount"),
        ({"completed": [1] * 33}, "completed: List should have at most 32 items"),
        ({"completed": ["2026-12-02T12:00:00Z"]}, "completed.0: Input should be a valid integer"),
        ({"scannedAt": -5}, "scannedAt: Input should be greater than or equal to 0"),
        ({"scannedAt": 1e300}, "scannedAt: Input should be a valid integer"),
    ],
)
def test_a_forged_report_is_refused_whole_and_records_nothing(
    change: dict[str, Any], problem: str
) -> None:
    got = outcome(finished_job(), [pod(summary(**change))])
    assert got.report is None
    assert got.error is not None
    assert "reported no readable summary" in got.error
    assert problem in got.error


CRAFTED = {"name": "checkpoints", "persistentVolumeClaim": {"claimName": "crafted"}}


@pytest.mark.parametrize(
    "imposter",
    [
        {"metadata": {"labels": {"job-name": "trainwarden-prune-x-1"}}},  # a copied label
        {"metadata": {"ownerReferences": [{"uid": "job-uid", "controller": False}]}},
        {"metadata": {"ownerReferences": [{"uid": "other", "controller": True}]}},
        {"spec": {"containers": [{"name": "pruner", "image": "img:1", "command": ["sh"]}]}},
        {"spec": {"containers": []}},
        {"spec": {**pod("")["spec"], "volumes": [CRAFTED]}},
    ],
)
def test_only_the_jobs_own_pod_is_believed(imposter: dict[str, Any]) -> None:
    forged = pod(summary(bytesFreed=10**15, deletedCount=3, scanned=3))
    for key, value in imposter.items():
        forged[key] = value
    got = outcome(finished_job(), [forged])
    assert got.report is None
    assert got.error is not None
    assert "no readable summary" in got.error


def test_a_sidecar_says_nothing_for_the_pruner() -> None:
    """A container a webhook added to the Job's pod: its message is not the report."""
    real = pod(summary())
    real["spec"]["containers"].append({"name": "istio-proxy", "image": "proxy"})
    real["status"]["containerStatuses"].append(
        {"name": "istio-proxy", "state": {"terminated": {"message": summary(scanned=99)}}}
    )
    got = outcome(finished_job(), [real])
    assert got.report is not None
    assert got.report.scanned == 3


def test_only_the_job_this_operator_created_is_ours() -> None:
    job = finished_job(uid="made-by-us")
    assert ours(job, "made-by-us", WHERE, "p")
    assert not ours(job, "", WHERE, "p"), "no record: not adopted"
    assert not ours(job, "someone-elses", WHERE, "p")
    assert not ours(job, "made-by-us", WHERE, "another-policy")
    relabelled = {**job, "metadata": {**job["metadata"], "labels": {PRUNER_POLICY: "p"}}}
    assert not ours(relabelled, "made-by-us", WHERE, "p")
    assert "not adopted" in not_adopted("trainwarden-prune-x-1")


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
        (
            finished_job("Failed"),
            [pod(summary(failed=True, error="cannot read /checkpoints/x: Permission denied"))],
            "failed: cannot read /checkpoints/x: Permission denied",
        ),
    ],
)
def test_a_failed_or_unreadable_run_is_an_error_not_a_count(
    job: dict[str, Any], pods: list[dict[str, Any]], error: str
) -> None:
    got = outcome(job, pods)
    assert got.report is None
    assert got.error is not None
    assert error in got.error


ADOPT_SETTINGS = PrunerSettings("localhost/trainwarden:t", run_as_user=1000)


def run_manifest() -> dict[str, Any]:
    return manifest(WHERE, "p", spec(), "Unknown", DUE, ADOPT_SETTINGS)


def test_the_runs_own_job_is_adopted_once_when_its_uid_was_never_recorded() -> None:
    """An operator killed between creating a run's pruner Job and recording its uid: the
    restarted one meets the Job by name and adopts it (as stored: the API server adds a
    uid and defaults), unless that Job's report was recorded already."""
    wanted = run_manifest()
    stored = json.loads(json.dumps(wanted))
    stored["metadata"] |= {"uid": "u-1", "resourceVersion": "7"}
    stored["spec"]["template"]["spec"]["dnsPolicy"] = "ClusterFirst"
    assert adoptable(stored, wanted, recorded_job=None)
    assert not adoptable(stored, wanted, recorded_job=wanted["metadata"]["name"])


def _changed(job: dict[str, Any], where: str, value: Any) -> dict[str, Any]:
    """`job` with one field, named by a dotted path into the pod spec, set to `value`."""
    copy = json.loads(json.dumps(job))
    pod = copy["spec"]["template"]["spec"]
    container = pod["containers"][0]
    target, key = {
        "image": (container, "image"),
        "args": (container, "args"),
        "command": (container, "command"),
        "mounts": (container, "volumeMounts"),
        "volumes": (pod, "volumes"),
        "runAsUser": (pod["securityContext"], "runAsUser"),
        "runAsNonRoot": (pod["securityContext"], "runAsNonRoot"),
        "containerSecurity": (container, "securityContext"),
        "initContainers": (pod, "initContainers"),
        "sidecar": (pod, "containers"),
        "shareProcessNamespace": (pod, "shareProcessNamespace"),
        "policyLabel": (copy["metadata"]["labels"], PRUNER_POLICY),
        "name": (copy["metadata"], "name"),
    }[where]
    target[key] = value(target.get(key)) if callable(value) else value
    return copy


CHANGES = st.sampled_from(
    [
        ("image", "localhost/evil:1"),
        ("args", lambda a: [*a, "--finished"]),
        ("args", lambda a: [x for x in a if x != "--enforce"] + ["--dry-run"]),
        ("command", ["sh", "-c", "echo {}"]),
        ("mounts", [{"name": "checkpoints", "mountPath": "/elsewhere"}]),
        ("volumes", [{"name": "checkpoints", "persistentVolumeClaim": {"claimName": "other"}}]),
        ("runAsUser", 0),
        ("runAsNonRoot", False),
        ("containerSecurity", {"privileged": True}),
        ("initContainers", [{"name": "before", "image": "busybox"}]),
        ("sidecar", lambda c: [*c, {"name": "writer", "image": "busybox"}]),
        ("shareProcessNamespace", True),
        ("policyLabel", "another-policy"),
        ("name", "trainwarden-prune-other-1"),
    ]
)


@settings(max_examples=60, deadline=None)
@given(changes=st.lists(CHANGES, min_size=1, max_size=3))
def test_a_job_that_is_not_exactly_the_runs_own_is_never_adopted(
    changes: list[tuple[str, Any]],
) -> None:
    """Anyone who can create Jobs in the namespace can create one of the run's
    predictable name before the operator does: whatever differs from the run's pruner
    (what runs, as whom, on which volume, beside what, for which policy) is refused."""
    wanted = run_manifest()
    found = wanted
    for where, value in changes:
        found = _changed(found, where, value)
    found["metadata"]["uid"] = "someone-elses"
    assert not adoptable(found, wanted, recorded_job=None)
