"""Live views of kopf's indices of pods, namespaces and nodes, shared by every controller."""

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from trainwarden.core.nodes import NodeFacts
from trainwarden.core.pods import PodFacts


@dataclass
class Inventory:
    """kopf changes these while controllers await the API: copy before iterating across
    an await (`pods_now`, `nodes_now`)."""

    pods: Mapping[Any, Iterable[PodFacts]]
    namespaces: Mapping[str, Iterable[Mapping[str, str]]]
    nodes: Mapping[str, Iterable[NodeFacts]]

    def namespace_labels(self, name: str) -> Mapping[str, str]:
        return next(iter(self.namespaces.get(name, ())), {})

    def node(self, name: str | None) -> NodeFacts | None:
        return next(iter(self.nodes.get(name or "", ())), None)

    def node_labels(self, name: str | None) -> Mapping[str, str]:
        found = self.node(name)
        return found.labels if found else {}

    def pods_now(self) -> list[PodFacts]:
        return [facts for store in list(self.pods.values()) for facts in list(store)]

    def nodes_now(self) -> dict[str, NodeFacts]:
        return {name: facts for name in list(self.nodes) if (facts := self.node(name))}
