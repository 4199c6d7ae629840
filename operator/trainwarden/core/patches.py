"""JSON merge patches (RFC 7386): computing the smallest one, and applying one.

Status writes send only what changed (`merge_patch_diff`), and a field that disappeared
from the computed status is removed with an explicit null; sending the whole status
instead would leave stale keys behind, since a merge patch never removes what it does not
name. `apply_merge_patch` is the RFC's algorithm, used by the fake API server in the
tests, so a patch is judged by the same rules the API server applies.

RFC 7386 cannot set a value to null (null means "remove"). Kubernetes treats a null field
as an absent one, and so does `merge_patch_diff`: a None in the new document is a field
to remove, never a value to write.
"""

import copy
from collections.abc import Mapping, Sequence
from typing import Any

JSONObject = dict[str, Any]


def apply_merge_patch(doc: Any, patch: Any) -> Any:
    """The document `patch` turns `doc` into: objects merge key by key, null removes a key,
    anything else (arrays included) replaces the target wholesale. Neither input is
    modified, and the result shares no mutable part with them."""
    if not isinstance(patch, Mapping):
        return copy.deepcopy(patch)
    base: Mapping[str, Any] = doc if isinstance(doc, Mapping) else {}
    result: JSONObject = {}
    for key, value in base.items():
        if key not in patch:
            result[key] = copy.deepcopy(value)
        elif patch[key] is not None:
            result[key] = apply_merge_patch(value, patch[key])
    for key, value in patch.items():
        if key not in base and value is not None:
            result[key] = apply_merge_patch(None, value)
    return result


def merge_patch_diff(old: Mapping[str, Any], new: Mapping[str, Any]) -> JSONObject:
    """The smallest merge patch turning `old` into `new`: only changed fields, a null for
    each removed key, nested objects diffed, arrays and scalars sent whole when they differ.

    `apply_merge_patch(old, merge_patch_diff(old, new))` equals `new` without its nulls;
    an empty result means there is nothing to write.
    """
    patch: JSONObject = {key: None for key in old if new.get(key) is None}
    for key, value in new.items():
        if value is None:
            continue
        before = old.get(key)
        if isinstance(before, Mapping) and isinstance(value, Mapping):
            nested = merge_patch_diff(before, value)
            if nested:
                patch[key] = nested
        elif key not in old or not _same(before, value):
            patch[key] = copy.deepcopy(value)
    return patch


def _same(a: Any, b: Any) -> bool:
    """JSON equality: unlike Python's, true is not 1 (a flag becoming a count is a change)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if _is_array(a) and _is_array(b):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if _is_array(a) or _is_array(b) or isinstance(a, Mapping) or isinstance(b, Mapping):
        return False
    return bool(a == b)


def _is_array(value: Any) -> bool:
    return isinstance(value, Sequence) and not isinstance(value, str | bytes)
