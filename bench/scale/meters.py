"""What each measured client costs: CPU and RSS from /proc, requests counted by the API
server (its flow-control metrics, one FlowSchema per client), bytes counted by the proxy."""

from __future__ import annotations

import json
import os
import re
import socket
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from scale.kube import Kube

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
_SAMPLE = re.compile(r"^(\w+)\{([^}]*)\} ([0-9.eE+-]+)$")
_LABEL = re.compile(r'(\w+)="([^"]*)"')


def cpu_seconds(pid: int) -> float | None:
    """User + system time of the process and its reaped children."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    values = stat.rsplit(")", 1)[1].split()
    return sum(int(v) for v in values[11:15]) / CLOCK_TICKS


def rss_bytes(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def flow_counters(metrics: str, metric: str) -> dict[str, float]:
    """Sum of `metric` per flow_schema label, from the API server's /metrics text."""
    found: dict[str, float] = {}
    for line in metrics.splitlines():
        if not line.startswith(metric + "{"):
            continue
        match = _SAMPLE.match(line)
        if not match:
            continue
        labels = dict(_LABEL.findall(match.group(2)))
        flow = labels.get("flow_schema", "")
        found[flow] = found.get(flow, 0.0) + float(match.group(3))
    return found


def proxy_counters(port: int) -> dict[str, dict[str, int]]:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        data = b""
        while chunk := sock.recv(1 << 16):
            data += chunk
    loaded: dict[str, dict[str, int]] = json.loads(data)
    return loaded


@dataclass
class Reading:
    """Every cumulative counter at one instant."""

    t: float
    cpu: dict[str, float] = field(default_factory=dict)
    requests: dict[str, float] = field(default_factory=dict)
    rejected: dict[str, float] = field(default_factory=dict)
    bytes_up: dict[str, int] = field(default_factory=dict)
    bytes_down: dict[str, int] = field(default_factory=dict)
    rss: dict[str, int] = field(default_factory=dict)


@dataclass
class Usage:
    """One client's cost over a window."""

    seconds: float
    cores: float | None
    rss_peak_mib: float | None
    requests: float | None
    requests_per_min: float | None
    rejected: float | None
    bytes: float | None
    bytes_per_min: float | None


class Meters:
    """Samples RSS every second in a thread; reads the cumulative counters on demand."""

    def __init__(self, admin: Kube, proxy_port: int, flows: dict[str, str]) -> None:
        self._admin, self._proxy_port, self._flows = admin, proxy_port, flows
        self._pids: dict[str, int] = {}
        self._rss: list[tuple[float, str, int]] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True, name="rss")
        self._thread.start()

    def watch_process(self, name: str, pid: int) -> None:
        with self._lock:
            self._pids[name] = pid

    def forget_process(self, name: str) -> None:
        with self._lock:
            self._pids.pop(name, None)

    def stop(self) -> None:
        self._stop.set()

    def _sample(self) -> None:
        while not self._stop.wait(1.0):
            with self._lock:
                pids = dict(self._pids)
            now = time.time()
            for name, pid in pids.items():
                rss = rss_bytes(pid)
                if rss is not None:
                    with self._lock:
                        self._rss.append((now, name, rss))

    def read(self) -> Reading:
        reading = Reading(time.time())
        with self._lock:
            pids = dict(self._pids)
        for name, pid in pids.items():
            cpu, rss = cpu_seconds(pid), rss_bytes(pid)
            if cpu is not None:
                reading.cpu[name] = cpu
            if rss is not None:
                reading.rss[name] = rss
        try:
            text = self._admin.metrics_text()
            dispatched = flow_counters(text, "apiserver_flowcontrol_dispatched_requests_total")
            rejected = flow_counters(text, "apiserver_flowcontrol_rejected_requests_total")
            for name, flow in self._flows.items():
                reading.requests[name] = dispatched.get(flow, 0.0)
                reading.rejected[name] = rejected.get(flow, 0.0)
        except Exception:
            pass
        try:
            for name, counts in proxy_counters(self._proxy_port).items():
                reading.bytes_up[name] = counts["up"]
                reading.bytes_down[name] = counts["down"]
        except OSError:
            pass
        return reading

    def usage(self, name: str, start: Reading, end: Reading) -> Usage:
        seconds = max(1e-9, end.t - start.t)
        per_min = 60 / seconds

        def delta(
            a: dict[str, float] | dict[str, int], b: dict[str, float] | dict[str, int]
        ) -> float | None:
            return float(b[name] - a[name]) if name in a and name in b else None

        # A process started within the window used no CPU before it.
        cpu = end.cpu[name] - start.cpu.get(name, 0.0) if name in end.cpu else None
        requests = delta(start.requests, end.requests)
        up, down = delta(start.bytes_up, end.bytes_up), delta(start.bytes_down, end.bytes_down)
        total = up + down if up is not None and down is not None else None
        with self._lock:
            peaks = [rss for t, n, rss in self._rss if n == name and start.t <= t <= end.t]
        peaks += [r.rss[name] for r in (start, end) if name in r.rss]
        return Usage(
            seconds=seconds,
            cores=cpu / seconds if cpu is not None else None,
            rss_peak_mib=max(peaks) / 2**20 if peaks else None,
            requests=requests,
            requests_per_min=requests * per_min if requests is not None else None,
            rejected=delta(start.rejected, end.rejected),
            bytes=total,
            bytes_per_min=total * per_min if total is not None else None,
        )
