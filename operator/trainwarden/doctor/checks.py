"""Each doctor check's verdict, from plain data the probe read: PASS, WARN or FAIL, what
was found, and where the fix is written down."""

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

from trainwarden.adapters.promql import consumer_of
from trainwarden.core import skew
from trainwarden.core.admission import PROBE_ANSWERED
from trainwarden.core.kueue import API_VERSION as KUEUE_API
from trainwarden.doctor.grants import Grant

Status = Literal["PASS", "WARN", "FAIL"]
GUIDE = "docs/install.md#doctor"
NOT_CURRENT = "view current=false"
"""In the webhook's probe answer when its view is not current (admission/review.py)."""


@dataclass(frozen=True, slots=True)
class Check:
    name: str
    status: Status
    found: str
    fix: str = ""

    def row(self) -> dict[str, str]:
        return asdict(self)


def fix(anchor: str) -> str:
    """Where the fix for a check is written: its subsection of install.md's doctor section."""
    return f"{GUIDE}-{anchor}"


def exit_code(checks: Sequence[Check]) -> int:
    """1 if any check failed; warnings alone are 0."""
    return 1 if any(c.status == "FAIL" for c in checks) else 0


def operator_args(deployment: Mapping[str, Any]) -> list[str]:
    """The args of the Deployment's operator container (the chart names it so)."""
    spec = ((deployment.get("spec") or {}).get("template") or {}).get("spec") or {}
    containers = spec.get("containers") or [{}]
    named = [c for c in containers if c.get("name") == "operator"] or containers
    return [str(a) for a in named[0].get("args") or []]


def operator(deployment: Mapping[str, Any]) -> Check:
    """At least one replica ready: the operator that the other checks are about runs."""
    meta = deployment.get("metadata") or {}
    want = (deployment.get("spec") or {}).get("replicas", 1)
    ready = (deployment.get("status") or {}).get("readyReplicas") or 0
    found = f"Deployment {meta.get('namespace')}/{meta.get('name')}: {ready}/{want} ready"
    if ready >= 1:
        return Check("operator", "PASS", found)
    return Check("operator", "FAIL", found, fix("operator"))


def flag(args: Sequence[str], name: str) -> str | None:
    """The value of `name` the operator's container runs with (`--flag=v` or `--flag v`;
    the last one counts, as argparse reads them)."""
    value = None
    for i, arg in enumerate(args):
        if arg.startswith(f"{name}="):
            value = arg.split("=", 1)[1]
        elif arg == name and i + 1 < len(args):
            value = args[i + 1]
    return value or None


def prometheus(url: str | None, answer: object, error: str | None) -> Check:
    """`vector(1)` must come back as one sample of value 1; any other answer, whatever
    its shape, is a FAIL saying so."""
    if url is None:
        found = "the operator runs without --prometheus-url: nothing is ever judged idle"
        return Check("prometheus", "WARN", found, fix("prometheus"))
    if error is not None:
        return Check("prometheus", "FAIL", f"{url}: {error}", fix("prometheus"))
    if _scalar_one(_result(answer)):
        return Check("prometheus", "PASS", f"{url} answers PromQL (vector(1) = 1)")
    return Check("prometheus", "FAIL", f"{url} did not answer vector(1) with 1", fix("prometheus"))


def _result(answer: object) -> list[object] | None:
    """A successful query answer's result list; None for anything else."""
    if not isinstance(answer, Mapping) or answer.get("status") != "success":
        return None
    data = answer.get("data")
    result = data.get("result") if isinstance(data, Mapping) else None
    return result if isinstance(result, list) else None


def _scalar_one(result: list[object] | None) -> bool:
    first = result[0] if result else None
    value = first.get("value") if isinstance(first, Mapping) else None
    if not isinstance(value, list) or len(value) != 2 or not isinstance(value[1], str):
        return False
    try:
        return float(value[1]) == 1.0
    except ValueError:
        return False


def series(answer: object) -> list[dict[str, str]] | None:
    """The label sets of a query answer's series (items without labels name no pod);
    None when the answer is not a successful query result."""
    result = _result(answer)
    if result is None:
        return None
    out = []
    for item in result:
        labels = item.get("metric") if isinstance(item, Mapping) else None
        if isinstance(labels, Mapping):
            out.append({str(k): str(v) for k, v in labels.items()})
        else:
            out.append({})
    return out


@dataclass(frozen=True, slots=True)
class Matching:
    """How a utilization query's series name the running accelerator pods."""

    pods: int
    plain: int
    """Pods named by a series in namespace/pod (no exported_* labels)."""
    exported: int
    """Pods named by a series in exported_namespace/exported_pod."""
    unmatched: tuple[tuple[str, str], ...]
    """Pods no series names as the operator reads it (adapters/promql.consumer_of)."""
    elsewhere: tuple[tuple[str, str], ...]
    """Of those, pods some series names under the labels the operator does not read."""
    strangers: tuple[tuple[str, str], ...]
    """Consumers the series name that are no running accelerator pod."""
    unattributed: int
    """Series naming no pod (an idle GPU, or an exporter without pod attribution)."""


def matching(
    pods: Iterable[tuple[str, str]],
    series: Iterable[Mapping[str, str]],
    namespace: str | None = None,
) -> Matching:
    """Which pods the series name, read exactly as the operator reads them; with
    `namespace`, only the series that name a consumer there count."""
    running = set(pods)
    if namespace is not None:
        series = [s for s in series if consumer_of(s)[0] == namespace]
    plain: set[tuple[str, str]] = set()
    exported: set[tuple[str, str]] = set()
    mentioned: set[tuple[str, str]] = set()
    strangers: set[tuple[str, str]] = set()
    unattributed = 0
    for labels in series:
        key = consumer_of(labels)
        for pair in (("namespace", "pod"), ("exported_namespace", "exported_pod")):
            mentioned.add((labels.get(pair[0], ""), labels.get(pair[1], "")))
        if not all(key):
            unattributed += 1
        elif key not in running:
            strangers.add(key)
        else:
            (exported if labels.get("exported_pod") else plain).add(key)
    unmatched = sorted(running - plain - exported)
    return Matching(
        pods=len(running),
        plain=len(plain & running),
        exported=len(exported & running),
        unmatched=tuple(unmatched),
        elsewhere=tuple(p for p in unmatched if p in mentioned),
        strangers=tuple(sorted(strangers)),
        unattributed=unattributed,
    )


def _some(keys: Sequence[tuple[str, str]]) -> str:
    shown = ", ".join(f"{ns}/{pod}" for ns, pod in keys[:3])
    return shown + (f" and {len(keys) - 3} more" if len(keys) > 3 else "")


def dcgm(query: str, m: Matching | None, skipped: str | None = None) -> Check:
    """All running accelerator pods named: PASS; some: WARN (a pod just scheduled, an
    exporter restarting); none, with pods running: FAIL (nothing can ever be idle)."""
    if m is None:
        return Check("dcgm", "WARN", f"not checked: {skipped}", fix("dcgm"))
    parts = [
        f"{m.pods} running accelerator pods; {query} names {m.plain} by namespace/pod, "
        f"{m.exported} by exported_namespace/exported_pod"
    ]
    if m.unmatched:
        bare = len(m.unmatched) - len(m.elsewhere)
        parts.append(f"{len(m.unmatched)} unmatched ({_some(m.unmatched)})")
        if bare:
            parts.append(f"{bare} with no series at all")
        if m.elsewhere:
            parts.append(
                f"{len(m.elsewhere)} named only in labels the operator does not read "
                f"(a series with exported_* names another pod): {_some(m.elsewhere)}"
            )
    if m.strangers:
        parts.append(f"series for {len(m.strangers)} pods not running: {_some(m.strangers)}")
    if m.unattributed:
        parts.append(f"{m.unattributed} series name no pod")
    found = "; ".join(parts)
    if m.pods == 0:
        return Check("dcgm", "WARN", found + "; nothing to match yet", fix("dcgm"))
    if not m.unmatched:
        return Check("dcgm", "PASS", found)
    status: Status = "FAIL" if len(m.unmatched) == m.pods else "WARN"
    return Check("dcgm", status, found, fix("dcgm"))


def kueue(versions: Sequence[str]) -> Check:
    """Kueue absent is a choice (WARN); served without the version trainwarden reads is a
    Kueue trainwarden cannot govern (FAIL)."""
    want = KUEUE_API.split("/", 1)[1]
    if not versions:
        found = "kueue.x-k8s.io is not served: Kueue workloads are not governed"
        return Check("kueue", "WARN", found, fix("kueue"))
    served = ", ".join(versions)
    if want in versions:
        return Check("kueue", "PASS", f"kueue.x-k8s.io serves {served}; trainwarden reads {want}")
    found = f"kueue.x-k8s.io serves {served}, not {want}: Kueue workloads are not governed"
    return Check("kueue", "FAIL", found, fix("kueue"))


def differences(want: object, got: object, path: str = "") -> list[str]:
    """The paths where two JSON documents differ, structurally (key order ignored)."""
    if isinstance(want, Mapping) and isinstance(got, Mapping):
        out = []
        for key in sorted(set(want) | set(got), key=str):
            where = f"{path}.{key}"
            if key not in got:
                out.append(f"{where} missing")
            elif key not in want:
                out.append(f"{where} unexpected")
            else:
                out.extend(differences(want[key], got[key], where))
        return out
    if isinstance(want, list) and isinstance(got, list):
        if len(want) != len(got):
            return [f"{path} has {len(got)} items, not {len(want)}"]
        return [
            d
            for i, (w, g) in enumerate(zip(want, got, strict=True))
            for d in differences(w, g, f"{path}[{i}]")
        ]
    if type(want) is not type(got) and not (_number(want) and _number(got)):
        return [f"{path or '.'} differs"]
    return [] if want == got else [f"{path or '.'} differs"]


def _number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def crds(found: Mapping[str, Sequence[str] | None]) -> Check:
    """Per CRD name: the differences from the generated schema (None: not installed)."""
    missing = sorted(name for name, diff in found.items() if diff is None)
    stale = {name: diff for name, diff in found.items() if diff}
    if not missing and not stale:
        return Check("crds", "PASS", f"{len(found)} CRDs serve the schemas this version generates")
    parts = [f"not installed: {', '.join(missing)}"] if missing else []
    parts += [f"{name}: {', '.join(diff[:3])}" for name, diff in sorted(stale.items())]
    return Check("crds", "FAIL", "upgrade CRDs; " + "; ".join(parts), fix("crds"))


@dataclass(frozen=True, slots=True)
class Webhook:
    """The hold webhook as installed and as the API server reached it."""

    enabled: bool
    configuration: str
    ca_bundle: bool | None
    """Whether the configuration carries a caBundle (None: no such configuration)."""
    warnings: tuple[str, ...] = ()
    """What the API server passed on from its dry-run creation of the probe pod."""
    error: str | None = None
    """Why the dry-run creation itself failed."""
    refused: str | None = None
    """Why the API server refused the probe pod (401, 403: a quota, a LimitRange, Pod
    Security, a policy engine) though this user may create pods there."""


def webhook(w: Webhook) -> Check:
    """Answered only if the probe's warning came back: the configuration fails open, so a
    webhook the API server cannot reach looks, to a creation, just like one that allows."""
    if not w.enabled:
        found = (
            "the operator runs without --webhook-port: new work of exhausted budgets is not held"
        )
        return Check("webhook", "WARN", found, fix("webhook"))
    if w.ca_bundle is None:
        return Check(
            "webhook", "FAIL", f"no MutatingWebhookConfiguration {w.configuration}", fix("webhook")
        )
    if w.error is not None:
        return Check(
            "webhook", "FAIL", f"the probe's dry-run creation failed: {w.error}", fix("webhook")
        )
    answers, others = _answers(w.warnings, w.configuration)
    if w.refused is not None:
        return _refused(w, bool(answers))
    if answers and any(NOT_CURRENT in text for text in answers):
        found = (
            f"the API server called {w.configuration}, but its view is not current: it holds "
            "nothing until it has listed budgets and namespaces"
        )
        return Check("webhook", "WARN", found, fix("webhook"))
    if answers:
        return Check(
            "webhook", "PASS", f"the API server called {w.configuration} and got its answer"
        )
    why = "" if w.ca_bundle else " (its caBundle is empty: the operator has not injected its CA)"
    if others:
        why += f" (answered only by {', '.join(sorted(others))}: another instance)"
    found = (
        f"the API server did not get an answer from {w.configuration}{why}; it fails open, "
        "so creations go ahead and nothing is held"
    )
    return Check("webhook", "FAIL", found, fix("webhook"))


def _answers(warnings: Iterable[str], configuration: str) -> tuple[list[str], set[str]]:
    """The probe answers of `configuration`'s operator, and the configurations of the
    others that answered. Every trainwarden webhook the probe pod matches answers it; each
    names the configuration it serves (an answer naming none is an older operator's)."""
    mine, others = [], set()
    for text in warnings:
        if PROBE_ANSWERED not in text:
            continue
        head = text.split(PROBE_ANSWERED, 1)[1].split(";", 1)[0]
        name = head.removeprefix(" by ").strip() if head.startswith(" by ") else ""
        if name in ("", configuration):
            mine.append(text)
        else:
            others.add(name[:253])
    return mine, others


def _refused(w: Webhook, answered: bool) -> Check:
    """A probe pod refused by another admission step: the webhook answered before it
    (mutating webhooks run before validation), or it is not verified."""
    if answered:
        found = (
            f"the API server called {w.configuration} and got its answer, then refused the "
            f"probe pod: {w.refused}"
        )
        return Check("webhook", "WARN", found, fix("webhook"))
    found = (
        f"not verified: the API server refused the probe pod before {w.configuration} "
        f"answered: {w.refused} (another --probe-namespace may admit it)"
    )
    return Check("webhook", "FAIL", found, fix("webhook"))


def rbac(
    account: tuple[str, str],
    source: str,
    wanted: Sequence[Grant],
    denied: Sequence[Grant],
    unverified: str | None = None,
) -> Check:
    """The grants `source` binds to the account, each allowed by a SubjectAccessReview.
    Without the release's own manifest (`unverified` says why) the live roles are checked
    against themselves, which cannot find a missing grant: at best a WARN saying so."""
    who = f"{account[0]}/{account[1]}"
    if not wanted:
        return Check("rbac", "FAIL", f"{source} binds nothing to {who}", fix("rbac"))
    if denied:
        found = (
            f"{who} lacks {len(denied)} of {len(wanted)} grants of {source}: "
            + ", ".join(str(g) for g in denied[:6])
            + (f" and {len(denied) - 6} more" if len(denied) > 6 else "")
        )
        return Check("rbac", "FAIL", found, fix("rbac"))
    found = f"{who} holds all {len(wanted)} grants of {source}"
    if unverified is not None:
        found += f"; not verified against the chart's role ({unverified})"
        return Check("rbac", "WARN", found, fix("rbac"))
    return Check("rbac", "PASS", found)


def clock(found: skew.Estimate) -> Check:
    """The API server's clock minus this machine's (core/skew.py's estimate from the Date
    of a few answers); WARN when certainly past the bound the operator itself warns at."""
    side = "ahead of" if found.offset > 0 else "behind"
    text = (
        f"the API server's clock is {abs(found.offset):.1f} s (± {found.uncertainty:.1f}) "
        f"{side} this machine's (bound {skew.BOUND:g} s)"
    )
    if skew.skewed(found):
        return Check("clock", "WARN", text, fix("clock"))
    return Check("clock", "PASS", text)
