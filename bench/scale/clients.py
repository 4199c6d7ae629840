"""The processes the benchmark starts: the counting proxy, the operator (exactly as a user
starts it), the naive janitor, the bare watcher and the churn generator."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from scale.cluster import ROOT

BENCH_DIR = ROOT / "bench"
PYTHON = ROOT / ".venv" / "bin" / "python"
TRAINWARDEN = ROOT / ".venv" / "bin" / "trainwarden"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class Process:
    """A started process; JSON lines it prints on stdout are kept with the time they came."""

    name: str
    popen: subprocess.Popen[bytes]
    log: Path
    lines: list[tuple[float, dict[str, Any]]] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def read_stdout(self) -> None:
        assert self.popen.stdout is not None
        for raw in self.popen.stdout:
            try:
                line = json.loads(raw)
            except ValueError:
                continue
            with self._lock:
                self.lines.append((time.time(), line))

    def json_lines(self) -> list[tuple[float, dict[str, Any]]]:
        with self._lock:
            return list(self.lines)

    def tail(self, count: int = 15) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-count:])
        except OSError:
            return ""

    def stop(self, timeout: float = 20) -> None:
        if self.popen.poll() is not None:
            return
        self.popen.terminate()
        try:
            self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait()


def spawn(
    name: str, command: list[str], workdir: Path, *, env: dict[str, str] | None = None,
    json_stdout: bool = True,
) -> Process:  # fmt: skip
    log = workdir / f"{name}.log"
    sink = log.open("ab")
    popen = subprocess.Popen(
        command,
        stdout=subprocess.PIPE if json_stdout else sink,
        stderr=sink if json_stdout else subprocess.STDOUT,
        env={**os.environ, "PYTHONPATH": str(BENCH_DIR), **(env or {})},
        cwd=ROOT,
    )
    sink.close()
    process = Process(name, popen, log)
    if json_stdout:
        threading.Thread(target=process.read_stdout, daemon=True, name=f"{name}-out").start()
    return process


def module(name: str, *args: str) -> list[str]:
    return [str(PYTHON), "-m", f"scale.{name}", *args]


def start_proxy(
    workdir: Path, api_port: int, names: list[str]
) -> tuple[Process, dict[str, int], int]:
    ports = {name: free_port() for name in names}
    control = free_port()
    listen = [f"--listen={name}={port}" for name, port in ports.items()]
    process = spawn(
        "proxy",
        module("proxy", f"--upstream=127.0.0.1:{api_port}", f"--control={control}", *listen),
        workdir,
    )
    deadline = time.monotonic() + 30
    while not process.json_lines():
        if not process.alive() or time.monotonic() > deadline:
            raise RuntimeError(f"the counting proxy did not start:\n{process.tail()}")
        time.sleep(0.1)
    return process, ports, control


@dataclass
class Operator:
    process: Process
    health_url: str
    started: float
    metrics_url: str


def start_operator(workdir: Path, kubeconfig: Path, prometheus_url: str) -> Operator:
    """`trainwarden run` with the flags e2e/harness.py start_operator uses, but not its
    --status-interval (30 s, for tests that watch figures move): the bench measures the
    default a user runs (5 min)."""
    metrics_port, health_port = free_port(), free_port()
    started = time.time()
    process = spawn(
        "operator",
        [
            str(TRAINWARDEN),
            "run",
            "--metrics-address=127.0.0.1",
            f"--metrics-port={metrics_port}",
            "--health-address=127.0.0.1",
            f"--health-port={health_port}",
            f"--prometheus-url={prometheus_url}",
        ],
        workdir,
        env={"KUBECONFIG": str(kubeconfig)},
        json_stdout=False,
    )
    health = f"http://127.0.0.1:{health_port}/healthz"
    return Operator(process, health, started, f"http://127.0.0.1:{metrics_port}/metrics")


def healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return bool(response.status == 200)
    except OSError:
        return False


def start_janitor(workdir: Path, kubeconfig: Path, interval: int) -> Process:
    return spawn(
        "janitor",
        module("janitor", f"--kubeconfig={kubeconfig}", f"--interval={interval}"),
        workdir,
    )


def start_watcher(workdir: Path, kubeconfig: Path) -> tuple[Process, Path]:
    events = workdir / "watcher-events.jsonl"
    process = spawn(
        "watcher", module("watcher", f"--kubeconfig={kubeconfig}", f"--events={events}"), workdir
    )
    return process, events


def start_churn(
    workdir: Path, kubeconfig: Path, *, phase: str, rate: float, seconds: int,
    namespaces: list[str], node_prefix: str, nodes: int, lifetime: int,
) -> tuple[Process, Path]:  # fmt: skip
    log = workdir / f"churn-{phase}.jsonl"
    process = spawn(
        f"churn-{phase}",
        module(
            "churn",
            f"--kubeconfig={kubeconfig}",
            f"--rate={rate}",
            f"--seconds={seconds}",
            f"--phase={phase}",
            f"--namespaces={','.join(namespaces)}",
            f"--nodes={node_prefix}",
            f"--node-count={nodes}",
            f"--lifetime={lifetime}",
            f"--log={log}",
        ),
        workdir,
    )
    return process, log
