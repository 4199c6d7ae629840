"""The fault suite's own pure parts (make faults runs only against the cluster): the
table it prints, how it counts flips of a field, and the fault proxy's modes."""

import json
import socket
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler
from typing import Any

import pytest

from faults.kit import History
from faults.proxy import FaultProxy
from faults.table import Row, render
from faults.tcp_proxy import TcpFaultProxy
from httpserve import serving


def test_the_table_counts_every_column_and_notes_follow() -> None:
    row = Row("SIGKILL during budget suspension", runs=2, expected=4, taken=4)
    row.add(Row("x", runs=1, expected=2, taken=1, lost=1, usage_error=0.4, notes=["late"]))
    assert (row.runs, row.expected, row.taken, row.lost, row.usage_error) == (3, 6, 5, 1, 0.4)
    assert not row.clean
    text = render([row])
    header, rule, line, note = text.splitlines()
    assert header.startswith("| scenario")
    assert set(rule) <= {"|", "-"}
    assert [c.strip() for c in line.strip("|").split("|")] == [
        "SIGKILL during budget suspension", "3", "6", "5", "0", "1", "0", "0.40",
    ]  # fmt: skip
    assert note == "- SIGKILL during budget suspension: late"


def test_a_clean_row_needs_every_expected_action_taken() -> None:
    assert Row("s", expected=2, taken=2).clean
    assert not Row("s", expected=2, taken=1).clean
    assert not Row("s", expected=2, taken=2, double=1).clean


def test_history_counts_flips_not_repeats() -> None:
    h = History()
    for value in (False, False, True, True, False, True):
        h.see(value)
    assert len(h.flips(True)) == 2
    assert len(h.flips(False)) == 1
    assert h.current is True
    created_suspended = History()
    created_suspended.see(True)
    assert created_suspended.flips(True) == [], "its first value is not an action"


class _Backend(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        if "series" in self.path:
            series = [{"metric": {"pod": str(i)}, "values": []} for i in range(4)]
            body = json.dumps({"status": "success", "data": {"result": series}}).encode()
        else:
            body = json.dumps({"status": "success", "path": self.path}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_: Any) -> None:
        return


@pytest.fixture
def proxy() -> Any:
    with serving(_Backend) as backend:
        fault = FaultProxy(backend, slow_seconds=0.5)
        yield fault
        fault.close()


def _get(url: str, timeout: float = 5) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url + "/api/v1/query_range?q=1", timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def test_the_proxy_forwards_refuses_errs_and_slows(proxy: FaultProxy) -> None:
    assert _get(proxy.url) == (200, b'{"status": "success", "path": "/api/v1/query_range?q=1"}')
    proxy.set("down")
    with pytest.raises(urllib.error.URLError):
        _get(proxy.url)
    proxy.set("error")
    status, body = _get(proxy.url)
    assert status == 503
    assert body.startswith(b"<html>")
    proxy.set("slow")
    began = time.monotonic()
    assert _get(proxy.url)[0] == 200
    assert time.monotonic() - began >= 0.5
    with pytest.raises(TimeoutError):
        _get(proxy.url, timeout=0.2)


def test_the_proxy_answers_in_part(proxy: FaultProxy) -> None:
    proxy.set("partial")
    with urllib.request.urlopen(proxy.url + "/api/v1/query_range?series=1", timeout=5) as r:
        result = json.loads(r.read())["data"]["result"]
    assert [s["metric"]["pod"] for s in result] == ["0", "2"]
    assert _get(proxy.url)[0] == 200, "an answer without series passes as it is"
    assert proxy.was_up(time.monotonic(), time.monotonic()), "partial answers are answers"


def test_the_proxy_remembers_when_queries_could_be_answered(proxy: FaultProxy) -> None:
    before = time.monotonic()
    proxy.set("down")
    down = time.monotonic()
    assert not proxy.was_up(down, down), "down, and not up since"
    proxy.set("up")
    assert proxy.was_up(before - 1, before), "up before the outage"
    assert proxy.was_up(down, time.monotonic()), "up again within the interval"


def _echo_server() -> tuple[socket.socket, int]:
    server = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            threading.Thread(target=_echo, args=(conn,), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    return server, server.getsockname()[1]


def _echo(conn: socket.socket) -> None:
    with conn:
        while data := conn.recv(1024):
            conn.sendall(data)


def _round_trip(port: int, payload: bytes, conn: socket.socket | None = None) -> bytes:
    conn = conn or socket.create_connection(("127.0.0.1", port), timeout=5)
    conn.sendall(payload)
    return conn.recv(1024)


def _refused(port: int, conn: socket.socket | None = None) -> bool:
    """Whether the connection is dead: reset, or closed before an answer."""
    try:
        return _round_trip(port, b"x", conn) == b""
    except (ConnectionResetError, BrokenPipeError):
        return True


def test_the_tcp_proxy_cuts_open_connections_refuses_new_ones_and_heals() -> None:
    """The API server partition of area "api": an open watch sees a reset, a new request
    sees a reset, and after the heal requests go through again."""
    server, port = _echo_server()
    proxy = TcpFaultProxy(port)
    try:
        open_conn = socket.create_connection(("127.0.0.1", proxy.port), timeout=5)
        assert _round_trip(proxy.port, b"ping", open_conn) == b"ping"
        proxy.set_mode("cut")
        assert _refused(proxy.port, open_conn), "an open connection is reset"
        assert _refused(proxy.port), "a new one is reset"
        proxy.set_mode("up")
        assert _round_trip(proxy.port, b"healed") == b"healed"
    finally:
        proxy.stop()
        server.close()


def test_the_skew_area_reads_the_servers_stamp_of_the_newest_status_write() -> None:
    """Usage is judged at the API server's time of the write, not the operator's."""
    from faults.clock_skew import status_written_at

    budget = {
        "metadata": {
            "managedFields": [
                {"manager": "kubectl", "time": "2026-12-01T12:00:09Z"},
                {"manager": "trainwarden", "subresource": "status", "time": "2026-12-01T12:00:05Z"},
                {"manager": "other", "subresource": "status", "time": "2026-12-01T12:00:07Z"},
            ]
        }
    }
    written = status_written_at(budget)
    assert written is not None
    assert written.isoformat() == "2026-12-01T12:00:07+00:00"
    assert status_written_at({"metadata": {}}) is None


def test_the_upgrade_area_compares_records_by_uid_and_time_in_any_order() -> None:
    from faults.upgrade import entries, used_seconds

    def rec(uid: str, at: str) -> dict[str, Any]:
        return {"ref": {"uid": uid, "name": uid}, "suspendedAt": at}

    one = {"suspended": [rec("b", "t2"), rec("a", "t1")], "used": {"acceleratorHours": 0.5}}
    two = {"suspended": [rec("a", "t1"), rec("b", "t2")]}
    assert entries(one) == entries(two) == [("a", "t1"), ("b", "t2")]
    assert entries({}) == []
    assert used_seconds(one) == 1800.0
    assert used_seconds({}) == 0.0
