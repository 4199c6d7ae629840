"""Reading tenant-written objects without trusting their shape: a field that should be a
mapping or a list but is not reads as empty, never as an exception."""

from collections.abc import Mapping
from typing import Any


def mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def mappings(value: object) -> list[Mapping[str, Any]]:
    """The mappings in a list (anything else in it, or a non-list, is left out)."""
    return [v for v in value if isinstance(v, Mapping)] if isinstance(value, list) else []


def strings(value: object) -> dict[str, str]:
    """A string map (labels, a node selector), every key and value as a string."""
    return {str(k): str(v) for k, v in mapping(value).items()}
