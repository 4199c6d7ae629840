"""The webhook's server over real TLS on 127.0.0.1, without a cluster: its lanes, its
deadline and client certificates (issue 25). e2e/test_webhook_auth.py proves the client
certificate against the real API server."""

import asyncio
import datetime as dt
import http.client
import json
import socket
import ssl
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from trainwarden import cli, run_command
from trainwarden.admission import certs
from trainwarden.admission.review import namespace_of, undecided
from trainwarden.admission.view import AdmissionView
from trainwarden.admission.webhook import (
    SMALL,
    Reviews,
    WebhookSettings,
    listen,
    server_context,
)
from trainwarden.metrics import ADMISSION
from trainwarden.testing.builders import BudgetBuilder, JobBuilder
from webhook_views import fed_view

NAMESPACE = "ns-a"
NOW = dt.datetime.now(dt.UTC)


def holding_view() -> AdmissionView:
    body = BudgetBuilder("team").namespaces(NAMESPACE).accelerator_hours(1).enforce().build()
    body["metadata"].update(uid="uid-team", generation=1)
    until = (NOW + dt.timedelta(hours=1)).isoformat()
    body["status"] = {"admission": {"holding": True, "holdUntil": until, "observedGeneration": 1}}
    return fed_view([body], {NAMESPACE: {}})


def review(uid: str, pad: int = 0) -> bytes:
    """A Job's review as the API server writes it (uid, then namespace, then the object);
    `pad` bytes of annotation make it as large as wanted without costing `admit` more."""
    job = JobBuilder("train", NAMESPACE).gpus(1).build()
    if pad:
        job["metadata"]["annotations"] = {"example.com/notes": "x" * pad}
    request = {"uid": uid, "namespace": NAMESPACE, "operation": "CREATE", "object": job}
    return json.dumps({"kind": "AdmissionReview", "request": request}).encode()


def issued(
    ca: tuple[bytes, bytes], common_name: str, usage: x509.ObjectIdentifier
) -> tuple[bytes, bytes]:
    """A certificate for `common_name` signed by `ca` (PEM cert, key), for `usage`."""
    ca_cert = x509.load_pem_x509_certificate(ca[0])
    signer = serialization.load_pem_private_key(ca[1], password=None)
    assert isinstance(signer, ec.EllipticCurvePrivateKey)
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(NOW - dt.timedelta(minutes=5))
        .not_valid_after(NOW + dt.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(common_name)]), critical=False)
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        .sign(signer, hashes.SHA256())
    )
    pem = serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    return cert.public_bytes(serialization.Encoding.PEM), key.private_bytes(
        serialization.Encoding.PEM, *pem
    )


class Server:
    """A Reviews served over TLS in a thread of its own, as the operator serves it."""

    def __init__(self, reviews: Reviews, settings: WebhookSettings, directory: Path) -> None:
        self.port, self.directory = settings.port, directory
        ca = certs.new_ca(NOW)
        (directory / "ca.crt").write_bytes(ca[0])
        cert, key = certs.new_serving(*ca, ["127.0.0.1"], NOW)
        (directory / "tls.crt").write_bytes(cert)
        (directory / "tls.key").write_bytes(key)
        context = server_context(settings.client_ca)
        context.load_cert_chain(directory / "tls.crt", directory / "tls.key")
        self.loop = asyncio.new_event_loop()
        ready = threading.Event()

        async def start() -> None:
            await listen(reviews, settings, context)
            ready.set()

        self.thread = threading.Thread(
            target=lambda: (self.loop.create_task(start()), self.loop.run_forever()), daemon=True
        )
        self.thread.start()
        assert ready.wait(10)

    def connection(self, client: tuple[Path, Path] | None = None) -> http.client.HTTPSConnection:
        context = ssl.create_default_context(cafile=str(self.directory / "ca.crt"))
        if client is not None:
            context.load_cert_chain(*client)
        return http.client.HTTPSConnection("127.0.0.1", self.port, context=context, timeout=10)

    def refused(self, client: tuple[Path, Path] | None = None) -> bool:
        """Whether the server hangs up right after the handshake, before a request (the
        TLS 1.3 client learns only then that its certificate was refused). A served
        client's connection stays open, waiting for its request."""
        connection = self.connection(client)
        connection.timeout = 2
        connection.connect()
        try:
            assert connection.sock is not None
            return connection.sock.recv(1) == b""
        except ssl.SSLError:  # an alert, where the server's TLS sends one
            return True
        except TimeoutError:
            return False
        finally:
            connection.close()

    def post(
        self, body: bytes, client: tuple[Path, Path] | None = None
    ) -> tuple[int, dict[str, Any]]:
        connection = self.connection(client)
        try:
            connection.request("POST", "/hold", body, {"Content-Type": "application/json"})
            response = connection.getresponse()
            return response.status, json.loads(response.read())
        finally:
            connection.close()

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Callable[..., Server]]:
    started: list[tuple[Server, Reviews]] = []

    def serve(settings: WebhookSettings, large: ThreadPoolExecutor | None = None) -> Server:
        reviews = Reviews(holding_view(), settings, large)
        server = Server(reviews, settings, tmp_path)
        started.append((server, reviews))
        return server

    yield serve
    for server, reviews in started:
        server.stop()
        reviews.close()


def outcomes(name: str) -> float:
    return float(ADMISSION.labels(name)._value.get())


def test_small_reviews_are_answered_while_large_ones_wait_and_those_get_an_answer_in_time(
    serve: Callable[..., Server],
) -> None:
    """The large reviews' lane stuck (as behind a dozen 2.6 MiB parses): a small review
    is still held at once; a large one is answered "allowed, unchanged" at the deadline,
    before the API server's timeout, with a warning for the submitter."""
    stuck, lane = threading.Event(), ThreadPoolExecutor(1)
    lane.submit(stuck.wait, 30)
    settings = WebhookSettings(port=free_port(), address="127.0.0.1", timeout=2.0)
    server = serve(settings, lane)
    late = outcomes("deadline")
    try:
        status, small = server.post(review("small-1"))
        assert (status, small["response"]["uid"]) == (200, "small-1")
        assert "patch" in small["response"], "held: decided although the large lane is stuck"
        status, large = server.post(review("large-1", pad=SMALL))
        assert status == 200
        assert large["response"] == {
            "uid": "large-1",
            "allowed": True,
            "warnings": ["trainwarden: not decided within 1.50s: created without a budget check"],
        }
        assert outcomes("deadline") == late + 1
    finally:
        stuck.set()


def test_a_large_review_is_decided_in_the_worker_process_with_the_same_view(
    serve: Callable[..., Server],
) -> None:
    server = serve(WebhookSettings(port=free_port(), address="127.0.0.1", timeout=10))
    status, answer = server.post(review("large-2", pad=SMALL))
    assert status == 200
    assert "TrainingBudget team is exhausted" in answer["response"]["warnings"][0]
    assert answer["response"]["patchType"] == "JSONPatch"


def test_the_request_is_read_where_the_api_server_writes_it() -> None:
    body = review("r-9", pad=10)
    assert namespace_of(body) == NAMESPACE
    tricky = b'{"request":{"uid":"u","operation":"CREATE","object":{"metadata":{"namespace":"b"}}}}'
    assert namespace_of(tricky) is None, "a namespace inside the object is not the request's"
    assert undecided(b'{"request": {"uid": "u-1", "x": 1}}', "deadline", "late").status == 200
    assert undecided(b"{}", "deadline", "late").status == 500, "no uid: the API server fails open"


@pytest.fixture
def pki(tmp_path: Path) -> dict[str, tuple[Path, Path]]:
    """A client CA and three client certificates: one it signed, one it signed for
    another name, and one another CA signed (as an admin's or a kubelet's)."""
    found: dict[str, tuple[Path, Path]] = {}
    client_ca, other_ca = certs.new_ca(NOW), certs.new_ca(NOW)
    (tmp_path / "client-ca.crt").write_bytes(client_ca[0])
    for name, ca, common in (
        ("apiserver", client_ca, "kube-apiserver-webhook-client"),
        ("unnamed", client_ca, "someone-else"),
        ("foreign", other_ca, "kube-apiserver-webhook-client"),
    ):
        cert, key = issued(ca, common, ExtendedKeyUsageOID.CLIENT_AUTH)
        (tmp_path / f"{name}.crt").write_bytes(cert)
        (tmp_path / f"{name}.key").write_bytes(key)
        found[name] = (tmp_path / f"{name}.crt", tmp_path / f"{name}.key")
    return found


def test_with_a_client_ca_only_clients_it_signed_are_answered(
    serve: Callable[..., Server], pki: dict[str, tuple[Path, Path]], tmp_path: Path
) -> None:
    settings = WebhookSettings(
        port=free_port(),
        address="127.0.0.1",
        client_ca=tmp_path / "client-ca.crt",
        client_names=("kube-apiserver-webhook-client",),
    )
    server = serve(settings)
    status, answer = server.post(review("r-1"), pki["apiserver"])
    assert (status, answer["response"]["uid"]) == (200, "r-1")
    answered = sum(ADMISSION.labels(o)._value.get() for o in ("held", "refused"))
    assert not server.refused(pki["apiserver"]), "the control: served, waiting for a request"
    for client in (None, pki["foreign"]):  # none, or one another CA signed
        assert server.refused(client)
        with pytest.raises((ssl.SSLError, ConnectionError)):
            server.post(review("r-2"), client)
    assert sum(ADMISSION.labels(o)._value.get() for o in ("held", "refused")) == answered
    refused = outcomes("refused")
    status, answer = server.post(review("r-3"), pki["unnamed"])
    assert (status, answer) == (403, {"error": "client not allowed"})
    assert outcomes("refused") == refused + 1


def test_without_a_client_ca_any_client_is_served(serve: Callable[..., Server]) -> None:
    server = serve(WebhookSettings(port=free_port(), address="127.0.0.1"))
    assert server.post(review("r-4"))[0] == 200


def test_the_flags_of_client_authentication(tmp_path: Path) -> None:
    (tmp_path / "ca.crt").write_bytes(certs.new_ca(NOW)[0])
    args = cli.parser().parse_args(
        ["run", "--webhook-port=9443", f"--webhook-client-ca={tmp_path / 'ca.crt'}",
         "--webhook-client-name=kube-apiserver", "--webhook-timeout=5"]
    )  # fmt: skip
    settings = run_command._webhook(args)
    assert settings is not None
    assert (settings.client_ca, settings.client_names) == (tmp_path / "ca.crt", ("kube-apiserver",))
    assert settings.timeout == 5.0
    named_only = ["run", "--webhook-port=9443", "--webhook-client-name=kube-apiserver"]
    assert cli.main(named_only) == 2, "a name without a CA would refuse every client"
    with pytest.raises(SystemExit):
        cli.parser().parse_args(["run", f"--webhook-client-ca={tmp_path / 'missing.crt'}"])
