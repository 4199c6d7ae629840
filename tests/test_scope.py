"""Scope matching never widens: empty means nothing, labels cannot move charges around."""

from hypothesis import given
from hypothesis import strategies as st

from trainwarden.api.v1alpha1.names import BUDGET_LABEL
from trainwarden.api.v1alpha1.types import LabelSelector, LabelSelectorRequirement, Scope
from trainwarden.core.scope import charge, in_scope, selects

label_maps = st.dictionaries(
    st.sampled_from(["team", "env", BUDGET_LABEL]), st.sampled_from(["a", "b"]), max_size=3
)


def test_selector_operators() -> None:
    sel = LabelSelector(
        match_labels={"team": "a"},
        match_expressions=[
            LabelSelectorRequirement(key="env", operator="In", values=["prod", "dev"]),
            LabelSelectorRequirement(key="tmp", operator="DoesNotExist"),
        ],
    )
    assert selects(sel, {"team": "a", "env": "dev"})
    assert not selects(sel, {"team": "a", "env": "dev", "tmp": "1"})
    assert not selects(sel, {"team": "b", "env": "dev"})
    assert not selects(sel, {"team": "a"})


def test_empty_selector_matches_nothing_even_if_constructed_around_validation() -> None:
    empty = LabelSelector.model_construct(match_labels={}, match_expressions=[])
    assert not selects(empty, {"team": "a"})


@given(label_maps, label_maps)
def test_scope_never_leaves_its_namespaces(
    ns_labels: dict[str, str], labels: dict[str, str]
) -> None:
    scope = Scope(namespaces=["vision"])
    assert not in_scope(scope, "research", ns_labels, labels)
    assert in_scope(scope, "vision", ns_labels, labels)


@given(label_maps, st.sampled_from(["A", "B", "ghost"]))
def test_label_neither_adds_nor_removes_budgets(labels: dict[str, str], asked: str) -> None:
    budgets = {
        "A": Scope(namespaces=["vision"]),
        "B": Scope(namespace_selector=LabelSelector(match_labels={"team": "research"})),
    }
    without = charge(budgets, "vision", {"team": "vision"}, labels)
    with_label = charge(budgets, "vision", {"team": "vision"}, {**labels, BUDGET_LABEL: asked})
    assert with_label.budgets == without.budgets == ("A",)
    assert (with_label.problem is None) == (asked == "A")


def test_problem_says_why() -> None:
    budgets = {"A": Scope(namespaces=["vision"]), "B": Scope(namespaces=["research"])}
    outside = charge(budgets, "vision", {}, {BUDGET_LABEL: "B"})
    assert outside.problem is not None
    assert "outside its scope" in outside.problem
    unknown = charge(budgets, "vision", {}, {BUDGET_LABEL: "nope"})
    assert unknown.problem is not None
    assert "no such budget" in unknown.problem
