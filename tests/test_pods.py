"""Reading pods: effective requests as the scheduler reserves them, and when a pod ended."""

from datetime import UTC, datetime

from trainwarden.core.pods import controller_owner, effective_requests, snapshot
from trainwarden.core.reads import CODE

GPU = "nvidia.com/gpu"


def container(cpu: str, gpu: int = 0, **extra: str) -> dict[str, object]:
    requests: dict[str, object] = {"cpu": cpu}
    limits: dict[str, object] = {GPU: str(gpu)} if gpu else {}
    return {"name": "c", "resources": {"requests": requests, "limits": limits}, **extra}


def test_init_containers_count_as_their_maximum_not_their_sum() -> None:
    spec = {
        "initContainers": [container("8"), container("2")],
        "containers": [container("1", gpu=2), container("500m", gpu=2)],
    }
    assert effective_requests(spec) == {"cpu": 8.0, GPU: 4.0}


def test_sidecars_add_to_the_app_and_overhead_adds_on_top() -> None:
    spec = {
        "initContainers": [container("1", restartPolicy="Always")],
        "containers": [container("2", gpu=8)],
        "overhead": {"cpu": "250m"},
    }
    assert effective_requests(spec) == {"cpu": 3.25, GPU: 8.0}


def test_terminal_pod_ends_at_its_last_container() -> None:
    pod = {
        "metadata": {"uid": "u", "namespace": "ns", "name": "p"},
        "spec": {"containers": [container("1", gpu=1)]},
        "status": {
            "phase": "Failed",
            "startTime": "2026-01-01T00:00:00Z",
            "containerStatuses": [
                {"state": {"terminated": {"finishedAt": "2026-01-01T00:10:00Z"}}},
                {"state": {"terminated": {"finishedAt": "2026-01-01T00:12:00Z"}}},
            ],
        },
    }
    snap = snapshot(pod, CODE)
    assert snap.outcome == "Failed"
    assert snap.end == datetime(2026, 1, 1, 0, 12, tzinfo=UTC)


def test_running_pod_seen_gone_ends_then_and_unstarted_pod_has_no_start() -> None:
    gone_at = datetime(2026, 1, 1, 1, tzinfo=UTC)
    running = {
        "metadata": {"uid": "u"},
        "spec": {},
        "status": {"phase": "Running", "startTime": "2026-01-01T00:00:00Z"},
    }
    assert snapshot(running, CODE, gone_at=gone_at).end == gone_at
    assert snapshot(running, CODE).end is None
    pending = {"metadata": {"uid": "v"}, "spec": {}, "status": {"phase": "Pending"}}
    assert snapshot(pending, CODE).start is None


def test_controller_owner_ignores_non_controller_references() -> None:
    pod = {
        "metadata": {
            "ownerReferences": [
                {"apiVersion": "v1", "kind": "ConfigMap", "name": "x", "uid": "1"},
                {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "name": "j",
                    "uid": "2",
                    "controller": True,
                },
            ]
        }
    }
    owner = controller_owner(pod)
    assert owner is not None
    assert (owner.kind, owner.name) == ("Job", "j")
    assert controller_owner({"metadata": {}}) is None
