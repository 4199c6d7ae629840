"""What a run declares it is, read from the annotations its team writes: key parameters,
data version, code version and a configuration hash (the experiment ledger, docs/receipts.md).

Tenant input, so bounded and validated here, never trusted: at most MAX_PARAMS keys, a key
of at most MAX_KEY characters, a value of at most MAX_VALUE, the whole annotation at most
MAX_TOTAL. What fails a rule is left out and said in `dropped` (itself bounded); nothing a
tenant writes raises. The invariant (tests/test_ledger_property.py): what is recorded is
always within the bounds and is exactly the valid part of what was declared.

Pure: the receipts slice reads a run's annotations through the cache, the admission
webhook reads them from the object being created; both call `declared`, so a repeat is
recognised by the same hash the receipt records.
"""

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from trainwarden.api.v1alpha1.names import CODE_VERSION, CONFIG_HASH, DATA_VERSION, PARAMS
from trainwarden.api.v1alpha1.receipt import (
    MAX_DROPPED,
    MAX_KEY,
    MAX_NOTE,
    MAX_PARAMS,
    MAX_TOTAL,
    MAX_VALUE,
    MAX_VERSION,
)

ANNOTATIONS: Mapping[str, int] = {
    PARAMS: MAX_TOTAL + 1,
    DATA_VERSION: MAX_VERSION + 1,
    CODE_VERSION: MAX_VERSION + 1,
    CONFIG_HASH: MAX_VERSION + 1,
}
"""What the cache keeps of each (core/reads.py): one character past the bound, so that a
value over it is known to be over it, not taken cut short."""
_KEY = re.compile(r"[A-Za-z0-9]([A-Za-z0-9_.\-/]{0,62})")
_PRINTABLE = re.compile(r"[^\x00-\x1f\x7f]*")
_HASH = re.compile(r"[A-Za-z0-9._:+=/\-]{1,256}")

HashSource = Literal["Declared", "Computed"]


@dataclass(frozen=True)
class Declared:
    """The valid part of what a run declares, and what was dropped."""

    params: dict[str, str] = field(default_factory=dict)
    data_version: str | None = None
    code_version: str | None = None
    config_hash: str | None = None
    hash_source: HashSource | None = None
    dropped: tuple[str, ...] = ()

    @property
    def empty(self) -> bool:
        return not (self.params or self.data_version or self.code_version or self.config_hash)


def _value(raw: object) -> str | None:
    """A JSON value as the ledger records it: a string itself, a number or boolean as JSON
    spells it; None for null, lists and objects (a parameter is one value)."""
    if isinstance(raw, str):
        return raw
    if isinstance(raw, bool | int | float):
        try:
            return json.dumps(raw, allow_nan=False)
        except ValueError:
            return None
    return None


def _pairs(raw: str) -> tuple[list[tuple[str, object]], str | None]:
    """The declared (key, value) pairs in order, or why none could be read."""
    text = raw.strip()
    if text.startswith("{"):
        try:
            parsed = json.loads(text, object_pairs_hook=lambda pairs: pairs)
        except (ValueError, RecursionError):
            return [], "params is not valid JSON"
        if not isinstance(parsed, list):
            return [], "params is not a JSON object"
        return parsed, None
    pairs: list[tuple[str, object]] = []
    for item in text.split(","):
        if not item.strip():
            continue
        key, sep, value = item.partition("=")
        pairs.append((key.strip(), value.strip() if sep else None))
    return pairs, None


def _why_not(key: str, value: str | None) -> str | None:
    if len(key) > MAX_KEY:
        return f"key {key[:40]!r}... longer than {MAX_KEY} characters"
    if not _KEY.fullmatch(key):
        return f"key {key[:40]!r} is not a name (letters, digits, _ . - /)"
    if value is None:
        return f"{key}: no value (a string, number or boolean)"
    if len(value) > MAX_VALUE:
        return f"{key}: value longer than {MAX_VALUE} characters"
    if not _PRINTABLE.fullmatch(value):
        return f"{key}: value has control characters"
    return None


def params(raw: str) -> tuple[dict[str, str], list[str]]:
    """The valid parameters of a params annotation (sorted by key), and what was dropped:
    a key or value past its bound or malformed, a repeated key (the first one counts),
    the keys past MAX_PARAMS. An annotation past MAX_TOTAL is dropped whole."""
    if len(raw) > MAX_TOTAL:
        return {}, [f"params is longer than {MAX_TOTAL} characters: not read"]
    pairs, why = _pairs(raw)
    if why is not None:
        return {}, [why]
    found: dict[str, str] = {}
    dropped: list[str] = []
    for key, raw_value in pairs:
        value = _value(raw_value)
        problem = _why_not(key, value)
        if problem is None and key in found:
            problem = f"{key}: declared again (the first one counts)"
        if problem is None and len(found) >= MAX_PARAMS:
            problem = f"{key}: more than {MAX_PARAMS} keys"
        if problem is not None:
            dropped.append(problem)
            continue
        assert value is not None
        found[key] = value
    return dict(sorted(found.items())), dropped


def _version(name: str, raw: str | None, pattern: re.Pattern[str]) -> tuple[str | None, str | None]:
    if raw is None:
        return None, None
    value = raw.strip()
    if not value:
        return None, None
    if len(value) > MAX_VERSION:
        return None, f"{name} longer than {MAX_VERSION} characters"
    if not pattern.fullmatch(value):
        return None, f"{name} has characters it may not"
    return value, None


def config_hash(found: Mapping[str, str], data: str | None, code: str | None) -> str:
    """The operator's hash of a run's configuration: SHA-256 of the canonical JSON of its
    valid params (sorted), data version and code version, 16 hex digits (64 bits: a
    collision within one namespace's ledger is not a concern). Stable across releases:
    a change would make every earlier receipt look new."""
    canonical = json.dumps(
        {"codeVersion": code, "dataVersion": data, "params": dict(sorted(found.items()))},
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=True,
    )
    return "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()[:16]


def _bounded(notes: list[str]) -> tuple[str, ...]:
    cut = [n[:MAX_NOTE] for n in notes]
    if len(cut) <= MAX_DROPPED:
        return tuple(cut)
    return (*cut[: MAX_DROPPED - 1], f"and {len(cut) - MAX_DROPPED + 1} more")


def declared(annotations: Mapping[str, Any]) -> Declared:
    """What a run declares in its annotations (any values: a non-string is not read)."""

    def text(key: str) -> str | None:
        value = annotations.get(key)
        return value if isinstance(value, str) else None

    notes: list[str] = []
    raw_params = text(PARAMS)
    found, dropped = params(raw_params) if raw_params is not None else ({}, [])
    notes += dropped
    data, why_data = _version("data-version", text(DATA_VERSION), _PRINTABLE)
    code, why_code = _version("code-version", text(CODE_VERSION), _PRINTABLE)
    given, why_hash = _version("config-hash", text(CONFIG_HASH), _HASH)
    notes += [w for w in (why_data, why_code, why_hash) if w is not None]
    source: HashSource | None = "Declared" if given else None
    if given is None and (found or code):
        given, source = config_hash(found, data, code), "Computed"
    return Declared(found, data, code, given, source, _bounded(notes))


@dataclass(frozen=True, slots=True)
class Earlier:
    """A finished run's receipt as the repeat check keeps it (cache/cluster.py): only a
    receipt that recorded a config hash and a data version, each string bounded."""

    namespace: str
    receipt: str
    workload: str
    """Kind/name."""
    outcome: str
    cost: float
    config_hash: str
    data_version: str
    finished_at: str
    result: str = ""
    """The trainer's result as the receipt recorded it ("eval_loss 0.41, best 0.38")."""

    @property
    def key(self) -> tuple[str, str, str]:
        return self.namespace, self.config_hash, self.data_version

    def describe(self) -> str:
        """The earlier run, as a warning and an Event name it."""
        result = f", {self.result}" if self.result else ""
        return (
            f"RunReceipt {self.receipt} ({self.workload}, {self.outcome}, cost "
            f"{self.cost:.2f}{result}, finished {self.finished_at})"
        )


def _text(value: object, cap: int) -> str | None:
    return value if isinstance(value, str) and 0 < len(value) <= cap else None


def earlier(body: Mapping[str, Any]) -> Earlier | None:
    """A RunReceipt object as the repeat check keeps it; None for one that declared no
    config hash or data version, or is malformed (only what it reads is checked)."""
    meta, spec = body.get("metadata"), body.get("spec")
    if not isinstance(meta, Mapping) or not isinstance(spec, Mapping):
        return None
    declared, workload = spec.get("experiment"), spec.get("workload")
    if not isinstance(declared, Mapping) or not isinstance(workload, Mapping):
        return None
    cost = spec.get("cost")
    found = (
        _text(meta.get("namespace"), 63),
        _text(meta.get("name"), 253),
        _text(workload.get("kind"), 63),
        _text(workload.get("name"), 253),
        _text(spec.get("outcome"), 16),
        _text(declared.get("configHash"), MAX_VERSION),
        _text(declared.get("dataVersion"), MAX_VERSION),
        _text(spec.get("finishedAt"), 40),
    )
    if any(f is None for f in found) or not isinstance(cost, int | float):
        return None
    ns, name, kind, wl, outcome, config, data, at = (str(f) for f in found)
    said = _result(spec.get("result"))
    return Earlier(ns, name, f"{kind}/{wl}", outcome, float(cost), config, data, at, said)


def _number(value: object) -> str | None:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return f"{value:.4g}"
    return None


def _result(raw: object) -> str:
    """A receipt's result in a few words; "" when it has none it can say."""
    if not isinstance(raw, Mapping):
        return ""
    metric, final = _text(raw.get("metric"), 128), _number(raw.get("final"))
    if metric is None or final is None:
        return ""
    best = _number(raw.get("best"))
    return f"{metric} {final}" + (f", best {best}" if best is not None else "")


def repeat_key(namespace: str, annotations: Mapping[str, Any]) -> tuple[str, str, str] | None:
    """What new work declares, as the repeat check looks it up: (namespace, config hash,
    data version); None unless it declares both (a hash may be the computed one)."""
    found = declared(annotations)
    if found.config_hash is None or found.data_version is None:
        return None
    return namespace, found.config_hash, found.data_version
