"""Helpers for tests against the real local cluster: no fakes, deadlines instead of sleeps."""

import json
import subprocess
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from kubernetes import client

ROOT = Path(__file__).resolve().parent.parent
CLUSTER_DIR = ROOT / ".cluster"
T = TypeVar("T")


def wait_for(
    probe: Callable[[], T | None], *, timeout: float = 60, every: float = 0.5, what: str = ""
) -> T:
    """Poll until probe returns something truthy; fail with `what` at the deadline.

    Exceptions are treated as "not yet" (the API may be briefly unavailable), except an
    AssertionError, which means the probe saw something that will never get better.
    """
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        try:
            value = probe()
            if value:
                return value
        except AssertionError:
            raise
        except Exception as error:
            last_error = error
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}; last error: {last_error}")


@dataclass(frozen=True)
class Cluster:
    kubeconfig: Path
    prometheus_url: str
    dcgm_exporter_url: str
    api: client.ApiClient

    def kubectl(self, *args: str, stdin: str | None = None, check: bool = True) -> str:
        result = subprocess.run(
            [str(CLUSTER_DIR / "bin" / "kubectl"), "--kubeconfig", str(self.kubeconfig), *args],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        if check and result.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed: {result.stderr}")
        return result.stdout + (result.stderr if not check else "")

    def prometheus_query(self, query: str) -> list[dict[str, Any]]:
        url = f"{self.prometheus_url}/api/v1/query?" + urllib.parse.urlencode({"query": query})
        with urllib.request.urlopen(url, timeout=10) as response:
            body = json.load(response)
        assert body["status"] == "success", body
        result: list[dict[str, Any]] = body["data"]["result"]
        return result


def read_env(path: Path) -> dict[str, str]:
    pairs = (line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)
    return {key.strip(): value.strip().strip('"') for key, value in pairs}


@dataclass(frozen=True)
class Operator:
    metrics_url: str
    health_url: str
    log: Path
    process: subprocess.Popen[bytes]

    def log_lines(self) -> list[str]:
        return self.log.read_text().splitlines()
