"""Which receipts are the operator's, pure: the seal survives the API server's re-encoding
and nothing else verifies; names; which of its own receipts the ledger's bounds remove."""

import json
import re
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from test_receipts import T0, a_run, pods
from trainwarden.api.v1alpha1.receipt import RunReceiptSpec
from trainwarden.core.efficiency import Measure
from trainwarden.core.receipts import spec
from trainwarden.core.runs import PodRecord
from trainwarden.receipts.identity import (
    MIN_KEY,
    Keyring,
    Stored,
    canonical,
    fallback_name,
    key_id,
    keyring,
    receipt_name,
    removals,
    seal,
    verified,
)

DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
KEY, OTHER = b"k" * MIN_KEY, b"o" * MIN_KEY


def go_reencoded(value: Any) -> Any:
    """What the API server gives back: JSON through Go's decoder and encoder, so a float
    with no fraction comes back as an integer."""
    text = json.dumps(value)
    parsed = json.loads(
        text, parse_float=lambda s: int(float(s)) if float(s).is_integer() else float(s)
    )
    return json.loads(json.dumps(parsed))


@st.composite
def specs(draw: st.DrawFn) -> RunReceiptSpec:
    records: list[PodRecord] = draw(st.lists(pods(), max_size=6))
    measure = Measure(measured=draw(st.floats(0, 50)), used=draw(st.floats(0, 50)))
    run = a_run(records, labels={"team": draw(st.sampled_from(["a", "vision", "x" * 63]))})
    return spec(run, closed=T0 + 30_000, measure=measure, measurement="", located=None)


@settings(max_examples=300)
@given(specs())
def test_a_sealed_receipt_read_back_from_the_api_server_verifies(made: RunReceiptSpec) -> None:
    ring = Keyring(KEY, (OTHER,))
    sealed = seal(KEY, instance="i", namespace="team-a", name="job-train-x", spec=made)
    stored = go_reencoded(made.model_dump(by_alias=True, mode="json", exclude_none=True))
    back = verified(
        ring, instance="i", namespace="team-a", name="job-train-x", sealed=sealed, spec=stored
    )
    assert back == made
    assert canonical(RunReceiptSpec.model_validate(stored)) == canonical(made)


@settings(max_examples=300)
@given(specs(), st.data())
def test_nothing_but_the_receipt_the_seal_was_made_for_verifies(
    made: RunReceiptSpec, data: st.DataObject
) -> None:
    """Another name, namespace, instance or key, or any change of the spec: no receipt."""
    sealed = seal(KEY, instance="i", namespace="team-a", name="n", spec=made)
    dumped = made.model_dump(by_alias=True, mode="json", exclude_none=True)
    ring = Keyring(KEY)
    where = {"instance": "i", "namespace": "team-a", "name": "n"}
    assert verified(ring, **where, sealed=sealed, spec=dumped) == made
    change = data.draw(st.sampled_from(["instance", "namespace", "name", "key", "spec", "seal"]))
    if change in where:
        where[change] = where[change] + "x"
    elif change == "key":
        ring = Keyring(OTHER, (b"r" * MIN_KEY,))
    elif change == "spec":
        dumped["cost"] = dumped["cost"] + 0.5
    else:
        sealed = sealed[:-1] + ("0" if sealed[-1] != "0" else "1")
    assert verified(ring, **where, sealed=sealed, spec=dumped) is None


@given(
    st.one_of(st.none(), st.integers(), st.text(max_size=100), st.just(f"{key_id(KEY)}.ab")),
    st.one_of(st.none(), st.dictionaries(st.text(max_size=5), st.integers()), st.text()),
)
def test_whatever_a_receipt_holds_verification_never_raises(sealed: object, spec: object) -> None:
    assert (
        verified(Keyring(KEY), instance=None, namespace="ns", name="n", sealed=sealed, spec=spec)
        is None
    )


def test_a_retired_key_still_verifies_and_the_current_one_seals() -> None:
    made = spec(a_run([]), closed=T0 + 60, measure=None, measurement="", located=None)
    dumped = made.model_dump(by_alias=True, mode="json", exclude_none=True)
    old = seal(OTHER, instance=None, namespace="team-a", name="n", spec=made)
    where = {"instance": None, "namespace": "team-a", "name": "n"}
    assert verified(Keyring(KEY, (OTHER,)), **where, sealed=old, spec=dumped) == made
    assert verified(Keyring(KEY), **where, sealed=old, spec=dumped) is None  # the key lost
    assert old.startswith(key_id(OTHER) + ".")


def test_a_keyring_needs_a_current_key_of_32_bytes_and_keeps_retired_ones() -> None:
    assert keyring({}) == "no entry 'key'"
    assert "shorter than 32 bytes" in str(keyring({"key": b"short"}))
    ring = keyring({"key": KEY, "retired-2025": OTHER, "retired-bad": b"x", "notes": b"n" * 40})
    assert ring == Keyring(KEY, (OTHER,))


@given(
    st.text(min_size=1, max_size=300),
    st.sampled_from(["Job", "PyTorchJob", "Pod"]),
    st.uuids(),
    st.sampled_from(["", "0123456789"]),
)
def test_receipt_names_are_dns_subdomains_and_deterministic(
    name: str, kind: str, uid: object, mark: str
) -> None:
    made = receipt_name(kind, name, str(uid), mark)
    assert len(made) <= 253
    assert DNS_SUBDOMAIN.match(made)
    assert made == receipt_name(kind, name, str(uid), mark)
    assert made.endswith(str(uid).replace("-", "")[:8] + (f"-{mark}" if mark else ""))


def test_receipt_name_reads_as_its_workload_and_its_fallback_is_keyed() -> None:
    uid = "3f2b9c1e-0000-4000-8000-000000000000"
    assert receipt_name("PyTorchJob", "llama-7b.ft", uid) == "pytorchjob-llama-7b.ft-3f2b9c1e"
    mine = fallback_name(KEY, kind="PyTorchJob", name="llama-7b.ft", namespace="a", uid=uid)
    assert re.fullmatch(r"pytorchjob-llama-7b\.ft-3f2b9c1e-[0-9a-f]{10}", mine)
    assert mine != fallback_name(
        OTHER, kind="PyTorchJob", name="llama-7b.ft", namespace="a", uid=uid
    )
    assert mine != fallback_name(KEY, kind="PyTorchJob", name="llama-7b.ft", namespace="b", uid=uid)


NOW = datetime(2026, 6, 1, tzinfo=UTC)


@st.composite
def ledgers(draw: st.DrawFn) -> list[Stored]:
    """A namespace's receipts the operator wrote: a run's second one here and there."""
    rows = draw(
        st.lists(st.tuples(st.integers(0, 200), st.integers(0, 8), st.integers(0, 3)), max_size=40)
    )
    return [
        Stored(
            "ns",
            f"r-{i}",
            f"u{i}",
            "1",
            NOW - timedelta(days=age - late),
            f"w{run}",
            NOW - timedelta(days=age),
        )
        for i, (age, run, late) in enumerate(rows)
    ]


@settings(max_examples=1000)
@given(ledgers(), st.integers(0, 30), st.integers(1, 120))
def test_the_ledger_keeps_one_receipt_per_run_at_most_cap_the_newest_inside_the_ttl(
    stored: list[Stored], cap: int, ttl_days: int
) -> None:
    ttl = timedelta(days=ttl_days)
    removed = removals(stored, now=NOW, ttl=ttl, cap=cap)
    assert len(removed) == len(set(removed))
    kept = [s for s in stored if s not in removed]
    runs = {s.workload for s in kept}
    assert len(runs) == len(kept), "a run kept twice"
    assert len(kept) <= cap
    assert all(NOW - s.finished < ttl for s in kept)
    firsts = [_first(stored, w) for w in {s.workload for s in stored}]
    assert len(kept) == min(cap, sum(1 for f in firsts if NOW - f.finished < ttl))
    for s in removed:
        if s != _first(stored, s.workload) or NOW - s.finished >= ttl:
            continue
        assert all(s.finished <= k.finished for k in kept), "a newer receipt removed first"


def _first(stored: list[Stored], workload: str) -> Stored:
    return min((s for s in stored if s.workload == workload), key=lambda s: (s.created, s.name))


def test_the_first_written_of_a_run_s_two_receipts_is_the_one_kept() -> None:
    first = Stored("ns", "b", "u1", "1", NOW - timedelta(hours=2), "w", NOW - timedelta(days=1))
    second = Stored("ns", "a", "u2", "1", NOW - timedelta(hours=1), "w", NOW - timedelta(days=1))
    assert removals([second, first], now=NOW, ttl=timedelta(days=90), cap=10) == [second]


@pytest.mark.parametrize("value", [b"", b"x" * (MIN_KEY - 1)])
def test_short_keys_are_no_keyring(value: bytes) -> None:
    assert isinstance(keyring({"key": value}), str)
