"""The admission webhook: holds new work of exhausted budgets (core/admission.py).

It runs in every replica, leader or not, on the process's one event loop (replica.py),
and decides from the replica's one informer cache (admission/view.py): webhooks are
served by every replica, and the controllers that run beside it in the leader read the
same cache. It fails open, deliberately: the webhook configuration says `failurePolicy:
Ignore` with a short timeout, and anything this server cannot decide (its view not yet
listed or possibly stale, a request it cannot read, any exception, no decision within
the deadline) is allowed unchanged. An operator that is down, slow or wrong never blocks
a creation; it only holds less.

Load (docs/security.md has the figures of bench/webhook_load.py): the event loop only
accepts connections and reads bodies, so what else runs on it (the cache's deliveries,
the controllers between their awaits) delays an answer by at most one such step, never
by a decision. Small reviews are parsed and decided in a thread; large ones in a worker
process, because parsing a 2.6 MiB review holds the GIL for ~50 ms in one C call that
no thread can interrupt, and a dozen of them in a row held every small review back for
as long. Whatever `admit` walks is capped before it walks it (core/estimate.py
`too_costly`), and a review not decided within DEADLINE of the API server's timeout is
answered "allowed, unchanged" (work still queued is dropped).
"""

import asyncio
import multiprocessing
import os
import ssl
import tempfile
import time
from collections.abc import Callable, Coroutine
from concurrent.futures import Executor, ProcessPoolExecutor, ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from aiohttp import web
from kubernetes import client

from trainwarden import logs, metrics
from trainwarden.adapters.kube_client import KubeClient
from trainwarden.admission import certs
from trainwarden.admission.review import (
    Decision,
    Snapshot,
    decide,
    exit_with,
    namespace_of,
    undecided,
)
from trainwarden.admission.view import AdmissionView
from trainwarden.api.v1alpha1 import GROUP, VERSION
from trainwarden.api.v1alpha1.names import BUDGET_KIND

API_VERSION = f"{GROUP}/{VERSION}"

log = logs.get(__name__)
MAX_BODY = 4 * 2**20
"""An AdmissionReview of one object: the API server takes request bodies up to 3 MiB."""
SMALL = 256 * 2**10
"""Reviews up to this size are decided in a thread (a Job's is a few KiB), larger ones in
the worker process."""
DEADLINE = 0.75
"""The share of the API server's timeout within which every review is answered."""
REFRESH = 600.0
"""Seconds between checks of the certificate Secret and the configuration's caBundle."""
RETRY = 10.0
"""Seconds between attempts to get a first certificate (the Secret missing, no access)."""
EVENT_EVERY = 60.0
"""Seconds between two Events of refused claims of one budget."""


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
    timeout: float = 2.0
    """The configuration's timeoutSeconds: every review is answered within DEADLINE of it."""
    client_ca: Path | None = None
    """CA certificates of the API server's client certificate: without one signed by
    them, a client is refused at the TLS handshake. None: any client is served."""
    client_names: tuple[str, ...] = ()
    """If any, the client certificate must name one of them (its CN or a DNS SAN)."""


def _names(peer: object) -> set[str]:
    """The common names and DNS names of a verified peer certificate (ssl's dict)."""
    if not isinstance(peer, dict):
        return set()
    subject = peer.get("subject", ())
    names = {value for rdn in subject for key, value in rdn if key == "commonName"}
    return names | {value for key, value in peer.get("subjectAltName", ()) if key == "DNS"}


def _worker() -> ProcessPoolExecutor:
    """One worker process, started afresh (never forked from this threaded process)."""
    spawn = multiprocessing.get_context("spawn")
    return ProcessPoolExecutor(1, spawn, initializer=exit_with, initargs=(os.getpid(),))


async def _posted(
    announce: Callable[[str, str, str], Coroutine[Any, Any, None]],
    budget: str,
    reason: str,
    message: str,
) -> None:
    """The Event, best effort: whatever posting it raises (the API server unreachable)
    is one log line, not a fire-and-forget task's exception nobody retrieves."""
    try:
        await announce(budget, reason, message)
    except Exception as e:  # the refusal was answered: only its Event is lost
        log.warning("refused claim's Event not posted", budget=budget, reason=reason, error=repr(e))


class Reviews:
    """The /hold endpoint: reviews read on the loop, decided off it, answered in time."""

    def __init__(
        self,
        view: AdmissionView,
        settings: WebhookSettings,
        large: Executor | None = None,
        announce: Callable[[str, str, str], Coroutine[Any, Any, None]] | None = None,
    ) -> None:
        """`large`: where large reviews are decided (the worker process by default);
        `announce(budget, reason, message)` posts a refused claim's Event."""
        self.view = view
        self.announce = announce
        self.deadline = settings.timeout * DEADLINE
        self.client_names = frozenset(settings.client_names)
        self.configuration = settings.configuration or ""
        """Named in a doctor probe's answer (doctor/checks.py tells answers apart by it)."""
        self._tasks: set[asyncio.Task[None]] = set()
        """Events being posted (kept referenced until done)."""
        self._announced: dict[tuple[str, str], float] = {}
        """When each (budget, outcome) last had its Event posted (monotonic seconds)."""
        self._small = ThreadPoolExecutor(1, thread_name_prefix="webhook")
        self._large = large or _worker()
        self._large.submit(decide, b"", Snapshot(view, None), datetime.now(UTC))  # warm up

    def close(self) -> None:
        self._small.shutdown(wait=False, cancel_futures=True)
        self._large.shutdown(wait=False, cancel_futures=True)

    def application(self) -> web.Application:
        app = web.Application(client_max_size=MAX_BODY)
        app.router.add_post("/hold", self.hold)
        return app

    async def hold(self, request: web.Request) -> web.Response:
        started = time.monotonic()
        names = _names(request.transport.get_extra_info("peercert") if request.transport else None)
        if self.client_names and not self.client_names & names:
            log.warning("admission request from a client not named", names=sorted(names))
            metrics.report_admission("refused", time.monotonic() - started)
            return web.json_response({"error": "client not allowed"}, status=403)
        body = b""
        try:
            body = await asyncio.wait_for(request.read(), self.deadline)
            left = self.deadline - (time.monotonic() - started)
            decision = await asyncio.wait_for(self._decide(body), max(left, 0.0))
        except TimeoutError:
            why = f"not decided within {self.deadline:.2f}s: created without a budget check"
            decision = undecided(body, "deadline", why)
        metrics.report_admission(decision.outcome, time.monotonic() - started)
        self._log(decision, len(body))
        self._announce(decision, started)
        return web.json_response(decision.body, status=decision.status)

    def _announce(self, decision: Decision, now: float) -> None:
        """A refused claim's Event on its budget, at most one per budget and outcome
        every EVENT_EVERY seconds: a loop of refused creations costs the API server no
        write per request (each is logged and counted all the same)."""
        if decision.budget is None or self.announce is None:
            return
        key = (decision.budget, decision.outcome)
        self._announced = {k: t for k, t in self._announced.items() if now - t < EVENT_EVERY}
        if key in self._announced:
            return
        self._announced[key] = now
        reason = "ClaimRefused" if decision.outcome == "refused-claim" else "ClaimWouldBeRefused"
        posting = _posted(self.announce, decision.budget, reason, self._said(decision))
        task = asyncio.create_task(posting)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    @staticmethod
    def _said(decision: Decision) -> str:
        """What the submitter was told: the refusal, else the first warning."""
        response = decision.body["response"]
        return str(response.get("status", {}).get("message") or response["warnings"][0])

    async def _decide(self, body: bytes) -> Decision:
        """In the thread if small, else in the worker; cancelled (dropped if still
        queued) at the deadline."""
        loop, now = asyncio.get_running_loop(), datetime.now(UTC)
        named = self.configuration
        if len(body) <= SMALL:
            return await loop.run_in_executor(self._small, decide, body, self.view, now, named)
        worker = self._large
        try:
            snapshot = Snapshot(self.view, namespace_of(body))
            return await loop.run_in_executor(worker, decide, body, snapshot, now, named)
        except BrokenProcessPool:  # the worker died (OOM-killed?): a new one for the next
            if worker is self._large:
                self._large = _worker()
            return undecided(body, "error", "the webhook's worker process died")

    @staticmethod
    def _log(decision: Decision, size: int) -> None:
        if decision.problem is not None:
            log.warning("admission request not decided", bytes=size, problem=decision.problem)
        elif decision.outcome in (
            "held",
            "would-hold",
            "too-costly",
            "repeat",
            "repeat-held",
            "refused-claim",
            "would-refuse-claim",
        ):
            level = log.warning if decision.outcome == "too-costly" else log.info
            said = Reviews._said(decision)
            level("admission", outcome=decision.outcome, bytes=size, message=said)


def server_context(client_ca: Path | None) -> ssl.SSLContext:
    """A server TLS context, requiring a client certificate signed by `client_ca` if any."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    if client_ca is not None:
        context.verify_mode = ssl.CERT_REQUIRED
        context.load_verify_locations(cafile=str(client_ca))
    return context


async def listen(
    reviews: Reviews, settings: WebhookSettings, context: ssl.SSLContext
) -> web.AppRunner:
    """Serve `reviews` over TLS on the settings' address and port."""
    runner = web.AppRunner(reviews.application(), access_log=None)
    await runner.setup()
    await web.TCPSite(runner, settings.address, settings.port, ssl_context=context).start()
    return runner


class Webhook:
    """The server and its certificate, served on the running loop."""

    def __init__(self, settings: WebhookSettings, api: client.ApiClient, view: AdmissionView):
        self.settings = settings
        self.api = api
        self.view = view
        self._context = server_context(settings.client_ca)
        self._dir = Path(tempfile.mkdtemp(prefix="trainwarden-webhook-"))
        self._serving: bytes | None = None

    async def serve(self) -> None:
        """Listen once there is a certificate, then keep it current; never returns."""
        loop = asyncio.get_running_loop()
        # No listener until there is a certificate: meanwhile the API server fails open.
        while not await loop.run_in_executor(None, self._refresh_quietly):  # noqa: ASYNC110
            await asyncio.sleep(RETRY)
        s = self.settings
        kube = KubeClient(self.api)

        async def announce(budget: str, reason: str, message: str) -> None:
            """On the budget (its Events are in "default"): the claim was never created."""
            obj = {"apiVersion": API_VERSION, "kind": BUDGET_KIND, "metadata": {"name": budget}}
            await kube.event(obj, type_="Warning", reason=reason, message=message, action="Refuse")

        await listen(Reviews(self.view, s, announce=announce), s, self._context)
        log.info(
            "admission webhook serving",
            address=f"{s.address}:{s.port}",
            path="/hold",
            client_ca=str(s.client_ca) if s.client_ca else None,
        )
        while True:
            await asyncio.sleep(REFRESH)
            await loop.run_in_executor(None, self._refresh_quietly)

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
