"""A fault-injecting HTTP proxy in front of Prometheus: the operator's --prometheus-url
points here, and the scenario decides what each query meets.

Modes: "up" (forwarded as is), "down" (the port is closed: connection refused, as when
Prometheus is not running), "error" (503 with an HTML body, as a load balancer says
when its backend is gone), "slow" (an answer only after `slow_seconds`, past the
operator's 10 s timeout), "partial" (answered, but every other series of the result left
out, as when some exporters' targets are down: those pods are unknown, never idle).
"""

import json
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MODES = ("up", "down", "error", "slow", "partial")
ANSWERED = ("up", "partial")


class _Handler(BaseHTTPRequestHandler):
    server: "_Server"

    def do_GET(self) -> None:
        proxy = self.server.proxy
        proxy.requests += 1
        if proxy.mode == "error":
            self._answer(503, b"<html>503 Service Unavailable</html>", "text/html")
            return
        if proxy.mode == "slow":
            time.sleep(proxy.slow_seconds)
        try:
            with urllib.request.urlopen(proxy.target + self.path, timeout=30) as response:
                body, status = response.read(), response.status
                kind = response.headers.get("Content-Type", "application/json")
        except OSError as error:
            self._answer(502, str(error).encode(), "text/plain")
            return
        if proxy.mode == "partial":
            body = _half(body)
        self._answer(status, body, kind)

    def _answer(self, status: int, body: bytes, kind: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_: Any) -> None:
        return


def _half(body: bytes) -> bytes:
    """Every other series of a query's result, or the body as it was if it has none."""
    try:
        answer = json.loads(body)
        answer["data"]["result"] = answer["data"]["result"][::2]
    except (ValueError, KeyError, TypeError):
        return body
    return json.dumps(answer).encode()


class _Server(ThreadingHTTPServer):
    allow_reuse_address = True
    daemon_threads = True
    proxy: "FaultProxy"

    def handle_error(self, request: Any, client_address: Any) -> None:
        return  # a client that gave up on a slow answer: expected, not worth a traceback


class FaultProxy:
    def __init__(self, target: str, *, slow_seconds: float = 15) -> None:
        self.target = target.rstrip("/")
        self.slow_seconds = slow_seconds
        self.mode = "up"
        self.requests = 0
        self._server = self._listen(0)
        self.port = self._server.server_address[1]
        self._changes: list[tuple[float, str]] = [(time.monotonic(), "up")]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _listen(self, port: int) -> _Server:
        server = _Server(("127.0.0.1", port), _Handler)
        server.proxy = self
        threading.Thread(target=server.serve_forever, daemon=True).start()
        return server

    def set(self, mode: str) -> None:
        assert mode in MODES, mode
        if mode == self.mode:
            return
        if mode == "down":
            self._server.shutdown()
            self._server.server_close()
        elif self.mode == "down":
            self._server = self._listen(self.port)
        self.mode = mode
        self._changes.append((time.monotonic(), mode))

    def was_up(self, start: float, end: float) -> bool:
        """Whether queries could be answered (in whole or in part) at any moment in
        [start, end]."""
        mode_then = "up"
        for at, mode in self._changes:
            if at <= start:
                mode_then = mode
            elif at <= end and mode in ANSWERED:
                return True
        return mode_then in ANSWERED

    def close(self) -> None:
        if self.mode != "down":
            self._server.shutdown()
            self._server.server_close()
