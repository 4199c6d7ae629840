"""The series each policy put in the registry, so that a deleted policy leaves none."""

import contextlib

from prometheus_client import Counter, Gauge

Series = set[tuple[Gauge | Counter, tuple[str, ...]]]
_SERIES: dict[tuple[str, str], Series] = {}


def of(kind: str, name: str) -> Series:
    """The series a policy has put in the registry so far (add to it as you set one)."""
    return _SERIES.setdefault((kind, name), set())


def forget(kind: str, name: str, also: Series) -> None:
    """Remove every series of a policy, and `also` those every policy has."""
    for collector, labels in also | _SERIES.pop((kind, name), set()):
        with contextlib.suppress(KeyError):
            collector.remove(*labels)
