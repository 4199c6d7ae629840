"""A pickle reader that builds plain data and never runs code: for the `data.pkl` inside a
Lightning `.ckpt`, which a tenant writes.

`pickle.load`, even with a restrictive `find_class`, lets the C unpickler size its memo
from the input (a 10-byte `LONG_BINPUT 0x3fffffff` makes it allocate and zero 16 GiB)
and calls whatever `find_class` returns. This reader instead interprets the opcodes that
`pickletools.genops` decodes (pure Python, no import, no call) on a stack of its own:
strings, numbers, bytes, None, booleans, lists, tuples, dicts and sets are built as such;
a global is only ever a name (`Global`), never imported; calling it (REDUCE, NEWOBJ, INST,
OBJ) gives an inert `Opaque`, except for a tiny allow-list that is interpreted, not called:
`collections.OrderedDict` is a dict, and torch's `_rebuild_tensor_v2` and
`_rebuild_parameter` give a `TensorRef` (which storage, offset and shape; the bytes stay
in the archive). BUILD states are dropped, persistent ids become `StorageRef` or
`Opaque`; extension codes and out-of-band buffers are refused.

Bounded: the caller caps the input's size; here the number of opcodes is capped
(MAX_OPS), the memo is a dict (an index costs one entry, whatever its value), and nothing
recurses, so nesting depth costs nothing but the objects built.
"""

import pickletools
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

MAX_OPS = 1_000_000
"""Opcodes interpreted at most: a Lightning checkpoint of a 10,000-tensor model with its
optimizer states takes some 300,000; each builds at most one object."""


class Refused(ValueError):
    """The pickle is not one this reader builds (a refused opcode, too long, malformed)."""


@dataclass(frozen=True, eq=False)
class Global:
    """A global the pickle names (module and name): never imported."""

    module: str
    name: str

    @property
    def qualified(self) -> str:
        return f"{self.module}.{self.name}"


@dataclass(frozen=True, eq=False)
class Opaque:
    """What a call of a global (other than the allow-list) would have built: nothing."""

    of: str


@dataclass(frozen=True, eq=False)
class StorageRef:
    """A tensor storage in the archive: `data/<key>` of `numel` elements of `kind`."""

    kind: str
    """The storage class's name as pickled, e.g. FloatStorage."""
    key: str
    numel: int


@dataclass(frozen=True, eq=False)
class TensorRef:
    """A tensor: its storage, offset (in elements) and shape; the values are not read."""

    storage: StorageRef | None
    offset: int
    shape: tuple[int, ...]


_MARK = object()


def _ints(value: object) -> tuple[int, ...] | None:
    if isinstance(value, tuple) and all(type(v) is int for v in value):
        return value
    return None


def _tensor(args: tuple[Any, ...]) -> TensorRef | Opaque:
    """torch._utils._rebuild_tensor_v2(storage, offset, size, stride, ...), read only."""
    if len(args) >= 3 and type(args[1]) is int and (shape := _ints(args[2])) is not None:
        storage = args[0] if isinstance(args[0], StorageRef) else None
        return TensorRef(storage, args[1], shape)
    return Opaque("torch._utils._rebuild_tensor_v2")


def _call(func: object, args: object) -> object:
    """What REDUCE builds: the allow-list interpreted, anything else inert."""
    if not isinstance(func, Global):
        return Opaque("a call of a non-global")
    name = func.qualified
    if name == "collections.OrderedDict" and args == ():
        return {}
    if name == "torch._utils._rebuild_tensor_v2" and isinstance(args, tuple):
        return _tensor(args)
    if name == "torch._utils._rebuild_parameter" and isinstance(args, tuple) and args:
        return args[0] if isinstance(args[0], TensorRef) else Opaque(name)
    return Opaque(name)


def _persistent(pid: object) -> object:
    """torch's ('storage', <storage class>, key, location, numel)."""
    if (
        isinstance(pid, tuple)
        and len(pid) == 5
        and pid[0] == "storage"
        and isinstance(pid[1], Global)
        and isinstance(pid[2], str)
        and type(pid[4]) is int
    ):
        return StorageRef(pid[1].name, pid[2], pid[4])
    return Opaque("a persistent id")


class _Machine:
    """The unpickler's stack, mark stack and memo, driven one decoded opcode at a time."""

    def __init__(self) -> None:
        self.stack: list[Any] = []
        self.marks: list[int] = []
        self.memo: dict[int, Any] = {}

    def pop_mark(self) -> list[Any]:
        if not self.marks:
            raise Refused("no mark to pop to")
        at = self.marks.pop()
        items = self.stack[at:]
        del self.stack[at:]
        return items

    def pop(self) -> Any:
        if not self.stack:
            raise Refused("stack underflow")
        return self.stack.pop()

    def top(self) -> Any:
        if not self.stack:
            raise Refused("stack underflow")
        return self.stack[-1]


def _setitems(target: object, items: list[Any]) -> None:
    if len(items) % 2:
        raise Refused("odd number of items for a dict")
    if isinstance(target, dict):
        for i in range(0, len(items), 2):
            target[items[i]] = items[i + 1]  # an unhashable key raises TypeError
    elif not isinstance(target, Opaque):
        raise Refused("items set on something that is no dict")


def _extend(target: object, items: list[Any]) -> None:
    if isinstance(target, list):
        target.extend(items)
    elif isinstance(target, set):
        target.update(items)
    elif not isinstance(target, Opaque):
        raise Refused("items appended to something that is no list")


def _global(arg: object) -> Global:
    module, _, name = str(arg).partition(" ")
    return Global(module, name)


_CONSTANT = frozenset(
    [
        *("INT", "BININT", "BININT1", "BININT2", "LONG", "LONG1", "LONG4", "FLOAT", "BINFLOAT"),
        *("STRING", "BINSTRING", "SHORT_BINSTRING", "UNICODE", "BINUNICODE"),
        *("SHORT_BINUNICODE", "BINUNICODE8", "BINBYTES", "SHORT_BINBYTES", "BINBYTES8"),
    ]
)
_CONTROL = frozenset(["PROTO", "FRAME", "STOP"])


def _containers(m: _Machine, op: str) -> bool:
    """Opcodes that build containers; False if `op` is none of them."""
    empty: dict[str, Callable[[], object]] = {
        "EMPTY_LIST": list,
        "EMPTY_DICT": dict,
        "EMPTY_TUPLE": tuple,
        "EMPTY_SET": set,
    }
    if op in empty:
        m.stack.append(empty[op]())
    elif op in ("TUPLE1", "TUPLE2", "TUPLE3"):
        n = int(op[-1])
        if len(m.stack) < n:
            raise Refused("stack underflow")
        last = tuple(m.stack[-n:])
        del m.stack[-n:]
        m.stack.append(last)
    elif op in ("TUPLE", "LIST", "FROZENSET"):
        items = m.pop_mark()
        m.stack.append({"TUPLE": tuple, "LIST": list, "FROZENSET": frozenset}[op](items))
    elif op == "DICT":
        built: dict[Any, Any] = {}
        _setitems(built, m.pop_mark())
        m.stack.append(built)
    elif op == "APPEND":
        value = m.pop()
        _extend(m.top(), [value])
    elif op in ("APPENDS", "ADDITEMS"):
        items = m.pop_mark()
        _extend(m.top(), items)
    elif op == "SETITEM":
        value, key = m.pop(), m.pop()
        _setitems(m.top(), [key, value])
    elif op == "SETITEMS":
        items = m.pop_mark()
        _setitems(m.top(), items)
    else:
        return False
    return True


def _memo(m: _Machine, op: str, arg: object) -> bool:
    if op in ("PUT", "BINPUT", "LONG_BINPUT"):
        m.memo[int(str(arg))] = m.top()
    elif op == "MEMOIZE":
        m.memo[len(m.memo)] = m.top()
    elif op in ("GET", "BINGET", "LONG_BINGET"):
        key = int(str(arg))
        if key not in m.memo:
            raise Refused(f"memo {key} was never put")
        m.stack.append(m.memo[key])
    else:
        return False
    return True


def _calls(m: _Machine, op: str, arg: object) -> bool:
    if op == "GLOBAL":
        m.stack.append(_global(arg))
    elif op == "STACK_GLOBAL":
        name, module = m.pop(), m.pop()
        if not (isinstance(module, str) and isinstance(name, str)):
            raise Refused("STACK_GLOBAL of no strings")
        m.stack.append(Global(module, name))
    elif op == "REDUCE":
        args = m.pop()
        m.stack.append(_call(m.pop(), args))
    elif op == "NEWOBJ":
        m.pop()
        cls = m.pop()
        m.stack.append(Opaque(cls.qualified if isinstance(cls, Global) else "an object"))
    elif op == "NEWOBJ_EX":
        m.pop(), m.pop()
        cls = m.pop()
        m.stack.append(Opaque(cls.qualified if isinstance(cls, Global) else "an object"))
    elif op == "INST":
        m.pop_mark()
        m.stack.append(Opaque(_global(arg).qualified))
    elif op == "OBJ":
        items = m.pop_mark()
        cls = items[0] if items else None
        m.stack.append(Opaque(cls.qualified if isinstance(cls, Global) else "an object"))
    elif op == "BUILD":
        m.pop()  # the state is dropped: nothing it would set is read
    elif op == "BINPERSID":
        m.stack.append(_persistent(m.pop()))
    elif op == "PERSID":
        m.stack.append(Opaque("a persistent id"))
    else:
        return False
    return True


def _step(m: _Machine, op: str, arg: object) -> None:
    if op in _CONSTANT:
        m.stack.append(arg)
    elif op in ("NONE", "NEWTRUE", "NEWFALSE"):
        m.stack.append({"NONE": None, "NEWTRUE": True, "NEWFALSE": False}[op])
    elif op == "BYTEARRAY8":
        m.stack.append(bytes(arg) if isinstance(arg, bytes | bytearray) else b"")
    elif op == "MARK":
        m.marks.append(len(m.stack))
    elif op == "POP":
        m.pop()
    elif op == "POP_MARK":
        m.pop_mark()
    elif op == "DUP":
        m.stack.append(m.top())
    elif not (_containers(m, op) or _memo(m, op, arg) or _calls(m, op, arg)):
        raise Refused(f"opcode {op} is not read")


def loads(data: bytes, max_ops: int = MAX_OPS) -> object:
    """The object `data` pickles, built as plain data (see the module's docstring); raises
    Refused for anything else, however malformed."""
    m = _Machine()
    try:
        for count, (opcode, arg, _) in enumerate(pickletools.genops(data)):
            if count >= max_ops:
                raise Refused(f"over {max_ops} opcodes")
            if opcode.name == "STOP":
                if len(m.stack) != 1 or m.marks:
                    raise Refused("a malformed end")
                return m.stack[0]
            if opcode.name not in _CONTROL:
                _step(m, opcode.name, arg)
    except Refused:
        raise
    except (ValueError, TypeError, KeyError, IndexError, OverflowError, struct.error) as error:
        raise Refused(f"not a readable pickle: {type(error).__name__}: {error}") from None
    raise Refused("no STOP: truncated")
