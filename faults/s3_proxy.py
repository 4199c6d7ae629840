"""A fault-injecting proxy in front of the cluster's S3 server: a CheckpointPolicy's
`storage.s3.endpoint` points here, and the scenario decides what each request meets.

Modes: "up" (forwarded as is, the Host header kept, so the client's signature holds),
"error" (500 InternalError, as S3 answers under load), "slow" (forwarded after
`slow_seconds`), "drop" (forwarded, then the connection closed without an answer: the
server acted, the client does not know), "pages" (object listings cut into pages of
`page_size` keys, re-signed with the suite's own keys, and `between_pages` called once,
before the first next page is fetched: the listing changes between pages). "error" and
"drop" meet a share `rate` of the requests.

Every DeleteObjects request is recorded with the keys it named and which of them the
client was told were deleted, so a key deleted again after that is counted (`doubles`).
"""

import http.client
import random
import threading
import time
import urllib.parse
import xml.etree.ElementTree as ET
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

MODES = ("up", "error", "slow", "drop", "pages")
ERROR = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>InternalError</Code>'
    b"<Message>injected by the fault proxy</Message></Error>"
)
HOP = {"connection", "keep-alive", "transfer-encoding", "proxy-connection", "upgrade"}


def keys_of(xml: bytes, element: str) -> list[str]:
    """The <Key> of every `element` (Object, Deleted, Error) in an S3 XML body."""
    try:
        root = ET.fromstring(xml)
    except ET.ParseError:
        return []
    found = []
    for node in root.iter():
        if node.tag.rsplit("}", 1)[-1] != element:
            continue
        for child in node:
            if child.tag.rsplit("}", 1)[-1] == "Key" and child.text is not None:
                found.append(child.text)
    return found


def confirmed(request: bytes, status: int, answer: bytes) -> set[str]:
    """The keys a DeleteObjects answer tells the client are gone: every key asked for
    (a quiet request names only failures) but those with an <Error>, on a 200."""
    if status != 200:
        return set()
    return set(keys_of(request, "Object")) - set(keys_of(answer, "Error"))


def doubles(deletions: list[tuple[list[str], set[str]]]) -> set[str]:
    """Keys named by a DeleteObjects request after an earlier one was confirmed to the
    client: a deletion repeated although it was known to be done."""
    done: set[str] = set()
    again: set[str] = set()
    for asked, told in deletions:
        again |= done & set(asked)
        done |= told
    return again


def paged_query(query: str, page_size: int) -> tuple[str, bool]:
    """A ListObjectsV2 query with `max-keys` set to `page_size`, and whether it asks for
    a next page (has a continuation token)."""
    pairs = [(k, v) for k, v in urllib.parse.parse_qsl(query, keep_blank_values=True)]
    pairs = [(k, v) for k, v in pairs if k != "max-keys"] + [("max-keys", str(page_size))]
    token = any(k == "continuation-token" for k, _ in pairs)
    return urllib.parse.urlencode(sorted(pairs), quote_via=urllib.parse.quote), token


@dataclass
class Settings:
    """What requests meet now (changed by the scenario while requests are in flight)."""

    mode: str = "up"
    rate: float = 1.0
    slow_seconds: float = 3.0
    page_size: int = 2
    between_pages: Callable[[], None] | None = None
    at_delete: Callable[[str], bool] | None = None
    """Called with "before" as a DeleteObjects request arrives and with "after" once the
    server answered it; True: the client is gone (the operator was just killed), so the
    request is not forwarded ("before") or its answer never delivered ("after")."""
    faults: int = 0
    """Requests that met a fault."""
    deletions: list[tuple[list[str], set[str]]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


class _Handler(BaseHTTPRequestHandler):
    server: "_Server"
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        self._handle()

    do_PUT = do_POST = do_DELETE = do_HEAD = do_GET

    def _handle(self) -> None:
        proxy = self.server.proxy
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        mode = proxy.fault()
        if mode == "error":
            self._answer(500, {"Content-Type": "application/xml"}, ERROR)
            return
        if mode == "slow":
            time.sleep(proxy.settings.slow_seconds)  # the fault itself
        path, _, query = self.path.partition("?")
        deleting = self.command == "POST" and "delete" in urllib.parse.parse_qs(query, True)
        hook = proxy.settings.at_delete if deleting else None
        if hook is not None and hook("before"):
            with proxy.settings.lock:
                proxy.settings.deletions.append((keys_of(body, "Object"), set()))
            self.close_connection = True  # never reached the server
            return
        if proxy.settings.mode == "pages" and "list-type=2" in query:
            status, headers, answer = proxy.listing(path, query)
        else:
            status, headers, answer = proxy.forward(self.command, self.path, self.headers, body)
        delivered = mode != "drop" and not (hook is not None and hook("after"))
        if deleting:
            told = confirmed(body, status, answer) if delivered else set()
            with proxy.settings.lock:
                proxy.settings.deletions.append((keys_of(body, "Object"), told))
        if not delivered:
            self.close_connection = True  # the server acted; the client hears nothing
            return
        self._answer(status, headers, answer)

    def _answer(self, status: int, headers: dict[str, str], body: bytes) -> None:
        self.send_response(status)
        for name, value in headers.items():
            if name.lower() not in HOP and name.lower() != "content-length":
                self.send_header(name, value)
        length = headers.get("Content-Length") if self.command == "HEAD" else None
        self.send_header("Content-Length", length or str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def log_message(self, *_: Any) -> None:
        return


class _Server(ThreadingHTTPServer):
    allow_reuse_address = True
    daemon_threads = True
    proxy: "S3FaultProxy"

    def handle_error(self, request: Any, client_address: Any) -> None:
        return  # a client that gave up (a dropped or slow answer): expected


class S3FaultProxy:
    def __init__(
        self, target: str, access_key: str, secret_key: str, *, seed: int, region: str = "us-east-1"
    ) -> None:
        parsed = urllib.parse.urlsplit(target)
        self.host, self.port_of_target = parsed.hostname or "127.0.0.1", parsed.port or 80
        self.credentials = Credentials(access_key, secret_key)
        self.region = region
        self.settings = Settings()
        self._rng = random.Random(seed)
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.proxy = self
        self.port = self._server.server_address[1]
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def set(self, mode: str, *, rate: float = 1.0) -> None:
        assert mode in MODES, mode
        self.settings.mode, self.settings.rate = mode, rate

    def fault(self) -> str:
        """The fault this request meets ("up": none)."""
        s = self.settings
        with s.lock:
            mode = s.mode
            if mode in ("error", "drop") and self._rng.random() >= s.rate:
                return "up"
            if mode in ("error", "drop", "slow"):
                s.faults += 1
                return mode
        return "up"

    def forward(
        self, method: str, target: str, headers: Any, body: bytes
    ) -> tuple[int, dict[str, str], bytes]:
        kept = {k: v for k, v in headers.items() if k.lower() not in HOP}
        connection = http.client.HTTPConnection(self.host, self.port_of_target, timeout=60)
        try:
            connection.request(method, target, body=body or None, headers=kept)
            response = connection.getresponse()
            answer = response.read()
            return response.status, dict(response.getheaders()), answer
        finally:
            connection.close()

    def listing(self, path: str, query: str) -> tuple[int, dict[str, str], bytes]:
        """One page of `page_size` keys, re-signed; the hook runs before the first next
        page is asked of the server."""
        paged, next_page = paged_query(query, self.settings.page_size)
        hook = self.settings.between_pages
        if next_page and hook is not None:
            self.settings.between_pages = None
            hook()
        url = f"http://{self.host}:{self.port_of_target}{path}?{paged}"
        request = AWSRequest(method="GET", url=url, headers={})
        S3SigV4Auth(self.credentials, "s3", self.region).add_auth(request)
        prepared = request.prepare()
        return self.forward("GET", f"{path}?{paged}", dict(prepared.headers), b"")

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
