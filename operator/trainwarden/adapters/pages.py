"""A list response read one item at a time, never whole.

A page of 500 pods is a few MiB, but a tenant can make each pod up to the 1.5 MiB etcd
stores: parsed whole, one page of such pods took the operator past its memory limit on
every list (at startup, after a failed watch, or when a policy came to read more of the
pods). Read here, a page costs one item at a time: the bytes of a chunk, and those of
the item being parsed (docs/security.md).
"""

import codecs
import json
from collections.abc import Iterator
from typing import Any, Protocol

CHUNK = 1 << 16
_DECODER = json.JSONDecoder()
_SPACE = " \t\r\n"
_ENDS = (*_SPACE, ",", "]", "}", ":")
"""What may follow a complete value: a number cut by a piece ("1" of "1.5") is not one."""


class Readable(Protocol):
    def read(self, amt: int) -> bytes: ...


class Page:
    """The items of a list response as they arrive (`items`), and everything else in it
    (`head`: kind, apiVersion, metadata) once they are read."""

    def __init__(self, body: Readable) -> None:
        self.head: dict[str, Any] = {}
        self._body = body
        self._text = ""
        self._at = 0
        self._utf8 = codecs.getincrementaldecoder("utf-8")()
        self._done = False

    def items(self) -> Iterator[Any]:
        self._expect("{")
        while not self._peek("}"):
            key = self._value()
            self._expect(":")
            if key == "items" and self._peek("["):
                yield from self._array()
            else:
                self.head[key] = self._value()
            if not self._peek("}"):
                self._expect(",")
        self._expect("}")

    def _array(self) -> Iterator[Any]:
        self._expect("[")
        while not self._peek("]"):
            yield self._value()
            if not self._peek("]"):
                self._expect(",")
        self._expect("]")

    def _value(self) -> Any:
        """The next JSON value, reading until it is complete and followed by what may
        follow a value."""
        while True:
            self._skip()
            try:
                value, end = _DECODER.raw_decode(self._text, self._at)
            except json.JSONDecodeError:
                if not self._more(len(self._text) - self._at):
                    raise
                continue
            if self._text[end : end + 1] in _ENDS or self._done:
                self._at = end
                if self._at > CHUNK:  # what is parsed is let go
                    self._text, self._at = self._text[self._at :], 0
                return value
            self._more(CHUNK)

    def _peek(self, char: str) -> bool:
        self._skip()
        return self._text[self._at : self._at + 1] == char

    def _expect(self, char: str) -> None:
        if not self._peek(char):
            found = self._text[self._at : self._at + 20]
            raise json.JSONDecodeError(f"expected {char!r}, found {found!r}", found, 0)
        self._at += 1

    def _skip(self) -> None:
        while True:
            while self._at < len(self._text) and self._text[self._at] in _SPACE:
                self._at += 1
            if self._at < len(self._text) or not self._more(CHUNK):
                return

    def _more(self, wanted: int) -> bool:
        """Read at least `wanted` more bytes (doubling what an unfinished value has, so a
        large item is parsed a few times, not once per chunk); False at the end."""
        if self._done:
            return False
        data = self._body.read(max(CHUNK, wanted))
        if not data:
            self._done = True
            self._text += self._utf8.decode(b"", final=True)
            return False
        self._text += self._utf8.decode(data)
        return True
