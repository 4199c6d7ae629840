"""Kubernetes label selector strings ("team=a,env in (dev,prod),!tmp"), as the API server
parses and matches them, for the fake API server in the unit tests.

A fake that matched selectors loosely would let a reconciler's malformed or too-wide
selector pass every test; so this one rejects what the API server rejects.
"""

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

Operator = Literal["=", "!=", "in", "notin", "exists", "!"]
_WORD = re.compile(r"\s*(==|!=|=|!|\(|\)|,|[^\s=!(),]+)")
_NAME = r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?"
_KEY = re.compile(rf"([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?{_NAME}")
_VALUE = re.compile(rf"({_NAME})?")
_PUNCTUATION = {"==", "!=", "=", "!", "(", ")", ","}


@dataclass(frozen=True)
class Requirement:
    """One term of a selector; equality is `in` with one value, inequality `notin`."""

    key: str
    operator: Operator
    values: frozenset[str] = frozenset()

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        match self.operator:
            case "exists":
                return present
            case "!":
                return not present
            case "=" | "in":
                return present and labels[self.key] in self.values
            case "!=" | "notin":
                return not present or labels[self.key] not in self.values


def parse_selector(text: str) -> tuple[Requirement, ...]:
    """The requirements of a selector, all of which must hold; "" selects everything.
    ValueError says what is wrong, as the API server's 400 would."""
    parser = _Parser(_words(text.strip()))
    found: list[Requirement] = []
    while parser.peek() is not None:
        found.append(parser.requirement())
        separator = parser.take()
        if separator not in (None, ","):
            raise ValueError(f"selector {text!r}: expected ',' but found {separator!r}")
        if separator == "," and parser.peek() is None:
            raise ValueError(f"selector {text!r}: a ',' must be followed by a requirement")
    return tuple(found)


def matches(selector: str, labels: Mapping[str, str]) -> bool:
    return all(r.matches(labels) for r in parse_selector(selector))


def _words(text: str) -> list[str]:
    words: list[str] = []
    pos = 0
    while pos < len(text):
        found = _WORD.match(text, pos)
        if found is None:
            raise ValueError(f"selector {text!r}: cannot read {text[pos:]!r}")
        words.append(found.group(1))
        pos = found.end()
    return words


class _Parser:
    def __init__(self, words: list[str]) -> None:
        self._words = words
        self._pos = 0

    def peek(self) -> str | None:
        return self._words[self._pos] if self._pos < len(self._words) else None

    def take(self) -> str | None:
        word = self.peek()
        if word is not None:
            self._pos += 1
        return word

    def requirement(self) -> Requirement:
        if self.peek() == "!":
            self.take()
            return Requirement(self._key(), "!")
        key = self._key()
        operator = self.peek()
        if operator in (None, ","):
            return Requirement(key, "exists")
        self.take()
        if operator in ("=", "=="):
            return Requirement(key, "=", frozenset({self._value()}))
        if operator == "!=":
            return Requirement(key, "!=", frozenset({self._value()}))
        if operator in ("in", "notin"):
            return Requirement(key, "in" if operator == "in" else "notin", self._set())
        raise ValueError(f"unexpected {operator!r} after the key {key!r}")

    def _key(self) -> str:
        word = self.take()
        if word is None or word in _PUNCTUATION or not _valid(_KEY, word):
            raise ValueError(f"invalid label key {word!r}")
        return word

    def _value(self) -> str:
        if self.peek() in (None, ",", ")"):
            return ""  # "k=" selects the empty value, as in Kubernetes
        word = self.take()
        if word is None or word in _PUNCTUATION or not _valid(_VALUE, word):
            raise ValueError(f"invalid label value {word!r}")
        return word

    def _set(self) -> frozenset[str]:
        if self.take() != "(":
            raise ValueError("'in' and 'notin' need a parenthesised set of values")
        if self.peek() == ")":
            raise ValueError("for 'in' and 'notin' the set of values cannot be empty")
        values = {self._value()}
        while (word := self.take()) == ",":
            values.add(self._value())
        if word != ")":
            raise ValueError(f"expected ')' or ',' in a set of values but found {word!r}")
        return frozenset(values)


def _valid(pattern: re.Pattern[str], word: str) -> bool:
    name = word.rpartition("/")[2]
    return pattern.fullmatch(word) is not None and len(name) <= 63
