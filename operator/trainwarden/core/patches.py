"""JSON merge patches (RFC 7386), computed rather than written by hand."""

from collections.abc import Mapping
from typing import Any


def merge_patch_diff(old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    """The merge patch that turns `old` into `new`: only what changed, and null for what
    was removed. Status writes send this, so a field that became empty is removed, not
    left showing a stale value, and an unchanged breakdown costs no bytes."""
    patch: dict[str, Any] = {key: None for key in old if key not in new}
    for key, value in new.items():
        before = old.get(key)
        if isinstance(value, Mapping) and isinstance(before, Mapping):
            nested = merge_patch_diff(before, value)
            if nested:
                patch[key] = nested
        elif key not in old or before != value:
            patch[key] = value
    return patch
