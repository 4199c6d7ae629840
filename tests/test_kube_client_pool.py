"""The API client keeps a connection for each call it may have in flight: past urllib3's
default pool (5 per cpu) every extra connection was discarded on return ("connection pool is
full") and the next call paid a new handshake."""

import json
import logging
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler
from typing import Any

import pytest
from kubernetes import client

from httpserve import serving
from trainwarden.adapters.kube_client import API_THREADS, named_client


class _Slow(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: connections go back to the pool

    def do_GET(self) -> None:
        time.sleep(0.2)  # long enough for every caller to hold a connection at once
        fields = ("buildDate", "compiler", "gitCommit", "gitTreeState", "gitVersion")
        fields += ("goVersion", "major", "minor", "platform")
        body = json.dumps(dict.fromkeys(fields, "x")).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_: Any) -> None:
        return


@pytest.fixture
def server() -> Iterator[str]:
    with serving(_Slow) as url:
        yield url


def test_as_many_calls_as_api_threads_keep_their_connections(
    server: str, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    default = client.Configuration()
    default.host = server
    monkeypatch.setattr(client.Configuration, "_default", default)
    api = named_client()
    version = client.VersionApi(api)
    with caplog.at_level(logging.WARNING, logger="urllib3.connectionpool"):
        for _ in range(2):  # the second round reuses what the first kept
            with ThreadPoolExecutor(API_THREADS) as pool:
                list(pool.map(lambda _: version.get_code(), range(API_THREADS)))
    full = [r.getMessage() for r in caplog.records if "pool is full" in r.getMessage()]
    assert not full, full[:2]
