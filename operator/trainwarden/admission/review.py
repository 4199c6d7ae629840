"""An AdmissionReview's answer from its raw body: what the webhook's lanes run.

Kept apart from the server (admission/webhook.py) to be light to import: a large review
is decided in a worker process, which imports this module, never aiohttp or the
Kubernetes client. Nothing here logs or counts; the server does, from what `decide`
returns.
"""

import base64
import json
import os
import re
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from trainwarden.api.v1alpha1.names import DOCTOR_PROBE
from trainwarden.core import ledger
from trainwarden.core.admission import PROBE_ANSWERED, BudgetView, Verdict, admit
from trainwarden.core.claim_admission import admit_claim, is_claim
from trainwarden.core.ledger import Earlier

MAX_WARNINGS = 4
MAX_WARNING = 512
HEAD = 4096
"""Where the API server writes a request's uid and namespace: before the object (Go
writes AdmissionRequest's fields in order: uid, kinds, resources, name, namespace...)."""
_UID = re.compile(rb'"request"\s*:\s*\{\s*"uid"\s*:\s*"([^"\\]{1,128})"')
_NAMESPACE = re.compile(rb'"namespace"\s*:\s*"([a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?)"')


class View(Protocol):
    """What a decision reads: admission/view.py's AdmissionView, or a Snapshot of it."""

    def current(self) -> bool: ...
    def budgets(self) -> list[BudgetView]: ...
    def namespace_labels(self, name: str) -> Mapping[str, str]: ...
    def earlier_run(self, key: tuple[str, str, str]) -> Earlier | None: ...
    def earlier_runs(self, namespace: str) -> dict[tuple[str, str, str], Earlier]: ...


@dataclass(frozen=True)
class Decision:
    status: int
    body: dict[str, Any]
    outcome: str
    problem: str | None = None
    """Why a review was let through undecided (logged by the server)."""
    budget: str | None = None
    """The budget a claim was refused (or would be) by: the server posts its Event."""


class Snapshot:
    """What a decision reads of the view, copied for a worker process: whether it is
    current, the budgets, and the labels of the one namespace the review names."""

    def __init__(self, view: View, namespace: str | None) -> None:
        self._current = view.current()
        self._budgets = view.budgets()
        self._namespace = namespace
        self._labels = dict(view.namespace_labels(namespace)) if namespace else {}
        self._earlier = view.earlier_runs(namespace) if namespace else {}

    def current(self) -> bool:
        return self._current

    def budgets(self) -> list[BudgetView]:
        return self._budgets

    def namespace_labels(self, name: str) -> Mapping[str, str]:
        """The namespace's labels; none for another (its label-selected scopes hold nothing)."""
        return self._labels if name == self._namespace else {}

    def earlier_run(self, key: tuple[str, str, str]) -> Earlier | None:
        """The namespace's earlier runs were copied; none for another."""
        return self._earlier.get(key)

    def earlier_runs(self, namespace: str) -> dict[tuple[str, str, str], Earlier]:
        return dict(self._earlier) if namespace == self._namespace else {}


def review_response(
    review: Any, view: View, now: datetime, configuration: str = ""
) -> tuple[dict[str, Any], str]:
    """The AdmissionReview answer to `review`, and the outcome (for logs and metrics)."""
    answer, outcome, _ = _review(review, view, now, configuration)
    return answer, outcome


def _review(
    review: Any, view: View, now: datetime, configuration: str = ""
) -> tuple[dict[str, Any], str, str | None]:
    """The answer, the outcome, and the budget that refused a claim (or would have).
    `configuration`: the webhook configuration this operator serves, named in a doctor
    probe's answer (another instance's webhook answers the same probe)."""
    request = review.get("request") if isinstance(review, dict) else None
    if not isinstance(request, dict) or not isinstance(request.get("uid"), str):
        raise ValueError("not an AdmissionReview request")
    response: dict[str, Any] = {"uid": request["uid"], "allowed": True}
    obj = request.get("object")
    outcome = "ignored"
    if request.get("dryRun") is True and DOCTOR_PROBE in _annotations(obj):
        by = f" by {configuration}" if configuration else ""
        answered = f"{PROBE_ANSWERED}{by}; view current={str(view.current()).lower()}"
        return envelope({**response, "warnings": [answered]}), outcome, None
    if request.get("operation") == "CREATE" and isinstance(obj, dict):
        if not view.current():
            outcome = "unknown"
        else:
            obj = {**obj, "metadata": {**(obj.get("metadata") or {})}}
            obj["metadata"].setdefault("namespace", request.get("namespace") or "")
            namespace = str(obj["metadata"]["namespace"])
            if is_claim(obj):
                verdict = admit_claim(obj, view.namespace_labels(namespace), view.budgets(), now)
            else:
                key = ledger.repeat_key(namespace, _annotations(obj))
                earlier = view.earlier_run(key) if key is not None else None
                labels = view.namespace_labels(namespace)
                verdict = admit(obj, labels, view.budgets(), now, earlier)
            _answer(response, verdict)
            outcome = verdict.outcome
            if (
                outcome in ("refused-claim", "would-refuse-claim")
                and request.get("dryRun") is not True
            ):
                return envelope(response), outcome, verdict.held_by
    return envelope(response), outcome, None


def _annotations(obj: object) -> Mapping[str, Any]:
    metadata = obj.get("metadata") if isinstance(obj, dict) else None
    found = metadata.get("annotations") if isinstance(metadata, dict) else None
    return found if isinstance(found, dict) else {}


def envelope(response: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}


def _answer(response: dict[str, Any], verdict: Verdict) -> None:
    if verdict.refusal is not None:
        response["allowed"] = False
        response["status"] = {"code": 403, "reason": "Forbidden", "message": verdict.refusal}
    if verdict.patch:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(json.dumps(list(verdict.patch)).encode()).decode()
    if verdict.warnings:
        response["warnings"] = [w[:MAX_WARNING] for w in verdict.warnings[:MAX_WARNINGS]]


def decide(body: bytes, view: View, now: datetime, configuration: str = "") -> Decision:
    """A review's answer from its raw body: blocking and CPU-bound. An AdmissionView is
    read here from a lane's thread while informers write it on the loop: its records are
    replaced or set one at a time, and each read is one operation on them."""
    try:
        parsed = json.loads(body)
    except (ValueError, RecursionError):  # deep nesting raises RecursionError
        return Decision(400, {"error": "not JSON"}, "error", "not JSON")
    try:
        answer, outcome, budget = _review(parsed, view, now, configuration)
    except Exception as error:  # fail open: whatever this is, the creation goes ahead
        problem = f"{type(error).__name__}: {error}"
        request = parsed.get("request") if isinstance(parsed, dict) else None
        uid = request.get("uid") if isinstance(request, dict) else None
        if not isinstance(uid, str):
            return Decision(400, {"error": "not an AdmissionReview"}, "error", problem)
        return Decision(200, envelope({"uid": uid, "allowed": True}), "error", problem)
    return Decision(200, answer, outcome, budget=budget)


def undecided(body: bytes, outcome: str, why: str) -> Decision:
    """Allowed unchanged, `why` said to the submitter (kubectl prints it); the uid read
    from where the API server writes it. Without one, an error: the API server fails
    open all the same."""
    found = _UID.search(body[:HEAD])
    if found is None:
        return Decision(500, {"error": why}, outcome, why)
    response = {"uid": found[1].decode(), "allowed": True, "warnings": [f"trainwarden: {why}"]}
    return Decision(200, envelope(response), outcome, why)


def namespace_of(body: bytes) -> str | None:
    """The request's namespace, read before the object without parsing."""
    found = _NAMESPACE.search(body[:HEAD].split(b'"object"', 1)[0])
    return found[1].decode() if found else None


def exit_with(parent: int) -> None:
    """In the worker process: exit once the process that started it is gone. A SIGKILLed
    operator closes no pipe the worker would see: it holds both ends of its queue."""

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(0)

    threading.Thread(target=watch, name="exit-with-parent", daemon=True).start()
