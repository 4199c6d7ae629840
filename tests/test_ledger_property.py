"""The experiment ledger's annotations, generated (core/ledger.py): whatever a tenant
writes, a receipt's ledger fields are always within bounds and are exactly the valid part
of what the workload declared.

The model below says what "the valid part" is, independently of the parser: the declared
entries in order, each kept when its key is a name of at most 63 characters, its value a
string (or a JSON number or boolean) of at most 256 printable characters, its key not kept
already, and fewer than 32 kept before it; nothing at all when the annotation is longer
than 4096 characters or is not a JSON object (when it starts with "{").
"""

import json
import string
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from trainwarden.api.v1alpha1.names import CODE_VERSION, CONFIG_HASH, DATA_VERSION, PARAMS
from trainwarden.api.v1alpha1.receipt import (
    MAX_DROPPED,
    MAX_KEY,
    MAX_PARAMS,
    MAX_TOTAL,
    MAX_VALUE,
    MAX_VERSION,
    Experiment,
)
from trainwarden.core import ledger
from trainwarden.core.receipts import experiment

NAME_CHARS = string.ascii_letters + string.digits + "_.-/"
good_keys = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9_.\-/]{0,70}", fullmatch=True)
any_keys = st.one_of(good_keys, st.text(max_size=80))
good_values = st.text(
    alphabet=st.characters(blacklist_categories=("Cs", "Cc")), max_size=300
) | st.sampled_from(["0.001", "32", "true", "bf16"])
any_values = st.one_of(
    good_values,
    st.text(max_size=40),
    st.integers(),
    st.floats(),
    st.booleans(),
    st.none(),
    st.lists(st.integers(), max_size=2),
)


def _valid_value(value: Any) -> str | None:
    if isinstance(value, str):
        text = value
    elif isinstance(value, bool | int | float):
        if isinstance(value, float) and (value != value or value in (float("inf"), float("-inf"))):
            return None
        text = json.dumps(value)
    else:
        return None
    if len(text) > MAX_VALUE or any(ord(c) < 32 or ord(c) == 127 for c in text):
        return None
    return text


def _valid_key(key: str) -> bool:
    return (
        0 < len(key) <= MAX_KEY
        and key[0] in string.ascii_letters + string.digits
        and all(c in NAME_CHARS for c in key)
    )


def model(entries: list[tuple[str, Any]], raw: str) -> dict[str, str]:
    if len(raw) > MAX_TOTAL:
        return {}
    kept: dict[str, str] = {}
    for key, value in entries:
        text = _valid_value(value)
        if text is None or not _valid_key(key) or key in kept or len(kept) >= MAX_PARAMS:
            continue
        kept[key] = text
    return kept


def _json(entries: list[tuple[str, Any]]) -> str:
    """A JSON object keeping repeated keys, as a tenant may write it."""
    items = [f"{json.dumps(k)}:{json.dumps(v)}" for k, v in entries]
    return "{" + ",".join(items) + "}"


def _pairs(entries: list[tuple[str, Any]]) -> tuple[str, list[tuple[str, Any]]]:
    """k=v,k=v of the entries the format can say (no "," or "=" in a key, no "," in a
    value, strings without surrounding blanks), and the entries as the model reads them."""
    said: list[tuple[str, Any]] = []
    for key, value in entries:
        text = value if isinstance(value, str) else json.dumps(value)
        if "," in key or "=" in key or "," in text or not key.strip():
            continue
        said.append((key.strip(), text.strip()))
    return ",".join(f"{k}={v}" for k, v in said), said


@st.composite
def declarations(draw: st.DrawFn) -> tuple[dict[str, Any], dict[str, str]]:
    """Annotations a tenant writes, and the params the model says are valid."""
    entries = draw(st.lists(st.tuples(any_keys, any_values), max_size=45))
    form = draw(st.sampled_from(["json", "pairs", "garbage", "none"]))
    expected: dict[str, str] = {}
    annotations: dict[str, Any] = {}
    if form == "json":
        raw = _json([(k, v) for k, v in entries if _finite(v)])
        if draw(st.booleans()):  # around the bound on the whole annotation
            raw = "{" + " " * max(0, draw(st.integers(4000, 4200)) - len(raw)) + raw[1:]
        annotations[PARAMS] = raw
        expected = model([(k, v) for k, v in entries if _finite(v)], raw)
    elif form == "pairs":
        raw, said = _pairs([(k, v) for k, v in entries if isinstance(v, str | int | bool)])
        annotations[PARAMS] = raw
        expected = model(said, raw) if not raw.lstrip().startswith("{") else {}
    elif form == "garbage":
        annotations[PARAMS] = draw(st.one_of(st.text(max_size=5000), st.integers(), st.none()))
        expected = None  # type: ignore[assignment]  # only the bounds are checked
    for key in (DATA_VERSION, CODE_VERSION, CONFIG_HASH):
        if draw(st.booleans()):
            annotations[key] = draw(st.one_of(st.text(max_size=300), st.integers()))
    return annotations, expected


def _finite(value: Any) -> bool:
    return not (isinstance(value, float) and (value != value or abs(value) == float("inf")))


@settings(max_examples=1000, deadline=None)
@given(declarations())
def test_ledger_fields_are_bounded_and_exactly_the_valid_part(
    case: tuple[dict[str, Any], dict[str, str] | None],
) -> None:
    annotations, expected = case
    found = ledger.declared(annotations)
    if expected is not None:
        assert found.params == expected
    assert len(found.params) <= MAX_PARAMS
    assert all(len(k) <= MAX_KEY and len(v) <= MAX_VALUE for k, v in found.params.items())
    assert sum(len(k) + len(v) for k, v in found.params.items()) <= MAX_TOTAL
    assert len(found.dropped) <= MAX_DROPPED
    for field, key in (
        (found.data_version, DATA_VERSION),
        (found.code_version, CODE_VERSION),
    ):
        raw = annotations.get(key)
        ok = isinstance(raw, str) and raw.strip() and len(raw.strip()) <= MAX_VERSION
        ok = ok and not any(ord(c) < 32 or ord(c) == 127 for c in raw.strip())
        assert field == (raw.strip() if ok else None)
    if found.hash_source == "Declared":
        assert found.config_hash == str(annotations[CONFIG_HASH]).strip()
    elif found.params or found.code_version:
        expected_hash = ledger.config_hash(found.params, found.data_version, found.code_version)
        assert found.config_hash == expected_hash
        assert found.hash_source == "Computed"
    else:
        assert found.config_hash is None
    recorded = experiment(annotations)  # what the receipt records: the API's own bounds
    if recorded is not None:
        assert Experiment.model_validate(recorded.model_dump()) == recorded
        assert recorded.params == found.params


def test_a_hash_is_the_same_for_the_same_declaration_in_either_form() -> None:
    as_json = ledger.declared({PARAMS: '{"lr": 0.001, "bs": 32}', DATA_VERSION: "v3"})
    as_pairs = ledger.declared({PARAMS: "bs=32, lr=0.001", DATA_VERSION: "v3"})
    assert as_json.config_hash == as_pairs.config_hash
    assert as_json.config_hash == "sha256:" + ledger.config_hash(
        {"bs": "32", "lr": "0.001"}, "v3", None
    ).removeprefix("sha256:")
    other = ledger.declared({PARAMS: "bs=32, lr=0.001", DATA_VERSION: "v4"})
    assert other.config_hash != as_json.config_hash


def test_what_is_dropped_is_said() -> None:
    found = ledger.declared(
        {PARAMS: "lr=0.1,lr=0.2,=x,bs", DATA_VERSION: "v\x00", CONFIG_HASH: "a b"}
    )
    assert found.params == {"lr": "0.1"}
    assert found.dropped == (
        "lr: declared again (the first one counts)",
        "key '' is not a name (letters, digits, _ . - /)",
        "bs: no value (a string, number or boolean)",
        "data-version has characters it may not",
        "config-hash has characters it may not",
    )
    too_long = ledger.declared({PARAMS: "a=" + "x" * MAX_TOTAL})
    assert too_long.params == {}
    assert too_long.dropped == (f"params is longer than {MAX_TOTAL} characters: not read",)
    many = ledger.declared({PARAMS: ",".join(f"k{i}=v" for i in range(41))})
    assert len(many.params) == MAX_PARAMS
    assert len(many.dropped) == MAX_DROPPED
    assert many.dropped[-1] == "and 2 more"


def test_nothing_declared_records_nothing() -> None:
    assert experiment({}) is None
    assert experiment({DATA_VERSION: "v3"}) == Experiment(data_version="v3")
