"""Idle accelerator nodes: since when, and which marks to set or lift."""

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from trainwarden.api.v1alpha1.names import CORDONED_BY, IDLE_NODE_LABEL
from trainwarden.core.nodes import (
    NodeActions,
    NodeFacts,
    idle_for,
    idle_since,
    node_actions,
    node_facts,
)
from trainwarden.core.reads import CODE

T0 = datetime(2026, 8, 1, tzinfo=UTC)
GPU = "nvidia.com/gpu"
GPU_NODE = NodeFacts(allocatable={GPU: 8.0})


def test_node_facts_read_allocatable_cordon_and_our_mark() -> None:
    facts = node_facts(
        {
            "metadata": {"labels": {"a": "b"}, "annotations": {CORDONED_BY: "irp"}},
            "spec": {"unschedulable": True},
            "status": {"allocatable": {GPU: "8", "cpu": "96", "bogus": "lots"}},
        },
        CODE,
    )
    assert facts.allocatable == {GPU: 8.0, "cpu": 96.0}
    assert facts.unschedulable
    assert facts.cordoned_by == "irp"


def test_only_accelerator_nodes_without_accelerator_pods_are_idle_and_keep_their_since() -> None:
    nodes = {"busy": GPU_NODE, "quiet": GPU_NODE, "cpu": NodeFacts(allocatable={"cpu": 32.0})}
    earlier = T0 - timedelta(hours=2)
    since = idle_since(nodes, {"busy"}, {"quiet": earlier}, resources=[GPU], now=T0)
    assert since == {"quiet": earlier}
    assert idle_for(since, T0, timedelta(hours=1)) == ["quiet"]
    assert idle_for(since, T0, timedelta(hours=3)) == []


def test_a_user_who_uncordons_wins_and_only_our_cordons_are_lifted() -> None:
    nodes = {
        "fresh": GPU_NODE,
        "uncordoned-by-user": NodeFacts(allocatable={GPU: 8.0}, cordoned_by="irp"),
        "cordoned-by-admin": NodeFacts(allocatable={GPU: 8.0}, unschedulable=True),
        "ours-now-busy": NodeFacts(allocatable={GPU: 8.0}, unschedulable=True, cordoned_by="irp"),
        "theirs-now-busy": NodeFacts(
            allocatable={GPU: 8.0}, unschedulable=True, cordoned_by="other"
        ),
    }
    idle = {"fresh", "uncordoned-by-user", "cordoned-by-admin"}
    busy = {"ours-now-busy", "theirs-now-busy"}
    acts = node_actions(nodes, idle, busy, policy="irp", cordon=True, label=False)
    assert acts.cordon == ("fresh",)
    assert acts.uncordon == ("ours-now-busy",)


def test_our_marks_stay_on_a_node_not_idle_yet_nor_busy() -> None:
    """Quiet for less than `after` (the time forgotten by a restart), or its GPUs gone from
    allocatable for a moment: lifting the cordon would be undone a moment later."""
    ours = NodeFacts(labels={IDLE_NODE_LABEL: "true"}, unschedulable=True, cordoned_by="irp")
    nodes = {"quiet-not-long": ours, "plugin-restarting": replace(ours, allocatable={})}
    acts = node_actions(nodes, set(), set(), policy="irp", cordon=True, label=True)
    assert acts == NodeActions()


@given(
    st.dictionaries(
        st.sampled_from(["a", "b", "c", "d"]),
        st.builds(
            NodeFacts,
            labels=st.sampled_from([{}, {IDLE_NODE_LABEL: "true"}]),
            unschedulable=st.booleans(),
            cordoned_by=st.sampled_from([None, "irp", "other"]),
        ),
    ),
    st.sets(st.sampled_from(["a", "b", "c", "d"])),
    st.sets(st.sampled_from(["a", "b", "c", "d"])),
    st.booleans(),
    st.booleans(),
)
def test_marks_are_never_set_on_busy_nodes_nor_lifted_from_others(
    nodes: dict[str, NodeFacts], idle: set[str], busy: set[str], cordon: bool, label: bool
) -> None:
    busy -= idle  # a node with accelerator pods is never idle
    acts = node_actions(nodes, idle, busy, policy="irp", cordon=cordon, label=label)
    assert set(acts.cordon) <= idle
    assert set(acts.label) <= idle
    assert not set(acts.uncordon) & idle
    assert set(acts.uncordon) | set(acts.unlabel) <= busy, "lifted only where work runs"
    assert all(nodes[n].cordoned_by == "irp" for n in acts.uncordon)
    assert all(not nodes[n].unschedulable for n in acts.cordon), "never take over a cordon"
    if not cordon:
        assert acts.cordon == ()
