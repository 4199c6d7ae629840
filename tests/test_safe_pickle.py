"""The pickle reader behind Lightning's callback state: tenant-written bytes that must build
plain data and never run code, import a module, or cost more than their size."""

import contextvars
import os
import pickle
import sys
import time
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trainwarden.storage.safe_pickle import Opaque, Refused, StorageRef, TensorRef, loads

_WATCHING: contextvars.ContextVar[list[str] | None] = contextvars.ContextVar("w", default=None)
_FORBIDDEN = ("os.system", "subprocess.Popen", "exec", "compile", "import", "os.exec", "open")


def _audit(event: str, _: tuple[Any, ...]) -> None:
    seen = _WATCHING.get()
    if seen is not None and event.startswith(_FORBIDDEN):
        seen.append(event)


sys.addaudithook(_audit)
for _protocol in range(pickle.HIGHEST_PROTOCOL + 1):  # the codecs decoding loads, once
    loads(pickle.dumps({"a": ["x", b"y", 1.5, 10**30], "é": OrderedDict()}, _protocol))


@contextmanager
def nothing_runs() -> Iterator[None]:
    """Fails if, inside, Python audits a process start, an exec, an import or an open."""
    seen: list[str] = []
    token = _WATCHING.set(seen)
    try:
        yield
    finally:
        _WATCHING.reset(token)
    assert not seen, f"the reader ran something: {seen}"


def read(data: bytes) -> object:
    with nothing_runs():
        return loads(data)


class Shell:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.system, (f"touch {self.marker}",))


class Evaluates:
    def __reduce__(self) -> tuple[Any, ...]:
        return (eval, ("__import__('os').system('true')",))


def test_plain_data_is_built_at_every_protocol() -> None:
    data = {"a": [1, 2.5, "x", None, True, (1, 2)], "b": OrderedDict(x=1), "c": b"\x00"}
    for protocol in range(pickle.HIGHEST_PROTOCOL + 1):
        got = read(pickle.dumps(data, protocol=protocol))
        assert isinstance(got, dict)
        assert got["a"] == data["a"]
        assert got["b"] == {"x": 1}


@pytest.mark.parametrize("protocol", range(pickle.HIGHEST_PROTOCOL + 1))
def test_a_reduce_calling_os_system_runs_nothing(tmp_path: Path, protocol: int) -> None:
    marker = tmp_path / "pwned"
    payload = pickle.dumps({"callbacks": Shell(marker), "e": Evaluates()}, protocol=protocol)
    got = read(payload)
    assert not marker.exists()
    assert isinstance(got, dict)
    assert isinstance(got["callbacks"], Opaque)
    assert got["callbacks"].of in ("posix.system", "os.system")


def test_globals_are_never_imported() -> None:
    # A module that does not exist, or whose import would run code: only a name.
    payload = b"\x80\x02cno_such_module\nrun\nq\x00)\x81q\x01."
    before = set(sys.modules)
    got = read(payload)
    assert isinstance(got, Opaque)
    assert "no_such_module" not in sys.modules
    assert set(sys.modules) == before


def test_a_huge_memo_index_costs_one_entry() -> None:
    # The C unpickler sizes its memo from the index: LONG_BINPUT 0x3fffffff made it
    # allocate and zero 16 GiB (the pruner has 256 MiB).
    assert read(b"\x80\x02]r\xff\xff\xff\x3f.") == []


@pytest.mark.parametrize(
    "payload",
    [
        b"\x80\x04\x8d" + (2**60).to_bytes(8, "little") + b"abc",  # BINUNICODE8 of 2^60 bytes
        b"\x80\x02]q\x00(K\x01K\x02",  # truncated: no STOP
        b"\x80\x02h\x05.",  # a memo entry never put
        b"\x80\x02e.",  # APPENDS without a mark
        b"\x80\x02}(]K\x01u.",  # a list as a dict key
        b"\x80\x05\x97.",  # NEXT_BUFFER (out-of-band)
        b"\x80\x02\x82\x01.",  # EXT1
        b"I" + b"9" * 5000 + b"\n.",  # an int past int's digit limit
        b"not a pickle at all",
        b"",
    ],
)
def test_malformed_or_hostile_pickles_are_refused(payload: bytes) -> None:
    with pytest.raises(Refused):
        read(payload)


def test_a_frame_claiming_exabytes_allocates_nothing() -> None:
    assert read(b"\x80\x04\x95" + (2**62).to_bytes(8, "little") + b"N.") is None


def test_nesting_400000_deep_is_no_recursion_and_fast() -> None:
    depth = 400_000
    payload = b"\x80\x02" + b"]" * depth + b"a" * (depth - 1) + b"."
    start = time.monotonic()
    got = read(payload)
    assert isinstance(got, list)
    assert time.monotonic() - start < 20


def test_the_opcode_cap_bounds_the_work() -> None:
    payload = b"\x80\x02]" + b"(" + b"N" * 2000 + b"e."
    with pytest.raises(Refused, match="opcodes"):
        loads(payload, max_ops=1000)
    assert len(loads(payload)) == 2000  # type: ignore[arg-type]


def test_torch_tensors_are_references_not_values() -> None:
    # What torch.save pickles for a 0-d float tensor (protocol 2), by hand.
    payload = (
        b"\x80\x02ctorch._utils\n_rebuild_tensor_v2\nq\x00("
        b"(X\x07\x00\x00\x00storageq\x01ctorch\nFloatStorage\nq\x02X\x01\x00\x00\x003"
        b"q\x03X\x03\x00\x00\x00cpuq\x04K\x01tq\x05QK\x00)))\x89ccollections\nOrderedDict\n"
        b"q\x06)Rq\x07tq\x08Rq\t."
    )
    got = read(payload)
    assert isinstance(got, TensorRef)
    assert got.shape == ()
    assert got.offset == 0
    assert got.storage == got.storage  # identity
    assert isinstance(got.storage, StorageRef)
    assert (got.storage.kind, got.storage.key, got.storage.numel) == ("FloatStorage", "3", 1)


def _mutations(seed: bytes) -> st.SearchStrategy[bytes]:
    def mutate(edits: list[tuple[int, int]]) -> bytes:
        data = bytearray(seed)
        for at, value in edits:
            data[at % len(data)] = value
        return bytes(data)

    return st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), max_size=8).map(mutate)


_SEED = pickle.dumps(
    {
        "epoch": 3,
        "global_step": 40,
        "callbacks": {
            "ModelCheckpoint{'monitor': 'val_loss'}": {
                "best_model_path": "/ckpt/epoch=1.ckpt",
                "best_k_models": {"/ckpt/epoch=1.ckpt": 0.25},
                "last_model_path": "/ckpt/last.ckpt",
            }
        },
        "hyper_parameters": OrderedDict(lr=0.1),
    },
    protocol=2,
)


@settings(max_examples=1000, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=512) | _mutations(_SEED) | _mutations(pickle.dumps(_SEED, protocol=5)))
def test_whatever_the_bytes_the_reader_returns_or_refuses_and_runs_nothing(data: bytes) -> None:
    with suppress(Refused):
        read(data)
