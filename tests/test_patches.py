"""RFC 7386 merge patches: the RFC's own examples, and diff/apply round trips."""

import copy
import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trainwarden.core.patches import apply_merge_patch, merge_patch_diff

# RFC 7386, section 3 and Appendix A: (original, patch, result).
RFC7386_EXAMPLES: list[tuple[Any, Any, Any]] = [
    (
        {
            "title": "Goodbye!",
            "author": {"givenName": "John", "familyName": "Doe"},
            "tags": ["example", "sample"],
            "content": "This will be unchanged",
        },
        {
            "title": "Hello!",
            "phoneNumber": "+01-123-456-7890",
            "author": {"familyName": None},
            "tags": ["example"],
        },
        {
            "title": "Hello!",
            "author": {"givenName": "John"},
            "tags": ["example"],
            "content": "This will be unchanged",
            "phoneNumber": "+01-123-456-7890",
        },
    ),
    ({"a": "b"}, {"a": "c"}, {"a": "c"}),
    ({"a": "b"}, {"b": "c"}, {"a": "b", "b": "c"}),
    ({"a": "b"}, {"a": None}, {}),
    ({"a": "b", "b": "c"}, {"a": None}, {"b": "c"}),
    ({"a": ["b"]}, {"a": "c"}, {"a": "c"}),
    ({"a": "c"}, {"a": ["b"]}, {"a": ["b"]}),
    ({"a": {"b": "c"}}, {"a": {"b": "d", "c": None}}, {"a": {"b": "d"}}),
    ({"a": [{"b": "c"}]}, {"a": [1]}, {"a": [1]}),
    (["a", "b"], ["c", "d"], ["c", "d"]),
    ({"a": "b"}, ["c"], ["c"]),
    ({"a": "foo"}, None, None),
    ({"a": "foo"}, "bar", "bar"),
    ({"e": None}, {"a": 1}, {"e": None, "a": 1}),
    ([1, 2], {"a": "b", "c": None}, {"a": "b"}),
    ({}, {"a": {"bb": {"ccc": None}}}, {"a": {"bb": {}}}),
]
"""Objects-only examples are reused by the fake API server's tests (test_fakekube.py)."""

scalars = st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=4)
keys = st.sampled_from(["a", "b", "c", "spec", "status"])
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(keys, inner, max_size=4),
    max_leaves=12,
)
json_objects = st.dictionaries(keys, json_values, max_size=5)
# Generation, not the code under test, is what a loaded machine slows down.
relaxed = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
nullable_values = st.recursive(
    scalars | st.none(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(keys, inner, max_size=4),
    max_leaves=12,
)


def without_nulls(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: without_nulls(v) for k, v in value.items() if v is not None}
    return value


@pytest.mark.parametrize(("original", "patch", "result"), RFC7386_EXAMPLES)
def test_the_rfc_examples(original: Any, patch: Any, result: Any) -> None:
    before = copy.deepcopy((original, patch))
    assert apply_merge_patch(original, patch) == result
    assert (original, patch) == before, "inputs are never modified"


def test_the_result_shares_nothing_with_the_inputs() -> None:
    doc = {"keep": {"deep": [1]}, "patched": {"x": 1}}
    patch = {"patched": {"list": [2]}, "new": {"n": [3]}}
    result = apply_merge_patch(doc, patch)
    result["keep"]["deep"].append(9)
    result["patched"]["list"].append(9)
    result["new"]["n"].append(9)
    assert doc == {"keep": {"deep": [1]}, "patched": {"x": 1}}
    assert patch == {"patched": {"list": [2]}, "new": {"n": [3]}}


@relaxed
@given(json_objects, json_objects)
def test_applying_the_diff_gives_the_new_document(old: dict[str, Any], new: dict[str, Any]) -> None:
    assert apply_merge_patch(old, merge_patch_diff(old, new)) == new


@relaxed
@given(json_objects, st.dictionaries(keys, nullable_values, max_size=5))
def test_a_null_in_the_new_document_means_absent(old: dict[str, Any], new: dict[str, Any]) -> None:
    assert apply_merge_patch(old, merge_patch_diff(old, new)) == without_nulls(new)


@relaxed
@given(json_objects)
def test_no_change_no_patch(doc: dict[str, Any]) -> None:
    assert merge_patch_diff(doc, copy.deepcopy(doc)) == {}


@relaxed
@given(json_objects, json_objects)
def test_the_diff_names_only_changed_top_level_keys(
    old: dict[str, Any], new: dict[str, Any]
) -> None:
    # JSON equality: false is not 0 in JSON, as Python's == would have it.
    changed = {
        k
        for k in old.keys() | new.keys()
        if k not in old
        or k not in new
        or json.dumps(old[k], sort_keys=True) != json.dumps(new[k], sort_keys=True)
    }
    assert set(merge_patch_diff(old, new)) <= changed


@relaxed
@given(json_objects, json_objects)
def test_a_merge_patch_is_idempotent(doc: dict[str, Any], patch: dict[str, Any]) -> None:
    once = apply_merge_patch(doc, patch)
    assert apply_merge_patch(once, patch) == once


def test_diff_examples() -> None:
    old = {"phase": "Running", "usage": {"gpu": 1, "cpu": 2}, "tags": ["a"], "gone": {"x": 1}}
    new = {"phase": "Running", "usage": {"gpu": 3, "cpu": 2}, "tags": ["a", "b"], "extra": {}}
    assert merge_patch_diff(old, new) == {
        "usage": {"gpu": 3},
        "tags": ["a", "b"],
        "gone": None,
        "extra": {},
    }


def test_a_flag_becoming_a_number_is_a_change() -> None:
    assert merge_patch_diff({"a": True}, {"a": 1}) == {"a": 1}
    assert merge_patch_diff({"a": [True]}, {"a": [1]}) == {"a": [1]}
    assert merge_patch_diff({"a": 1}, {"a": 1.0}) == {}, "the same JSON number"


def test_an_object_replacing_a_scalar_is_sent_whole() -> None:
    assert merge_patch_diff({"a": 1}, {"a": {"b": 2}}) == {"a": {"b": 2}}
    assert merge_patch_diff({"a": {"b": 2}}, {"a": [1]}) == {"a": [1]}
