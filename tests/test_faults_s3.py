"""The S3 fault area's pure parts: the plan it expects, how it judges what vanished, and
how the S3 fault proxy reads DeleteObjects and pages listings."""

import urllib.parse

from faults.s3_faults import judge_objects, name_of, plan
from faults.s3_proxy import confirmed, doubles, keys_of, paged_query

PREFIX = "runs/a/"
DELETE = (
    b'<Delete xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Object><Key>runs/a/x</Key>'
    b"</Object><Object><Key>runs/a/y</Key></Object><Quiet>true</Quiet></Delete>"
)


def test_the_plan_keeps_the_newest_and_the_protected() -> None:
    assert plan(list(range(100, 900, 100)), 2, {100, 200}) == {
        "checkpoint-300",
        "checkpoint-400",
        "checkpoint-500",
        "checkpoint-600",
    }
    assert plan([1, 2], 2, set()) == set()
    assert plan([5, 1, 3], 1, set()) == {"checkpoint-1", "checkpoint-3"}, "newest by step"


def test_keys_belong_to_their_top_level_entry_or_to_nothing() -> None:
    assert name_of("runs/a/checkpoint-1/model.safetensors", PREFIX) == "checkpoint-1"
    assert name_of("runs/a/checkpoint-1.trainwarden-pin", PREFIX) == "checkpoint-1.trainwarden-pin"
    assert name_of("runs/a-v2/checkpoint-1/x", PREFIX) is None
    assert name_of("datasets/x", PREFIX) is None


def test_what_vanished_is_judged_against_the_plan() -> None:
    def ckpt(n: int) -> set[str]:
        return {f"{PREFIX}checkpoint-{n}/model.safetensors", f"{PREFIX}checkpoint-{n}/state"}

    before = ckpt(1) | ckpt(2) | ckpt(3) | {"datasets/x", f"{PREFIX}checkpoint-3.trainwarden-pin"}
    planned = {"checkpoint-1", "checkpoint-2"}
    clean = judge_objects(before, before - ckpt(1) - ckpt(2), PREFIX, planned)
    assert (clean.taken, clean.lost, clean.wrong) == (2, 0, 0)
    half = {f"{PREFIX}checkpoint-2/state"}
    partial = judge_objects(before, before - ckpt(1) - ckpt(2) | half, PREFIX, planned)
    assert (partial.taken, partial.lost, partial.wrong) == (1, 1, 0), "half-deleted is lost"
    bad = judge_objects(before, before - ckpt(1) - ckpt(3) - {"datasets/x"}, PREFIX, planned)
    assert (bad.taken, bad.lost, bad.wrong) == (1, 1, 2)
    assert bad.notes == [
        "checkpoint-3 deleted outside the plan",
        "datasets/x deleted outside the prefix",
    ]


def test_delete_requests_are_read_and_repeats_after_a_confirmation_counted() -> None:
    assert keys_of(DELETE, "Object") == ["runs/a/x", "runs/a/y"]
    assert keys_of(b"not xml", "Object") == []
    refused = (
        b"<DeleteResult><Error><Key>runs/a/y</Key><Code>AccessDenied</Code></Error></DeleteResult>"
    )
    assert confirmed(DELETE, 200, b"<DeleteResult/>") == {"runs/a/x", "runs/a/y"}
    assert confirmed(DELETE, 200, refused) == {"runs/a/x"}
    assert confirmed(DELETE, 500, b"") == set()
    dropped_then_retried = [(["k"], set()), (["k"], {"k"})]
    assert doubles(dropped_then_retried) == set(), "a retry after a dropped answer is no double"
    assert doubles([(["k", "j"], {"k"}), (["j"], {"j"}), (["k"], {"k"})]) == {"k"}


def test_a_listing_is_cut_into_pages_and_a_next_page_is_known() -> None:
    query, token = paged_query("list-type=2&prefix=runs%2Fa%2F&max-keys=1000", 2)
    assert dict(urllib.parse.parse_qsl(query)) == {
        "list-type": "2",
        "prefix": "runs/a/",
        "max-keys": "2",
    }
    assert not token
    _, token = paged_query("continuation-token=abc%2B%3D&list-type=2", 2)
    assert token
