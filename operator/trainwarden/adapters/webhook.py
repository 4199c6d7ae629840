"""The admission webhook: holds new work of exhausted budgets (core/admission.py).

It runs in every replica, leader or not, in a thread of its own with its own event loop,
informers and TLS listener, so that neither leadership nor a busy controller delays an
answer. It fails open, deliberately: the webhook configuration says `failurePolicy:
Ignore` with a short timeout, and anything this server cannot decide (its view not yet
listed or possibly stale, a request it cannot read, any exception) is allowed unchanged.
An operator that is down, slow or wrong never blocks a creation; it only holds less.
"""

import asyncio
import base64
import json
import ssl
import tempfile
import threading
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from aiohttp import web
from kubernetes import client

from trainwarden import logs, metrics
from trainwarden.adapters import certs
from trainwarden.adapters.informer import Informer, Source
from trainwarden.cache.admission import AdmissionView
from trainwarden.core.admission import Verdict, admit

log = logs.get(__name__)
MAX_BODY = 4 * 2**20
"""An AdmissionReview of one object: the API server's own limit on objects is 1.5 MiB."""
MAX_WARNINGS = 4
MAX_WARNING = 512
REFRESH = 600.0
"""Seconds between checks of the certificate Secret and the configuration's caBundle."""
RETRY = 10.0
"""Seconds between attempts to get a first certificate (the Secret missing, no access)."""


@dataclass(frozen=True)
class WebhookSettings:
    port: int
    address: str = "0.0.0.0"  # noqa: S104 - the API server connects from outside the pod
    secret: tuple[str, str] = ("default", "trainwarden-webhook")
    """The Secret (namespace, name) holding the serving certificate and its CA."""
    configuration: str | None = None
    """The MutatingWebhookConfiguration whose caBundle the operator keeps current."""
    names: tuple[str, ...] = ("localhost", "127.0.0.1")
    """The names the certificate is valid for (the Service's DNS names)."""


def review_response(review: Any, view: AdmissionView, now: datetime) -> tuple[dict[str, Any], str]:
    """The AdmissionReview answer to `review`, and the outcome (for logs and metrics)."""
    request = review.get("request") if isinstance(review, dict) else None
    if not isinstance(request, dict) or not isinstance(request.get("uid"), str):
        raise ValueError("not an AdmissionReview request")
    response: dict[str, Any] = {"uid": request["uid"], "allowed": True}
    obj = request.get("object")
    outcome = "ignored"
    if request.get("operation") == "CREATE" and isinstance(obj, dict):
        if not view.current():
            outcome = "unknown"
        else:
            obj = {**obj, "metadata": {**(obj.get("metadata") or {})}}
            obj["metadata"].setdefault("namespace", request.get("namespace") or "")
            namespace = str(obj["metadata"]["namespace"])
            verdict = admit(obj, view.namespace_labels(namespace), view.budgets(), now)
            _answer(response, verdict)
            outcome = verdict.outcome
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}, (
        outcome
    )


def _answer(response: dict[str, Any], verdict: Verdict) -> None:
    if verdict.patch:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(json.dumps(list(verdict.patch)).encode()).decode()
    if verdict.warnings:
        response["warnings"] = [w[:MAX_WARNING] for w in verdict.warnings[:MAX_WARNINGS]]


class Webhook:
    """The server and everything it needs, started once per process."""

    def __init__(self, settings: WebhookSettings, api: client.ApiClient, instance: str | None):
        self.settings = settings
        self.api = api
        self.view = AdmissionView(instance)
        self.ready = threading.Event()
        self._context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self._dir = Path(tempfile.mkdtemp(prefix="trainwarden-webhook-"))
        self._serving: bytes | None = None

    def start(self) -> None:
        thread = threading.Thread(target=lambda: asyncio.run(self._serve()), name="webhook")
        thread.daemon = True
        thread.start()

    async def _serve(self) -> None:
        loop = asyncio.get_running_loop()
        # No listener until there is a certificate: meanwhile the API server fails open.
        while not await loop.run_in_executor(None, self._refresh_quietly):  # noqa: ASYNC110
            await asyncio.sleep(RETRY)
        view = self.view
        for source, project, sink in (
            (Source("admission-budgets", "/apis/trainwarden.dev/v1alpha1/trainingbudgets"),
             view.project_budget, view.budget_source),
            (Source("admission-namespaces", "/api/v1/namespaces"),
             view.project_namespace, view.namespace_source),
        ):  # fmt: skip
            Informer(self.api, source, project, sink, loop).start()
        app = web.Application(client_max_size=MAX_BODY)
        app.router.add_post("/hold", self._hold)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        s = self.settings
        await web.TCPSite(runner, s.address, s.port, ssl_context=self._context).start()
        log.info("admission webhook serving", address=f"{s.address}:{s.port}", path="/hold")
        self.ready.set()
        while True:
            await asyncio.sleep(REFRESH)
            await loop.run_in_executor(None, self._refresh_quietly)

    async def _hold(self, request: web.Request) -> web.Response:
        try:
            review = await request.json()
        except ValueError:
            return web.json_response({"error": "not JSON"}, status=400)
        try:
            body, outcome = review_response(review, self.view, datetime.now(UTC))
        except Exception as error:  # fail open: whatever this is, the creation goes ahead
            log.warning("admission request not decided", error=f"{type(error).__name__}: {error}")
            metrics.report_admission("error")
            request_part = review.get("request") if isinstance(review, dict) else None
            uid = request_part.get("uid") if isinstance(request_part, dict) else None
            if not isinstance(uid, str):
                return web.json_response({"error": "not an AdmissionReview"}, status=400)
            return web.json_response(_allowed(uid))
        metrics.report_admission(outcome)
        if outcome in ("held", "would-hold"):
            log.info("admission", outcome=outcome, message=body["response"]["warnings"][0])
        return web.json_response(body)

    def _refresh(self) -> None:
        """Fill or renew the certificate, serve with it, keep the caBundle current."""
        namespace, name = self.settings.secret
        bundle = certs.ensure(self.api, namespace, name, self.settings.names)
        if bundle.cert != self._serving:
            cert, key = self._dir / "tls.crt", self._dir / "tls.key"
            key.touch(mode=0o600)
            key.write_bytes(bundle.key)
            cert.write_bytes(bundle.cert)
            self._context.load_cert_chain(cert, key)
            self._serving = bundle.cert
        if self.settings.configuration:
            certs.inject(self.api, self.settings.configuration, bundle.ca_cert)

    def _refresh_quietly(self) -> bool:
        try:
            self._refresh()
        except Exception as error:  # the next refresh tries again; serving goes on
            log.warning(
                "webhook certificate not refreshed", error=f"{type(error).__name__}: {error}"
            )
            return False
        return True


def _allowed(uid: str) -> dict[str, Any]:
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "response": {"uid": uid, "allowed": True},
    }


def start(settings: WebhookSettings, api: client.ApiClient, instance: str | None) -> Webhook:
    """Start the webhook in the background; `Webhook.ready` is set once it serves."""
    webhook = Webhook(settings, api, instance)
    webhook.start()
    return webhook
