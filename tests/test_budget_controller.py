"""The budget controller loop keeps going while kopf changes its indices under it."""

import asyncio
from datetime import datetime, timedelta
from typing import Any

import pytest

from trainwarden.handlers import budgets as controller_module
from trainwarden.handlers.budgets import BudgetController
from trainwarden.reconcile.inventory import Inventory


class Store(dict[str, dict[str, Any]]):
    """Like kopf's index stores: iterating yields the values, and kopf mutates it live."""

    def __iter__(self) -> Any:
        return iter(list(self.values()))


def body(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "resourceVersion": "1"}, "spec": {}}


def test_budgets_deleted_and_added_during_an_evaluation(monkeypatch: pytest.MonkeyPatch) -> None:
    index: dict[str, Store] = {n: Store({n: body(n)}) for n in ("a", "b", "c")}
    evaluated: list[str] = []

    async def reconcile(evaluating: dict[str, Any], *_: Any) -> datetime:
        evaluated.append(evaluating["metadata"]["name"])
        index.pop("b", None)  # deleted while "a" awaits the API
        index["d"] = Store({"d": body("d")})
        index["c"].clear()
        await asyncio.sleep(0)
        return datetime.now().astimezone() + timedelta(seconds=5)

    async def no_labels(*_: Any) -> None:
        return None

    async def nothing_suspended(*_: Any) -> dict[str, list[Any]]:
        return {}

    monkeypatch.setattr(controller_module, "reconcile", reconcile)
    monkeypatch.setattr(controller_module.workloads, "suspended_by_budgets", nothing_suspended)
    monkeypatch.setattr(controller_module, "report_label_problems", no_labels)
    controller = BudgetController(
        kube=None,  # type: ignore[arg-type]
        inventory=Inventory({}, {}, {}),
        policies=index,  # type: ignore[arg-type]
    )
    asyncio.run(controller.cycle())
    assert evaluated == ["a", "b", "c"], "one consistent snapshot per cycle"
    asyncio.run(controller.cycle())
    assert evaluated[3:] == ["a", "d"], "the next cycle sees the changes"


def test_an_unreadable_status_field_costs_only_itself() -> None:
    """A status written by an older version must not wipe the ledger."""
    from trainwarden.reconcile.budget import previous_status

    raw = {
        "remaining": {"acceleratorHours": {"nested": "old shape"}},
        "history": "garbage",
        "ledger": {
            "observedAt": "2026-12-01T10:00:00Z",
            "closed": [
                {
                    "uid": "u",
                    "namespace": "ns",
                    "name": "p",
                    "start": "2026-12-01T09:00:00Z",
                    "end": "2026-12-01T09:30:00Z",
                    "requests": {"nvidia.com/gpu": 8},
                }
            ],
        },
        "periodStart": "2026-12-01T00:00:00Z",
    }
    status = previous_status(raw, "TrainingBudget/t")
    assert status.ledger is not None
    assert [p.uid for p in status.ledger.closed] == ["u"]
    assert status.history == []
    assert status.period_start is not None
