"""The condition setter: timestamps move only on a flip, and unchanged means no write."""

from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from trainwarden.api.v1alpha1.types import Condition
from trainwarden.core.conditions import MAX_MESSAGE, ConditionUpdate, readiness, set_condition

T0 = datetime(2026, 1, 1, tzinfo=UTC)

updates = st.builds(
    ConditionUpdate,
    type=st.sampled_from(["Ready", "Warning", "Exhausted"]),
    status=st.sampled_from(["True", "False", "Unknown"]),
    reason=st.sampled_from(["Accepted", "InvalidSpec", "Exceeded"]),
    message=st.text(max_size=40),
)


@given(st.lists(st.tuples(updates, st.integers(0, 3)), max_size=12))
def test_history_invariants(steps: list[tuple[ConditionUpdate, int]]) -> None:
    conditions: list[Condition] = []
    now = T0
    for update, generation in steps:
        now += timedelta(minutes=1)
        before = {c.type: c for c in conditions}
        conditions, changed = set_condition(conditions, update, now=now, generation=generation)
        after = {c.type: c for c in conditions}
        assert len(after) == len(conditions), "one condition per type"
        new = after[update.type]
        assert (new.status, new.reason, new.message) == (
            update.status,
            update.reason,
            update.message,
        )
        assert new.observed_generation == generation
        old = before.get(update.type)
        flipped = old is None or old.status != update.status
        assert new.last_transition_time == (now if flipped else old.last_transition_time)
        assert changed == (old != new)
        assert {t: c for t, c in after.items() if t != update.type} == {
            t: c for t, c in before.items() if t != update.type
        }
        again, changed_again = set_condition(conditions, update, now=now, generation=generation)
        assert again == conditions
        assert not changed_again


def test_long_messages_are_truncated() -> None:
    conditions, _ = set_condition(
        [], ConditionUpdate("Ready", "False", "X", "m" * (MAX_MESSAGE + 10)), now=T0, generation=1
    )
    assert len(conditions[0].message) == MAX_MESSAGE


def test_readiness_names_every_problem() -> None:
    assert readiness([]).status == "True"
    update = readiness(["spec.a: bad", "spec.b: worse"])
    assert (update.status, update.reason) == ("False", "InvalidSpec")
    assert "spec.a: bad" in update.message
    assert "spec.b: worse" in update.message
