"""When the policies come to read more of the objects the cache holds (issue 25): the
source is listed again with the larger keep, nothing is evaluated on records that lack
what a policy reads until that list is in, and what the stopped informer still had on
its way is dropped."""

import asyncio
import json
from datetime import UTC, datetime
from typing import Any

from trainwarden.adapters.informer import Informer, Source
from trainwarden.adapters.projected import Projected, grew
from trainwarden.cache.cluster import ClusterCache
from trainwarden.cache.reads import PolicyReads
from trainwarden.core.keep import Keep
from trainwarden.core.pods import facts
from trainwarden.core.reads import CODE
from trainwarden.runtime import PODS as PODS_READ
from world import Body

JSON = dict[str, Any]
T0 = datetime(2026, 12, 1, tzinfo=UTC)
TEAM_BUDGET = {
    "apiVersion": "trainwarden.dev/v1alpha1",
    "kind": "TrainingBudget",
    "metadata": {"name": "vision"},
    "spec": {
        "scope": {"namespaces": ["ns"], "selector": {"matchLabels": {"team": "vision"}}},
        "limits": {"acceleratorHours": 10},
    },
}


class Listed:
    """Informers that list a fixed page when told to (no thread, no server)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, pods: list[JSON]) -> None:
        self.loop = loop
        self.started: list[Informer[Any]] = []
        self.page = {"kind": "PodList", "metadata": {"resourceVersion": "7"}, "items": pods}

    def start(
        self, source: Source, project: Any, sink: Any, synced: asyncio.Event | None
    ) -> Informer[Any]:
        informer: Informer[Any] = Informer(None, source, project, sink, self.loop, synced=synced)  # type: ignore[arg-type]
        body = json.dumps(self.page).encode()
        informer._get = lambda query, *, stream: Body(body)  # type: ignore[method-assign]
        self.started.append(informer)
        return informer

    def list(self, informer: Informer[Any]) -> None:
        """Its thread's list, and the loop delivering what it scheduled."""
        informer._list()
        self.loop.run_until_complete(asyncio.sleep(0))


def test_a_policy_that_reads_more_lists_the_pods_again_and_nothing_acts_meanwhile() -> None:
    """Records kept before a budget came to select by `team` lack it: the pods are listed
    again with the larger keep, and the cache is interrupted (every evaluation held,
    controllers/base.py) from the budget's arrival until that list is delivered; what the
    old informer still had on its way is dropped."""
    loop = asyncio.new_event_loop()
    pod = {"metadata": {"uid": "p", "namespace": "ns", "name": "p", "labels": {"team": "vision"}}}
    listed, cache, reads = Listed(loop, [pod]), ClusterCache(), PolicyReads()
    pods = Projected(Source("pods", "/api/v1/pods"), facts, PODS_READ, cache.pod_sink(),
                     listed.start, lambda: T0)  # fmt: skip
    old = pods.start(reads.keep)
    listed.list(old)
    assert cache.pods["p"].snapshot.labels == {}, "no policy reads team yet"
    reads.listeners.add(pods.update)
    reads.policy("TrainingBudget", "vision", TEAM_BUDGET)
    interrupted = cache.interruptions.oldest()
    assert interrupted is not None, "every evaluation is held until the pods are listed again"
    assert interrupted.source == "pods"
    new = listed.started[-1]
    assert new is not old
    assert new.synced is old.synced
    old._on_loop(cache.pod_sink().apply, "pods", "DELETED", "p", cache.pods["p"])
    loop.run_until_complete(asyncio.sleep(0))
    assert "p" in cache.pods, "the stopped informer delivers nothing more"
    listed.list(new)
    assert cache.interruptions.oldest() is None
    assert cache.pods["p"].snapshot.labels == {"team": "vision"}
    reads.policy("TrainingBudget", "other", {**TEAM_BUDGET, "metadata": {"name": "other"}})
    assert listed.started[-1] is new, "a policy reading nothing new lists nothing"
    loop.close()


def test_what_a_policy_stops_reading_is_not_listed_again() -> None:
    reads, grown = PolicyReads(), list[Keep]()
    reads.listeners.add(grown.append)
    reads.policy("TrainingBudget", "vision", TEAM_BUDGET)
    assert "team" in reads.keep.pod_labels
    reads.policy("TrainingBudget", "vision", None)
    assert "team" not in reads.keep.pod_labels
    assert not grew(grown[0], reads.keep, PODS_READ), "fewer keys: the records keep them"
    broken = {**TEAM_BUDGET, "spec": {"scope": {"namespaces": []}}}
    reads.policy("TrainingBudget", "vision", broken)
    assert reads.keep == CODE, "an invalid policy reads nothing"
