"""New PersistentVolumeClaims refused by budgets whose storage is exhausted
(core/claim_admission.py), as the webhook answers them (e2e/test_budget_storage.py runs
them through the real API server)."""

import asyncio
import gc
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any

from structlog.testing import capture_logs

from trainwarden.admission.review import Decision, review_response
from trainwarden.admission.webhook import EVENT_EVERY, Reviews, WebhookSettings
from trainwarden.testing.builders import BudgetBuilder
from trainwarden.testing.cluster import PVCBuilder
from webhook_views import fed_view, unlisted
from world import JSON

T = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def refusing(name: str, mode: str = "Enforce", generation: int = 1, until: str = "12:05") -> JSON:
    body = BudgetBuilder(name).namespace_selector({"team": "a"}).storage_gib_hours(1).build()
    body["spec"]["mode"] = mode
    body["metadata"].update(uid=f"uid-{name}", generation=1)
    body["status"] = {
        "periodEnd": "2027-01-01T00:00:00Z",
        "storage": {"usedGiBHours": 1.5},
        "storageAdmission": {
            "refusing": True,
            "refuseUntil": f"2026-12-01T{until}:00Z",
            "message": "storageGiBHours at or past 100% of its limit",
            "observedGeneration": generation,
        },
    }
    return body


def pvc_review(namespace: str = "ns-a", dry_run: bool = False) -> JSON:
    obj = PVCBuilder("new", namespace).size("5Gi").build()
    request = {"uid": "r", "operation": "CREATE", "namespace": namespace, "object": obj}
    return {"request": {**request, "dryRun": dry_run}}


NAMESPACES = {"ns-a": {"team": "a"}, "ns-b": {"team": "b"}}


def test_an_exhausted_enforce_budget_refuses_a_claim_in_its_scope_only() -> None:
    view = fed_view([refusing("b")], NAMESPACES)
    answer, outcome = review_response(pvc_review(), view, T)
    response = answer["response"]
    assert (outcome, response["allowed"], response["status"]["code"]) == (
        "refused-claim",
        False,
        403,
    )
    said = response["status"]["message"]
    assert "TrainingBudget b refuses new volumes" in said
    assert "storageGiBHours at or past 100% of its limit; 1.5 GiB-hours of storage used" in said
    assert "it resets at 2027-01-01T00:00:00+00:00" in said
    assert "PersistentVolumeClaim ns-a/new (5 GiB" in said
    assert review_response(pvc_review("ns-b"), view, T)[1] == "allowed"


def test_dry_run_warns_and_a_stale_or_lapsed_refusal_refuses_nothing() -> None:
    answer, outcome = review_response(
        pvc_review(), fed_view([refusing("b", "DryRun")], NAMESPACES), T
    )
    assert (outcome, answer["response"]["allowed"]) == ("would-refuse-claim", True)
    assert "would be refused (the budget is in DryRun)" in answer["response"]["warnings"][0]
    for body in (refusing("b", generation=0), refusing("b", until="11:59")):
        assert review_response(pvc_review(), fed_view([body], NAMESPACES), T)[1] == "allowed"


def test_labels_ahead_of_the_selectors_key_do_not_hide_it() -> None:
    """300 labels, the selector's key last: the claim is refused as the cache charges it
    (the keys a scope reads, whatever comes first)."""
    body = refusing("b")
    body["spec"]["scope"]["selector"] = {"matchLabels": {"team": "a"}}
    review = pvc_review()
    padding = {f"pad-{i:03}": "x" for i in range(299)}
    review["request"]["object"]["metadata"]["labels"] = {**padding, "team": "a"}
    assert review_response(review, fed_view([body], NAMESPACES), T)[1] == "refused-claim"
    review["request"]["object"]["metadata"]["labels"] = {**padding, "team": "b"}
    assert review_response(review, fed_view([body], NAMESPACES), T)[1] == "allowed"


def test_a_claim_never_goes_through_the_workload_hold() -> None:
    """A PVC is not a workload: a budget holding new work does not hold (or patch) it."""
    body = refusing("b")
    body["status"] = {"admission": {"holding": True, "holdUntil": "2026-12-01T12:05:00Z",
                                    "observedGeneration": 1}}  # fmt: skip
    answer, outcome = review_response(pvc_review(), fed_view([body], NAMESPACES), T)
    assert (outcome, "patch" in answer["response"]) == ("allowed", False)


def test_refusals_post_at_most_one_event_per_budget_a_minute() -> None:
    """A loop of refused creations costs one Event a minute per budget and outcome; each
    refusal is still answered, logged and counted."""
    posted: list[tuple[str, str]] = []

    async def announce(budget: str, reason: str, message: str) -> None:
        posted.append((budget, reason))

    def refused(budget: str, outcome: str = "refused-claim") -> Decision:
        body = {"response": {"status": {"message": "no"}, "warnings": ["no"]}}
        return Decision(200, body, outcome, budget=budget)

    async def run() -> None:
        reviews = Reviews(unlisted(), WebhookSettings(port=0), ThreadPoolExecutor(1), announce)
        for t in (0.0, 1.0, 59.0):
            reviews._announce(refused("a"), t)
        reviews._announce(refused("b"), 2.0)
        reviews._announce(refused("a", "would-refuse-claim"), 3.0)
        reviews._announce(refused("a"), EVENT_EVERY + 0.5)
        reviews._announce(Decision(200, {}, "held"), 70.0)  # not a claim: no Event
        await asyncio.sleep(0)
        reviews.close()

    asyncio.run(run())
    assert posted == [
        ("a", "ClaimRefused"),
        ("b", "ClaimRefused"),
        ("a", "ClaimWouldBeRefused"),
        ("a", "ClaimRefused"),
    ]


def test_an_event_that_cannot_be_posted_is_one_log_line_not_a_lost_task_error() -> None:
    """The API server unreachable while posting a refusal's Event: the fire-and-forget
    task logs it and ends; asyncio reports no exception never retrieved."""
    unhandled: list[dict[str, Any]] = []

    async def announce(budget: str, reason: str, message: str) -> None:
        raise OSError("connection refused")

    async def run() -> None:
        asyncio.get_running_loop().set_exception_handler(lambda _, c: unhandled.append(c))
        reviews = Reviews(unlisted(), WebhookSettings(port=0), ThreadPoolExecutor(1), announce)
        body = {"response": {"status": {"message": "no"}}}
        reviews._announce(Decision(200, body, "refused-claim", budget="a"), 0.0)
        await asyncio.wait(set(reviews._tasks))  # as the loop runs it: nobody awaits it
        gc.collect()  # a task's unretrieved exception is reported when it is collected
        reviews.close()

    with capture_logs() as logs:
        asyncio.run(run())
    assert unhandled == []
    lost = [e for e in logs if e["event"] == "refused claim's Event not posted"]
    assert [(e["budget"], e["reason"], e["log_level"]) for e in lost] == [
        ("a", "ClaimRefused", "warning")
    ]
    assert "OSError('connection refused')" in lost[0]["error"]
