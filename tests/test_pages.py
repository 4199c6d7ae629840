"""A list response is read one object at a time (issue 25): a page of the largest pods
the API stores never costs the operator the page at once, and a page read in pieces of
any size is the page."""

import asyncio
import json
import tracemalloc
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trainwarden.adapters.informer import Informer, Source
from trainwarden.adapters.pages import Page
from trainwarden.cache.cluster import ClusterCache
from trainwarden.core.pods import facts
from trainwarden.core.reads import CODE
from world import Body

JSON = dict[str, Any]
EXAMPLES = settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
WIDE = ("x", "é", "\u4e2d", "\U0001f600")
"""A character of each width CPython stores."""


def filler(prefix: str, count: int, value: str) -> dict[str, str]:
    return {f"{prefix}{i}.example.com/f": value for i in range(count)}


JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False)
    | st.text((*WIDE, "\\", '"', "}", "]", ",")),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4)
    ),
    max_leaves=8,
)


@EXAMPLES
@given(
    st.lists(st.dictionaries(st.text(max_size=5), JSON_VALUES, max_size=4), max_size=6),
    st.dictionaries(st.sampled_from(["kind", "apiVersion", "metadata", "x"]), JSON_VALUES),
    st.sampled_from([None, 2]),
    st.integers(1, 70),
)
def test_a_page_read_in_pieces_is_the_page(
    items: list[JSON], head: JSON, indent: int | None, piece: int
) -> None:
    """Every item and every other field, whatever the pieces the body arrives in (a
    multi-byte character, a number or a string cut between two)."""
    keys = list(head)
    text = json.dumps(
        {**{k: head[k] for k in keys[:1]}, "items": items, **{k: head[k] for k in keys[1:]}},
        indent=indent,
    )
    page = Page(Body(text.encode(), piece))
    assert list(page.items()) == items
    assert page.head == head


def test_a_list_of_large_pods_is_read_one_pod_at_a_time() -> None:
    """A page of 40 pods of 600 KiB (24 MiB) parsed whole cost the informer about five
    times that at once (on the operator's first list, after every failed watch, and
    when a policy came to read more of the pods); read one pod at a time, the list costs
    a few of them."""

    def pod(i: int) -> JSON:
        labels = {f"l{n}.example.com/k{i}": f"{n}".ljust(63, "y") for n in range(4000)}
        annotations = filler(f"trainwarden.dev/{i}-", 250, "z" * 1000)
        meta = {"uid": f"u{i}", "name": f"p{i}", "labels": labels, "annotations": annotations}
        return {"metadata": meta}

    pods = [pod(i) for i in range(40)]
    page = {
        "kind": "PodList",
        "apiVersion": "v1",
        "metadata": {"resourceVersion": "7"},
        "items": pods,
    }
    body = json.dumps(page).encode()
    del pods, page
    loop = asyncio.new_event_loop()
    sink = ClusterCache().pod_sink()
    source, api = Source("pods", "/api/v1/pods"), None
    informer: Informer[Any] = Informer(api, source, lambda o: facts(o, CODE), sink, loop)  # type: ignore[arg-type]
    informer._get = lambda query, *, stream: Body(body)  # type: ignore[method-assign]
    tracemalloc.start()
    informer._list()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    loop.close()
    assert peak < 6 * 2**20, (
        f"{peak / 2**20:.1f} MiB at once for a {len(body) / 2**20:.0f} MiB page"
    )
