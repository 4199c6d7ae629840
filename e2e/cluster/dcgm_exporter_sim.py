#!/usr/bin/env python3
"""Stand-in for NVIDIA dcgm-exporter, for the trainwarden local e2e cluster.

The only simulated piece of the harness: kwok pods have no GPUs, so tests declare what
utilization each pod's GPUs report and this server exposes it the way dcgm-exporter
does (with pod attribution, i.e. the kubelet pod-resources mapping enabled), for
Prometheus to scrape.

GET    /metrics[?view=serviceMonitor]
                                     Prometheus text format:
                                       DCGM_FI_DEV_GPU_UTIL          gauge, 0-100 (%)
                                       DCGM_FI_PROF_GR_ENGINE_ACTIVE gauge, 0-1 (ratio)
                                       DCGM_FI_PROF_SM_ACTIVE        gauge, 0-1 (ratio)
                                     one series per (pod, GPU), labels exactly as
                                     dcgm-exporter 3.x: gpu, UUID, pci_bus_id,
                                     device, modelName, Hostname,
                                     DCGM_FI_DRIVER_VERSION, container, namespace,
                                     pod. Each pod is in one view: "honorLabels"
                                     (the default, at /metrics; the local
                                     Prometheus keeps the labels as they are) or
                                     "serviceMonitor" (at ?view=serviceMonitor,
                                     scraped the way GPU Operator's ServiceMonitor
                                     is with honorLabels false: the consumer's
                                     labels arrive as exported_namespace,
                                     exported_pod, exported_container).
PUT    /gpus/<namespace>/<pod>       JSON body, only "utilization" required:
                                       {"utilization": 37.5, "gpus": 2,
                                        "container": "trainer", "hostname": "gpu-a100-0",
                                        "modelName": "NVIDIA A100-SXM4-80GB",
                                        "engineActive": 0.4, "perGpu": [90, 0],
                                        "view": "serviceMonitor"}
                                     engineActive defaults to utilization/100; perGpu
                                     (one value per GPU, 0-100) overrides utilization
                                     per GPU, and SM activity follows it. A repeated
                                     PUT keeps the pod's GPU indices/UUIDs when it asks
                                     for the same hostname and count.
DELETE /gpus/<namespace>/<pod>       drop that pod's series (simulates missing data);
                                     {"deleted": 1|0}, never 404
DELETE /gpus                         drop everything
GET    /gpus                         current state as JSON
GET    /healthz                      "ok"

Only the Python standard library is used. Usage:
    dcgm_exporter_sim.py [--host 127.0.0.1] [--port 19400]
"""

from __future__ import annotations

import argparse
import json
import re
import threading
import uuid
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlsplit

DEFAULT_GPUS = 1
DEFAULT_CONTAINER = "main"
DEFAULT_HOSTNAME = "kwok-node"
DEFAULT_MODEL = "NVIDIA A100-SXM4-80GB"
DRIVER_VERSION = "550.90.07"
VIEWS = ("honorLabels", "serviceMonitor")
MAX_GPUS_PER_HOST = 64

_UUID_NS = uuid.UUID("6f1c3a52-3c1e-4bb5-9d8e-7f3f1d2a9e10")
_POD_PATH = re.compile(r"^/gpus/([^/]+)/([^/]+)/?$")


def gpu_uuid(hostname: str, index: int) -> str:
    """Stable fake UUID per (host, GPU index), formatted like nvidia-smi's."""
    return "GPU-" + str(uuid.uuid5(_UUID_NS, f"{hostname}/{index}"))


def escape_label(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def fmt_value(value: float) -> str:
    return repr(float(value)) if value != int(value) else str(int(value))


class State:
    """Per-pod GPU assignments; every access holds the lock."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # (namespace, pod) -> entry dict
        self._pods: dict[tuple[str, str], dict] = {}

    def _used_indices(self, hostname: str, skip: tuple[str, str]) -> set[int]:
        used: set[int] = set()
        for key, entry in self._pods.items():
            if key != skip and entry["hostname"] == hostname:
                used.update(g["gpu"] for g in entry["gpuList"])
        return used

    def put(self, namespace: str, pod: str, body: dict) -> dict:
        util = body.get("utilization")
        if isinstance(util, bool) or not isinstance(util, (int, float)) or not 0 <= util <= 100:
            raise ValueError('"utilization" is required and must be a number in [0, 100]')
        gpus = body.get("gpus", DEFAULT_GPUS)
        if (
            isinstance(gpus, bool)
            or not isinstance(gpus, int)
            or not 1 <= gpus <= MAX_GPUS_PER_HOST
        ):
            raise ValueError(f'"gpus" must be an integer in [1, {MAX_GPUS_PER_HOST}]')
        engine = body.get("engineActive", util / 100.0)
        if isinstance(engine, bool) or not isinstance(engine, (int, float)) or not 0 <= engine <= 1:
            raise ValueError('"engineActive" must be a number in [0, 1]')
        per_gpu = body.get("perGpu")
        if per_gpu is not None and (
            not isinstance(per_gpu, list)
            or len(per_gpu) != gpus
            or not all(
                isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v <= 100
                for v in per_gpu
            )
        ):
            raise ValueError('"perGpu" must list one number in [0, 100] per GPU')
        strings = {}
        for field, default in (
            ("container", DEFAULT_CONTAINER),
            ("hostname", DEFAULT_HOSTNAME),
            ("modelName", DEFAULT_MODEL),
            ("view", VIEWS[0]),
        ):
            value = body.get(field, default)
            if not isinstance(value, str):
                raise ValueError(f'"{field}" must be a string')
            strings[field] = value
        if strings["view"] not in VIEWS:
            raise ValueError(f'"view" must be one of {", ".join(VIEWS)}')
        key = (namespace, pod)
        with self._lock:
            old = self._pods.get(key)
            if old and old["hostname"] == strings["hostname"] and old["gpus"] == gpus:
                indices = [g["gpu"] for g in old["gpuList"]]
            else:
                used = self._used_indices(strings["hostname"], key)
                indices = [i for i in range(MAX_GPUS_PER_HOST) if i not in used][:gpus]
                if len(indices) < gpus:
                    raise ValueError(f"no {gpus} free GPU indices left on {strings['hostname']!r}")
            entry = {
                "namespace": namespace,
                "pod": pod,
                "utilization": float(util),
                "engineActive": float(engine),
                "gpus": gpus,
                **strings,
                "gpuList": [
                    {
                        "gpu": i,
                        "UUID": gpu_uuid(strings["hostname"], i),
                        "device": f"nvidia{i}",
                        "utilization": float(per_gpu[n] if per_gpu else util),
                    }
                    for n, i in enumerate(indices)
                ],
            }
            self._pods[key] = entry
            return json.loads(json.dumps(entry))

    def delete(self, namespace: str, pod: str) -> bool:
        with self._lock:
            return self._pods.pop((namespace, pod), None) is not None

    def clear(self) -> int:
        with self._lock:
            n = len(self._pods)
            self._pods.clear()
            return n

    def snapshot(self) -> list[dict]:
        with self._lock:
            return json.loads(json.dumps([self._pods[k] for k in sorted(self._pods)]))

    def render_metrics(self, view: str = VIEWS[0]) -> str:
        metrics = (
            ("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).", "utilization"),
            (
                "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
                "Ratio of time the graphics engine is active.",
                "engineActive",
            ),
            ("DCGM_FI_PROF_SM_ACTIVE", "Ratio of cycles an SM has a warp assigned.", "smActive"),
        )
        pods = [p for p in self.snapshot() if p["view"] == view]
        lines: list[str] = []
        for name, help_text, field in metrics:
            lines.append(f"# HELP {name} {help_text}")
            lines.append(f"# TYPE {name} gauge")
            for entry in pods:
                for g in entry["gpuList"]:
                    labels = (
                        ("gpu", str(g["gpu"])),
                        ("UUID", g["UUID"]),
                        ("pci_bus_id", f"00000000:{0x10 + g['gpu']:02X}:00.0"),
                        ("device", g["device"]),
                        ("modelName", entry["modelName"]),
                        ("Hostname", entry["hostname"]),
                        ("DCGM_FI_DRIVER_VERSION", DRIVER_VERSION),
                        ("container", entry["container"]),
                        ("namespace", entry["namespace"]),
                        ("pod", entry["pod"]),
                    )
                    rendered = ",".join(f'{k}="{escape_label(v)}"' for k, v in labels)
                    lines.append(f"{name}{{{rendered}}} {fmt_value(_value(entry, g, field))}")
        return "\n".join(lines) + "\n"


def _value(entry: dict, gpu: dict, field: str) -> float:
    """One GPU's value: its own utilization where perGpu gave one."""
    if field == "utilization":
        return gpu["utilization"]
    if field == "smActive":
        return gpu["utilization"] / 100.0
    if gpu["utilization"] != entry["utilization"]:
        return gpu["utilization"] / 100.0
    return entry[field]


class Handler(BaseHTTPRequestHandler):
    server_version = "dcgm-exporter-sim/1"
    protocol_version = "HTTP/1.1"
    state: State  # set on the class by main()

    def log_message(self, fmt: str, *args) -> None:  # quieter: skip scrape noise
        if "/metrics" in self.requestline or "/healthz" in self.requestline:
            return
        super().log_message(fmt, *args)

    def _send(self, status: int, body: str | bytes, ctype: str = "application/json") -> None:
        data = body.encode() if isinstance(body, str) else body
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def _json(self, status: int, obj) -> None:
        self._send(status, json.dumps(obj, indent=1, sort_keys=True) + "\n")

    def _error(self, status: int, message: str) -> None:
        self._json(status, {"error": message})

    def _path(self) -> str:
        return urlsplit(self.path).path

    def _pod_key(self):
        m = _POD_PATH.match(self._path())
        return (unquote(m.group(1)), unquote(m.group(2))) if m else None

    def do_GET(self) -> None:
        path = self._path()
        if path == "/metrics":
            view = parse_qs(urlsplit(self.path).query).get("view", [VIEWS[0]])[0]
            self._send(
                HTTPStatus.OK,
                self.state.render_metrics(view),
                "text/plain; version=0.0.4; charset=utf-8",
            )
        elif path in ("/gpus", "/gpus/"):
            self._json(HTTPStatus.OK, {"pods": self.state.snapshot()})
        elif path in ("/healthz", "/health"):
            self._send(HTTPStatus.OK, "ok\n", "text/plain")
        elif path == "/":
            self._send(HTTPStatus.OK, __doc__ or "", "text/plain; charset=utf-8")
        else:
            self._error(HTTPStatus.NOT_FOUND, f"no route for GET {path}")

    do_HEAD = do_GET

    def do_PUT(self) -> None:
        key = self._pod_key()
        if key is None:
            self._error(HTTPStatus.NOT_FOUND, "use PUT /gpus/<namespace>/<pod>")
            return
        try:
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length) or b"null")
            if not isinstance(body, dict):
                raise ValueError("body must be a JSON object")
            entry = self.state.put(key[0], key[1], body)
        except (ValueError, json.JSONDecodeError) as exc:
            self._error(HTTPStatus.BAD_REQUEST, str(exc))
            return
        self._json(HTTPStatus.OK, entry)

    def do_DELETE(self) -> None:
        path = self._path()
        if path in ("/gpus", "/gpus/"):
            self._json(HTTPStatus.OK, {"deleted": self.state.clear()})
            return
        key = self._pod_key()
        if key is None:
            self._error(HTTPStatus.NOT_FOUND, "use DELETE /gpus or /gpus/<namespace>/<pod>")
            return
        # Idempotent: deleting an unknown pod is not an error.
        self._json(HTTPStatus.OK, {"deleted": int(self.state.delete(*key))})


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=19400)
    args = parser.parse_args(argv)
    Handler.state = State()
    httpd = ThreadingHTTPServer((args.host, args.port), Handler)
    httpd.daemon_threads = True
    print(f"dcgm-exporter-sim listening on http://{args.host}:{args.port}", flush=True)
    try:
        httpd.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        httpd.server_close()


if __name__ == "__main__":
    main()
