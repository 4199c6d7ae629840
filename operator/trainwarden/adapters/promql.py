"""The PromQL the operator sends: per-pod utilization, whichever way the exporter's
series name the pod that holds the accelerator.

dcgm-exporter labels each GPU's series with the consumer's `namespace`, `pod` and
`container`. Scraped with `honorLabels: true` those labels arrive as they are; scraped the
common way (a ServiceMonitor with the default `honorLabels: false`, as GPU Operator and the
dcgm-exporter chart ship it), Prometheus keeps its target's own `namespace`/`pod` (the
exporter's) and renames the exporter's to `exported_namespace`/`exported_pod`. Every
query here takes the consumer from `exported_*` where a series has it and from the plain
labels otherwise (OpenCost reads DCGM the same way), so both setups, and a Prometheus that
scrapes some exporters each way, work without configuration.
"""

import re
from collections.abc import Mapping, Sequence
from datetime import timedelta

CONSUMER = ("namespace", "pod", "container")
"""The labels that name the accelerator's consumer, each also read as `exported_<label>`."""

_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_SELECTOR = re.compile(r"^\s*[A-Za-z_:][A-Za-z0-9_:]*\s*(\{[^{}]*\})?\s*$")


def is_selector(query: str) -> bool:
    return bool(_SELECTOR.match(query))


def consumer_of(labels: Mapping[str, str]) -> tuple[str, str]:
    """The (namespace, pod) a series' labels name as the accelerator's consumer."""
    return (
        labels.get("exported_namespace") or labels.get("namespace", ""),
        labels.get("exported_pod") or labels.get("pod", ""),
    )


def _consumer(expr: str) -> str:
    """`expr` (an instant vector) with each `exported_<label>` copied over `<label>` where
    present: Prometheus's label_replace leaves a series alone when the source is empty."""
    for label in CONSUMER:
        expr = f'label_replace({expr}, "{label}", "$1", "exported_{label}", "(.+)")'
    return expr


def _with(query: str, *matchers: str) -> str:
    """A bare selector with more matchers."""
    match = _SELECTOR.match(query)
    assert match is not None
    inner = (match.group(1) or "{}")[1:-1].strip()
    name = query.strip()[: len(query.strip()) - len(match.group(1) or "")].strip()
    return f"{name}{{{', '.join([*([inner] if inner else []), *matchers])}}}"


def usable(namespaces: Sequence[str]) -> list[str]:
    """The namespaces that can be named in a matcher as they are (DNS labels: nothing to
    escape); a tenant's odd name is never spliced into PromQL."""
    return sorted(n for n in namespaces if _DNS_LABEL.fullmatch(n))


def selectors(query: str, namespaces: Sequence[str] = ()) -> list[str]:
    """The bare selector narrowed to `namespaces` under each convention (Prometheus then
    sends only their series): series without `exported_namespace` by `namespace`, the
    others by `exported_namespace`. Unnarrowed (one selector) without a usable name."""
    names = usable(namespaces)
    if not names:
        return [query.strip()]
    among = "|".join(names)
    return [
        _with(query, 'exported_namespace=""', f'namespace=~"{among}"'),
        _with(query, f'exported_namespace=~"{among}"'),
    ]


def over_time(
    fn: str,
    query: str,
    window: timedelta,
    *,
    step: timedelta | None = None,
    namespaces: Sequence[str] = (),
) -> str:
    """`fn(query[window])` per accelerator series, labelled with its consumer.

    A bare selector is read as a range vector (raw samples, exact gaps), narrowed to
    `namespaces`; any other expression goes through a subquery (at `step`, or the default
    resolution), where Prometheus's lookback can bridge gaps of a few minutes.
    """
    w = f"{int(window.total_seconds())}s"
    if not is_selector(query):
        resolution = f"{int(step.total_seconds())}s" if step else ""
        return _consumer(f"{fn}(({query})[{w}:{resolution}])")
    parts = [f"{fn}({s}[{w}])" for s in selectors(query, namespaces)]
    return _consumer(parts[0] if len(parts) == 1 else "(" + " or ".join(parts) + ")")


def count_query(query: str, resolution: timedelta, namespaces: Sequence[str] = ()) -> str:
    """Per pod and step, how many raw samples its least-sampled accelerator has: what
    says whether a step is covered at the scrape interval (bare selectors only)."""
    inner = over_time("count_over_time", query, resolution, namespaces=namespaces)
    return f"min by (namespace, pod) ({inner})"


def peak_query(query: str, resolution: timedelta, namespaces: Sequence[str] = ()) -> str:
    """Per pod and step, the highest raw sample of any of its accelerators."""
    inner = over_time("max_over_time", query, resolution, namespaces=namespaces)
    return f"max by (namespace, pod) ({inner})"


PART = "trainwarden_part"
"""The label that tells the parts of the idle window's one answer apart."""


def _part(expr: str, name: str) -> str:
    return f'label_replace({expr}, "{PART}", "{name}", "", "")'


def idle_window_query(
    query: str,
    *,
    window: timedelta,
    resolution: timedelta,
    threshold: float,
    min_samples: int,
    namespaces: Sequence[str],
) -> str:
    """One instant query that sums the idle window up, per pod and for the window itself.

    A step's point is the pod's peak (a finite one, from an accelerator not short of
    `min_samples` raw samples). Per pod: how many of the window's steps have a point
    (`covered`), and the time of the newest at or above `threshold` (`busy`). For the
    window: how many steps Prometheus evaluated (`steps`) and the newest (`last`), so no
    version's subquery boundary is assumed. Prometheus walks the steps; the operator reads
    two numbers per pod instead of two per pod and step.
    """
    point = f"(({peak_query(query, resolution, namespaces)}) > -Inf) < +Inf"
    if min_samples > 1 and is_selector(query):
        counts = count_query(query, resolution, namespaces)
        point = f"({point}) and on (namespace, pod) (({counts}) >= {min_samples})"
    span = f"[{int(window.total_seconds())}s:{int(resolution.total_seconds())}s]"
    return " or ".join(
        (
            _part(f"count_over_time(({point}){span})", "covered"),
            _part(f"max_over_time(timestamp(({point}) >= {float(threshold)!r}){span})", "busy"),
            _part(f"count_over_time(vector(1){span})", "steps"),
            _part(f"max_over_time(timestamp(vector(1)){span})", "last"),
        )
    )


def busy_queries(query: str, step: timedelta, namespaces: Sequence[str]) -> tuple[str, str]:
    """Per pod and step: the sum of its accelerators' mean utilization (0-1 each, values
    outside 0-100 clamped), and how many accelerators reported."""
    mean = f"clamp({over_time('avg_over_time', query, step, namespaces=namespaces)}, 0, 100)"
    return (
        f"sum by (namespace, pod) ({mean}) / 100",
        f"count by (namespace, pod) ({mean})",
    )


def per_gpu_queries(
    query: str, window: timedelta, resolution: timedelta, namespaces: Sequence[str]
) -> tuple[str, str]:
    """Per accelerator series: its peak over the window, and how many samples it has (raw
    samples for a bare selector; subquery steps otherwise)."""
    peak, count = (
        over_time(fn, query, window, step=resolution, namespaces=namespaces)
        for fn in ("max_over_time", "count_over_time")
    )
    return peak, count
