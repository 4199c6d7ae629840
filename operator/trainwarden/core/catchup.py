"""Pods that came and went while the operator was down, as the metrics saw them.

After a restart a budget's ledger charges the pods that vanished meanwhile only up to the
last status write (`ledger.restore`), and pods created and deleted during the outage not at
all: nobody watched. Where an exporter reported their accelerators (DCGM's per-GPU
series carry `namespace` and `pod`), the series say when each pod held them: from its
first sample to its last, within one scrape interval of the truth. Those charges are
estimates, and status says so (`ledger.estimated`).

Pure: the caller queries the series and passes what it knows of the pods.
"""

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass

from trainwarden.core.accounting import Charge, PriceTable, rate

PodKey = tuple[str, str]


@dataclass(frozen=True)
class Seen:
    """One pod's accelerator series over the outage: the first and last sample times
    (POSIX seconds), the number of accelerators it reported, and the node it ran on."""

    namespace: str
    pod: str
    first: float
    last: float
    accelerators: int
    node: str = ""


def charges(
    seen: Iterable[Seen],
    *,
    known: Collection[PodKey],
    since: float,
    covers: Callable[[str], bool],
    resource: str,
    node_labels: Callable[[str], Mapping[str, str]],
    prices: PriceTable,
    label_keys: Sequence[str],
) -> list[Charge]:
    """Gone-pod charges for the pods the series show and nobody else accounts for.

    `known`: pods the operator sees (live, or seen to go) — charged exactly already.
    `since`: the ledger's observedAt; a pod is charged from then at the earliest (up to
    then the ledger's own estimate covers the pods it had seen). `covers`: whether the
    budget's scope includes a namespace (scopes with a pod selector cannot be judged
    from series, which carry no pod labels: the caller passes none for those).
    """
    out = []
    for s in seen:
        if (s.namespace, s.pod) in known or not covers(s.namespace) or s.accelerators <= 0:
            continue
        start = max(s.first, since)
        if s.last <= start:
            continue
        hourly = rate({resource: float(s.accelerators)}, node_labels(s.node), [resource], prices)
        labels = tuple("" for _ in label_keys)
        out.append(
            Charge(
                f"seen:{s.namespace}/{s.pod}", s.namespace, start, s.last, "Running", labels, hourly
            )
        )
    return out
