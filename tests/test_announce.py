"""core/announce.py: news is said once per key for as long as it holds under one
condition, again when it comes back after a break, under another condition, or after its
object went; the memory never holds more than what held in the last evaluation."""

from hypothesis import given, settings
from hypothesis import strategies as st

from trainwarden.core.announce import Announcements

KEYS = st.sampled_from(["a", "b", "c", "d"])
CONDITIONS = st.integers(min_value=0, max_value=2)
ROUND = st.tuples(
    st.dictionaries(KEYS, CONDITIONS, max_size=4),  # what holds this evaluation
    st.sets(KEYS, max_size=2),  # objects gone before it
)


@settings(max_examples=1000)
@given(st.lists(ROUND, max_size=30))
def test_each_run_of_a_condition_is_said_exactly_once_and_memory_stays_current(
    rounds: list[tuple[dict[str, int], set[str]]],
) -> None:
    ann = Announcements()
    previous: dict[str, int] = {}
    for holds, gone in rounds:
        for key in gone:
            ann.forget(key)
            previous.pop(key, None)
        said = {key for key, condition in holds.items() if ann.first(key, condition)}
        # a run starts where the key did not hold, held something else, or its object went
        starts = {key for key, condition in holds.items() if previous.get(key) != condition}
        assert said == starts
        assert all(ann.said(key, condition) for key, condition in holds.items())
        ann.keep_only(holds)
        assert len(ann) <= len(holds)
        assert all(key in holds for key in "abcd" if key in ann)
        previous = dict(holds)


def test_said_only_asks_and_note_remembers() -> None:
    ann = Announcements()
    assert not ann.said("k", 1)
    assert not ann.said("k", 1), "asking does not remember"
    ann.note("k", 1)
    assert ann.said("k", 1)
    assert not ann.said("k", 2)
    assert not ann.first("k", 1)
    assert ann.first("k", 2), "another condition is news"
    ann.forget("k")
    assert "k" not in ann
    assert ann.first("k", 2), "its object came back"
