"""Objects the API server admits, drawn from the CRDs' own OpenAPI schemas (crds/).

A hypothesis strategy per schema node: types, enums, patterns (anchored as RE2 anchors
them: `$` is the end of the text, never before a final newline), lengths, bounds (integers
are int64, numbers float64, as the API server stores them), required and optional
properties; fields the schema does not name are pruned by the API server, so none are
drawn. Free strings come from random text and from a dictionary of the words the
operator's parsers know (every name of the time-zone database, directories included;
cron, regular expression, glob, PromQL and path fragments; the shortest and longest
durations): random text alone would never spell "Europe", nor a regex "1ms".

Not checked: the CEL rules (`x-kubernetes-validations`), which Python cannot evaluate.
Some drawn objects would therefore be refused by the API server; every CEL rule of the
models has a pydantic mirror, so those are invalid specs here too (tests/test_validation.py).
"""

import copy
import importlib.resources
import math
import re
import string
from datetime import timedelta
from functools import cache
from pathlib import Path
from typing import Any

import yaml
from hypothesis import strategies as st
from pydantic import BaseModel, ValidationError

from trainwarden.api.v1alpha1.types import (
    DURATION_PATTERN,
    MAX_DURATION,
    ZERO_OK_DURATION_PATTERN,
    format_duration,
)

CRDS = Path(__file__).resolve().parent.parent / "crds"
FILES = {
    "TrainingBudget": "trainingbudgets.trainwarden.dev.yaml",
    "IdleReclaimPolicy": "idlereclaimpolicies.trainwarden.dev.yaml",
    "CheckpointPolicy": "checkpointpolicies.trainwarden.dev.yaml",
}
INT64 = 2**63 - 1
FLOAT64 = 1.7976931348623157e308
MAX_ITEMS = 2
"""Items per drawn list or map (the schemas' own maxItems are larger; the operator's
handling of many items is tested by the status-size suites)."""
MAX_TEXT = 16
ABSENT = object()
"""An optional property left out (hypothesis draws the first of one_of's strategies more
often: a property is there more often than not)."""

CRON = ["*", "0", "5", "7", "23", "29", "30", "31", "59", "60", "L", "LW", "5L", "5#5"]
CRON += ["*/7", "*/0", "1-5", "5-1", "31W", "?", "JAN", "sun", "1,L", "-1"]
WORDS = [
    # what a regular expression, a glob, PromQL, a path or a URL may hold
    *["(", ")", "(a)|", "(?P<s>", "(?P<s>[0-9]+)", "()", "(\\d+)", "(a+)+$", "[", "[z-a]"],
    *["\\", "(?i)", "(?x)#", "ckpt-(\\d+)", "*", "**", "[!]", "[]", "ckpt-*", "{a}"],
    *["up", "{", "}", "sum(", 'x{a="b"}', "rate(x[5m])", "DCGM_FI_DEV_GPU_UTIL", "1/0"],
    *["/", "/..", "/../..", "/.", "//", "/a\x00b", ".", "..", "\x00", "\n", " ", "a b"],
    *["http://[", "http://a b", "https://", "http://:99999", "http://localhost:9000"],
    *["=", ",", "!", "~", "a=b", "a,b", "", "0", "-1", "1e400", "NaN", "9" * 4400],
    *["kube-system", "default", "team-a", "us-east-1", "aws-global", "UTC", "utc"],
    # the ends of what durations and quantities may say
    *["36500d", "1ms", "3650d", "999ms", "1000d", "1s", "100d", "1500ms", "10s", "1m", "1h"],
    *["1d", "36499d23h59m59s999ms"],
    *["0s", "0", "1", "1Ei", "999999999999999999999E", "0.000000000000000000001"],
    # names, label keys and values as Kubernetes spells them, the longest included
    *["a", "team", "team-h", "nvidia.com/gpu", "amd.com/gpu", "kubernetes.io/metadata.name"],
    *["A-1_b.c", "x.y/Z_9", "a" * 63, "b" * 253, f"{'c' * 253}/{'d' * 63}", "0-0"],
]
TIMES = [
    "2026-12-01T12:00:00Z",  # the suite's now
    "9999-12-31T23:59:59-14:00",  # the year 10000 in UTC
    "0001-01-01T00:00:00+14:00",  # the year 0 in UTC
    "9990-01-01T00:00:00Z",
    "1970-01-01T00:00:00Z",
    "2026-12-01T12:00:00.999999+05:45",
]
"""Date-times at the ends of what RFC 3339 spells, and the suite's own now."""


def _rfc3339(t: Any) -> str:
    return str(t.isoformat())


@cache
def zone_words() -> tuple[str, ...]:
    """Every path of the time-zone database the operator ships (tzdata), files and
    directories: zones, directories such as "Europe", and data files such as zone.tab."""
    root = importlib.resources.files("tzdata") / "zoneinfo"
    found: list[str] = []

    def walk(node: Any, prefix: str) -> None:
        for child in node.iterdir():
            if child.name.startswith("_") or child.name.endswith(".py"):
                continue
            name = f"{prefix}{child.name}"
            found.append(name)
            if child.is_dir():
                found.append(f"{name}/")
                walk(child, f"{name}/")

    walk(root, "")
    return tuple(sorted(found))


def words() -> st.SearchStrategy[str]:
    cron = st.lists(st.sampled_from(CRON), min_size=5, max_size=5).map(" ".join)
    parts = st.sampled_from(WORDS + list(zone_words()))
    joined = st.lists(parts, min_size=2, max_size=3).map("".join)
    return st.one_of(st.sampled_from(zone_words()), st.sampled_from(WORDS), cron, joined)


def _text(low: int, high: int) -> st.SearchStrategy[str]:
    alphabet = st.one_of(st.sampled_from(string.printable), st.characters(codec="utf-8"))
    return st.text(alphabet, min_size=low, max_size=max(low, min(high, MAX_TEXT)))


def _anchored(pattern: str) -> str:
    """The pattern as RE2 reads it: `$` (unescaped, at the end) is the end of the text."""
    return (
        pattern[:-1] + r"\Z" if pattern.endswith("$") and not pattern.endswith("\\$") else pattern
    )


def durations() -> st.SearchStrategy[str]:
    """Durations spread evenly over their orders of magnitude, 1ms to MAX_DURATION: the
    regex alone mostly spells ones too long to be valid."""
    top = math.log10(MAX_DURATION.total_seconds())
    seconds = st.floats(-3, top).map(lambda e: timedelta(milliseconds=max(1, round(10**e * 1000))))
    return seconds.map(lambda d: format_duration(min(d, MAX_DURATION)))


def _string(schema: dict[str, Any]) -> st.SearchStrategy[str]:
    if schema.get("pattern") in (DURATION_PATTERN, ZERO_OK_DURATION_PATTERN):
        known = [v for v in WORDS if re.fullmatch(schema["pattern"], v) and len(v) <= 32]
        return st.one_of(durations(), st.sampled_from(known))
    if "enum" in schema:
        return st.sampled_from(schema["enum"])
    low, high = schema.get("minLength", 0), schema.get("maxLength", 10**6)
    if schema.get("format") == "date-time":
        return st.one_of(
            st.sampled_from(TIMES), st.datetimes(timezones=st.timezones()).map(_rfc3339)
        )
    if "pattern" not in schema:
        return st.one_of(words(), _text(low, high)).filter(lambda v: low <= len(v) <= high)
    return _patterned(schema)


def _patterned(schema: dict[str, Any]) -> st.SearchStrategy[str]:
    low, high = schema.get("minLength", 0), schema.get("maxLength", 10**6)
    pattern = re.compile(_anchored(schema["pattern"]))
    known = [v for v in (*WORDS, *zone_words()) if pattern.search(v) and low <= len(v) <= high]
    matching = st.from_regex(pattern, fullmatch=True).filter(lambda v: low <= len(v) <= high)
    if not known:
        return matching
    return st.one_of(st.sampled_from(known), matching)  # known first: regex draws are costly


def _number(schema: dict[str, Any], integer: bool) -> st.SearchStrategy[Any]:
    low, high = schema.get("minimum"), schema.get("maximum")
    ints = st.integers(
        -INT64 - 1 if low is None else int(low), INT64 if high is None else int(high)
    )
    if integer:
        return ints
    floats = st.floats(
        -FLOAT64 if low is None else low,
        FLOAT64 if high is None else high,
        allow_nan=False,
        allow_infinity=False,
    )
    return st.one_of(floats, ints.filter(lambda v: abs(v) <= 2**53))


def _object(schema: dict[str, Any]) -> st.SearchStrategy[Any]:
    properties = schema.get("properties")
    if properties is None:
        values = schema.get("additionalProperties")
        if not isinstance(values, dict):  # preserve-unknown-fields: any small JSON
            values = {"type": "string"}
        return st.dictionaries(st.one_of(words(), _text(0, 40)), draw(values), max_size=MAX_ITEMS)
    required = set(schema.get("required", []))
    drawn = st.fixed_dictionaries(
        {k: draw(v) if k in required else draw(v) | st.just(ABSENT) for k, v in properties.items()}
    )
    return drawn.map(lambda d: {k: v for k, v in d.items() if v is not ABSENT})


def draw(schema: dict[str, Any]) -> st.SearchStrategy[Any]:
    """Values the structural schema admits (CEL rules not applied)."""
    if schema.get("x-kubernetes-int-or-string"):
        return st.one_of(st.integers(-INT64 - 1, INT64), _string({}))
    kind = schema.get("type")
    if kind == "object":
        return _object(schema)
    if kind == "array":
        low = schema.get("minItems", 0)
        high = max(low, min(schema.get("maxItems", MAX_ITEMS), MAX_ITEMS))
        return st.lists(draw(schema.get("items", {})), min_size=low, max_size=high)
    if kind == "string":
        return _string(schema)
    if kind in ("integer", "number"):
        return _number(schema, kind == "integer")
    if kind == "boolean":
        return st.booleans()
    return st.none()


@cache
def schema_of(kind: str, part: str) -> dict[str, Any]:
    """The OpenAPI schema of a kind's spec or status, as crds/ has it."""
    crd = yaml.safe_load((CRDS / FILES[kind]).read_text())
    root = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return dict(root["properties"][part])


def admitted(kind: str, part: str = "spec") -> st.SearchStrategy[dict[str, Any]]:
    """Specs (or statuses) of `kind` the CRD's structural schema admits."""
    return draw(schema_of(kind, part))


def pruned(model: type[BaseModel], obj: dict[str, Any]) -> dict[str, Any]:
    """`obj` without the parts `model` refuses (each field the validation errors name is
    left out, or one field of an object whose own rule failed, a few rounds): a valid policy
    that keeps every hostile value that is valid, where random drawing alone makes few
    valid ones (any one bad field spoils it)."""
    for _ in range(12):
        try:
            model.model_validate(obj)
            return obj
        except ValidationError as error:
            found = {e["loc"][:-1] if e["type"] == "missing" else e["loc"] for e in error.errors()}
            locations = sorted((loc for loc in found if loc), reverse=True)
        except Exception:  # what the model does with it is for the suite to see
            return obj
        if not locations:
            return obj
        obj = copy.deepcopy(obj)
        for location in locations:
            _drop(obj, location)
    return obj


def _drop(node: Any, location: tuple[Any, ...]) -> None:
    *path, last = location
    for part in path:
        try:
            node = node[part]
        except (KeyError, IndexError, TypeError):
            return
    if isinstance(node, dict) and isinstance(node.get(last), dict) and node[last]:
        del node[last][next(iter(node[last]))]  # a rule of the object: one of its fields
    elif isinstance(node, dict):
        node.pop(last, None)
    elif isinstance(node, list) and isinstance(last, int) and last < len(node):
        del node[last]
