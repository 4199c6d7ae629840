"""Two operators on one cluster: each governs only the policies of its instance.

`trainwarden run --instance=NAME` governs the policies labelled trainwarden.dev/instance=NAME;
without --instance, only the policies without that label. This is how `make demo` (its
operator runs as instance `demo`) and `make test` (operators without --instance) share one
cluster in either order.

Each check would fail if the choice were wrong: an operator that governed every policy
would report the other's budget in its own metrics and keep evaluating it once its own
operator stopped; one that governed none would never evaluate its own. The instance name is
unique per run, so that another suite running against the same cluster (whose operators
govern unlabelled policies) cannot evaluate the labelled budget in this test's place.
"""

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from harness import (
    Cluster,
    Operator,
    budget,
    create_policy,
    get_budget,
    holds,
    samples,
    start_operator,
    wait_for,
)
from trainwarden.testing.builders import INSTANCE_LABEL

PLURAL = "trainingbudgets"


@dataclass(frozen=True)
class Pair:
    default: Operator
    other: Operator
    instance: str


@pytest.fixture
def pair(cluster: Cluster, crds: None, namespace: str, tmp_path: Path) -> Iterator[Pair]:
    """An operator without --instance and one with --instance=x-<namespace>, started at once."""
    instance = f"x-{namespace}"
    with ThreadPoolExecutor(2) as pool:
        starting = [
            pool.submit(start_operator, cluster.kubeconfig, tmp_path / "default.log"),
            pool.submit(
                start_operator,
                cluster.kubeconfig,
                tmp_path / "other.log",
                args=(f"--instance={instance}",),
            ),
        ]
    try:
        default, other = (future.result() for future in starting)
    except BaseException:
        for future in starting:
            if future.exception() is None:
                future.result().stop()
        raise
    yield Pair(default, other, instance)
    other.stop()
    default.stop()


def governed(operator: Operator) -> set[str]:
    """The budgets this operator process evaluates, from its own metrics."""
    series = samples(operator, "trainwarden_policy_ready", kind="TrainingBudget")
    return {labels["name"] for labels, _ in series}


def observed(cluster: Cluster, name: str) -> int:
    """The generation every condition of the budget's status was written for (0: none)."""
    conditions = (get_budget(cluster, name).get("status") or {}).get("conditions") or []
    return min((int(c.get("observedGeneration") or 0) for c in conditions), default=0)


def raise_limit(cluster: Cluster, name: str, hours: float) -> int:
    """A spec change (a new generation) that a governing operator answers within seconds."""
    patched: dict[str, Any] = client.CustomObjectsApi(cluster.api).patch_cluster_custom_object(
        "trainwarden.dev",
        "v1alpha1",
        PLURAL,
        name,
        {"spec": {"limits": {"acceleratorHours": hours}}},
    )
    return int(patched["metadata"]["generation"])


def label(cluster: Cluster, name: str, instance: str | None) -> None:
    client.CustomObjectsApi(cluster.api).patch_cluster_custom_object(
        "trainwarden.dev",
        "v1alpha1",
        PLURAL,
        name,
        {"metadata": {"labels": {INSTANCE_LABEL: instance}}},
    )


def create_budgets(cluster: Cluster, namespace: str, instance: str) -> tuple[str, str]:
    """One DryRun budget without the label and one labelled `instance`."""
    unlabelled, labelled = f"{namespace}-default", f"{namespace}-x"
    create_policy(cluster, PLURAL, budget(unlabelled, namespace, 100).dry_run().build())
    create_policy(
        cluster, PLURAL, budget(labelled, namespace, 100).dry_run().instance(instance).build()
    )
    for name in (unlabelled, labelled):
        wait_for(
            lambda name=name: (get_budget(cluster, name).get("status") or {}).get("lastEvaluated"),
            timeout=30,
            what=f"status.lastEvaluated of {name}",
        )
    return unlabelled, labelled


def test_each_operator_writes_only_its_own_instances_status(
    cluster: Cluster, pair: Pair, namespace: str
) -> None:
    unlabelled, labelled = create_budgets(cluster, namespace, pair.instance)
    assert unlabelled in governed(pair.default)
    assert labelled not in governed(pair.default)
    assert labelled in governed(pair.other)
    assert unlabelled not in governed(pair.other)

    # Stop the instance's operator: nothing evaluates its budget any more, while the
    # default operator goes on with the other one.
    pair.other.stop()
    frozen = get_budget(cluster, labelled)["status"]
    before = observed(cluster, labelled)
    raise_limit(cluster, labelled, 200)
    generation = raise_limit(cluster, unlabelled, 200)
    wait_for(
        lambda: observed(cluster, unlabelled) == generation,
        timeout=30,
        what="the default operator to evaluate the new spec of its budget",
    )
    holds(
        lambda: get_budget(cluster, labelled)["status"] == frozen,
        duration=10,
        what=f"the status of {labelled} untouched once its operator stopped",
    )
    assert observed(cluster, labelled) == before


def test_relabelling_a_policy_hands_it_to_the_other_operator(
    cluster: Cluster, pair: Pair, namespace: str
) -> None:
    unlabelled, labelled = create_budgets(cluster, namespace, pair.instance)
    # They swap: the unlabelled one joins the instance, the labelled one leaves it.
    label(cluster, unlabelled, pair.instance)
    label(cluster, labelled, None)
    wait_for(
        lambda: governed(pair.other) >= {unlabelled} and labelled not in governed(pair.other),
        timeout=30,
        what="the instance's operator to take the relabelled budget and drop the other",
    )
    wait_for(
        lambda: governed(pair.default) >= {labelled} and unlabelled not in governed(pair.default),
        timeout=30,
        what="the default operator to take the unlabelled budget and drop the other",
    )
    for name in (unlabelled, labelled):
        generation = raise_limit(cluster, name, 300)
        wait_for(
            lambda name=name, generation=generation: observed(cluster, name) == generation,
            timeout=30,
            what=f"the new spec of {name} evaluated by the operator it moved to",
        )
