"""`trainwarden estimate` against the real API server: budgets listed cluster-wide, the
target namespace's labels read, a status written through the status subresource.

It needs no operator and leaves a running one alone: its budget carries the
trainwarden.dev/instance label of no operator, so nobody else writes its status. It does
not start or repair the cluster either (no `cluster` fixture, which runs up.sh): without a
reachable API server and the CRDs it skips.
"""

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client, config

from harness import CLUSTER_DIR, read_env
from trainwarden.api.v1alpha1.names import EXPECTED_DURATION
from trainwarden.testing.builders import BudgetBuilder, JobBuilder

INSTANCE = "estimate-cli"


@pytest.fixture(scope="module")
def api() -> tuple[client.ApiClient, Path]:
    env_file = CLUSTER_DIR / "cluster.env"
    if not env_file.exists():
        pytest.skip("no local cluster (make cluster)")
    kubeconfig = Path(read_env(env_file)["KUBECONFIG"])
    api = config.new_client_from_config(config_file=str(kubeconfig))
    try:
        client.ApiextensionsV1Api(api).read_custom_resource_definition(
            "trainingbudgets.trainwarden.dev"
        )
    except Exception as error:  # unreachable, or no CRDs installed
        pytest.skip(f"the local cluster cannot be used: {type(error).__name__}")
    return api, kubeconfig


@pytest.fixture
def team(api: tuple[client.ApiClient, Path]) -> Iterator[str]:
    """Our own namespace, labelled team=<it>, and nothing left behind."""
    name = f"tw-estimate-{uuid.uuid4().hex[:6]}"
    core = client.CoreV1Api(api[0])
    core.create_namespace(
        client.V1Namespace(metadata=client.V1ObjectMeta(name=name, labels={"team": name}))
    )
    yield name
    custom = client.CustomObjectsApi(api[0])
    for suffix in ("-team", "-other"):
        try:
            custom.delete_cluster_custom_object(
                "trainwarden.dev", "v1alpha1", "trainingbudgets", name + suffix
            )
        except client.ApiException as error:
            if error.status != 404:
                raise
    core.delete_namespace(name)


def estimate(kubeconfig: Path, manifest: Path, *args: str) -> tuple[int, Any, str]:
    done = subprocess.run(
        [sys.executable, "-m", "trainwarden", "estimate", "-f", str(manifest), *args],
        env={**os.environ, "KUBECONFIG": str(kubeconfig)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    out = json.loads(done.stdout) if "json" in args and done.stdout else done.stdout
    return done.returncode, out, done.stderr


def test_estimate_against_the_cluster_budgets(
    api: tuple[client.ApiClient, Path], team: str, tmp_path: Path
) -> None:
    custom = client.CustomObjectsApi(api[0])
    budget = (
        BudgetBuilder(f"{team}-team")
        .instance(INSTANCE)
        .namespace_selector({"team": team})
        .accelerator_hours(100)
        .accelerator_rate(2.0)
        .enforce()
        .build()
    )
    other = BudgetBuilder(f"{team}-other").instance(INSTANCE).namespaces("elsewhere")
    for body in (budget, other.accelerator_hours(1).build()):
        custom.create_cluster_custom_object("trainwarden.dev", "v1alpha1", "trainingbudgets", body)
    job = JobBuilder("pretrain").gpus(8).parallelism(2)  # no namespace: -n says where
    manifest = tmp_path / "job.yaml"
    manifest.write_text(yaml.safe_dump(job.annotations({EXPECTED_DURATION: "3h"}).build()))

    code, out, _ = estimate(api[1], manifest, "-n", team, "-o", "json")
    assert code == 0
    assert out["budgetSource"] == "the cluster"
    (w,) = out["workloads"]
    assert (w["namespace"], w["total"]["acceleratorHours"]) == (team, 48.0)
    (b,) = w["budgets"]  # the namespace's labels were read: only the team budget covers it
    assert (b["budget"], b["cost"], b["remaining"]) == (f"{team}-team", 96.0, None)

    current = custom.get_cluster_custom_object(
        "trainwarden.dev", "v1alpha1", "trainingbudgets", f"{team}-team"
    )
    until = (datetime.now(UTC) + timedelta(hours=1)).isoformat(timespec="seconds")
    status = {
        "remaining": {"acceleratorHours": 40.0},
        "admission": {
            "holding": True,
            "holdUntil": until,
            "observedGeneration": current["metadata"]["generation"],
        },
    }
    custom.patch_cluster_custom_object_status(
        "trainwarden.dev", "v1alpha1", "trainingbudgets", f"{team}-team", {"status": status}
    )
    code, out, _ = estimate(api[1], manifest, "-n", team, "-o", "json", "--fail-over", "100")
    assert code == 1, "120 % of what is left"
    (b,) = out["workloads"][0]["budgets"]
    assert b["percentOfRemaining"] == {"acceleratorHours": 120.0}
    assert (b["wouldExceed"], b["held"]) == (True, "Held")

    code, text, err = estimate(api[1], manifest, "-n", f"{team}-absent")
    assert code == 0
    assert "does not exist" in err
    assert "no TrainingBudget covers it" in text
