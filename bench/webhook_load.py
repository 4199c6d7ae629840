"""Benchmark: the admission webhook under large reviews, as the API server sends them.

Run (no cluster needed):
    .venv/bin/python bench/webhook_load.py [--seconds 20] [--rate 50] [--large 12]
                                           [--server process|thread|one-lane] [--churn 0]

It starts the webhook's real server code (admission/webhook.py: aiohttp over TLS on
127.0.0.1, its lanes, `admit`) in a process of its own, its view of budgets fed
directly (`--budgets` exhausted Enforce budgets holding the namespace, as their status
publishes them), and measures from other processes, on keep-alive connections as the
API server keeps them:
- the reference: small reviews (a 1-GPU Job, 1.3 KiB, with its request and managed
  fields as the API server writes them) due at `--rate` per second, alone, each latency
  counted from when it was due (a stall counts in every review due during it);
- the load: the same small reviews while `--large` clients send 2.6 MiB JobSet reviews
  back to back (9,000 one-container replicated jobs: of the shapes tried, the costliest
  per byte for the landed main, see `large_review`).
It prints, for each, reviews answered per second, p50/p99/max latency and the outcomes,
and the capacity: small reviews from 4 clients back to back, with the same large ones.
A review answered after 2 s (the chart's timeoutSeconds) is one the API server gave up
on: that Job was created without a budget check (failurePolicy: Ignore). `--server`
runs, for comparison, large reviews decided in a second thread instead of the worker
process, or every review in one thread (the caps alone). `--churn N` delivers N pod
changes a second to the cache on the server's loop, as the leader's pod informer does
(the webhook shares the loop with the cache, replica.py).
"""

import argparse
import asyncio
import http.client
import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from trainwarden.admission import certs
from trainwarden.testing.builders import BudgetBuilder, JobBuilder

NAMESPACE = "bench-hold"
TARGET = int(2.6 * 2**20)
TIMEOUT = 2.0
"""The chart's timeoutSeconds: an answer later than this never reached the API server."""
SERVERS = ("process", "thread", "one-lane")
WORKERS = 64
"""Connections small reviews are sent on (the API server opens as many as it needs)."""
MANAGED = {
    "manager": "kubectl-create",
    "operation": "Update",
    "apiVersion": "batch/v1",
    "time": "2026-12-04T12:00:00Z",
    "fieldsType": "FieldsV1",
    "fieldsV1": {
        "f:spec": {
            "f:backoffLimit": {},
            "f:completionMode": {},
            "f:parallelism": {},
            "f:template": {
                "f:spec": {
                    "f:containers": {
                        'k:{"name":"trainer"}': {
                            ".": {},
                            "f:image": {},
                            "f:name": {},
                            "f:resources": {".": {}, "f:limits": {".": {}, "f:nvidia.com/gpu": {}}},
                        }
                    },
                    "f:restartPolicy": {},
                }
            },
        }
    },
}


def small_review(i: int) -> bytes:
    job = JobBuilder(f"train-{i}", NAMESPACE).gpus(1).build()
    job["metadata"]["managedFields"] = [MANAGED]
    job["spec"].update(backoffLimit=6, completionMode="NonIndexed", parallelism=1)
    return _review(f"small-{i}", job, "jobs")


def large_review(i: int) -> bytes:
    """A JobSet review of TARGET bytes: one-container replicated jobs, as many as fit.
    Of the shapes tried (many replicated jobs, many containers in one, many labels, long
    strings) this one cost the landed main's decision most per byte (0.3 s)."""
    template = JobBuilder("x").gpus(1).build()["spec"]
    entry = {"name": "rj", "replicas": 1, "template": {"spec": template}}
    head = _review(f"large-{i}", _jobset([]), "jobsets")
    count = (TARGET - len(head)) // (len(json.dumps(entry, separators=(",", ":"))) + 2)
    replicated = [{**entry, "name": f"rj{j}"} for j in range(count)]
    return _review(f"large-{i}", _jobset(replicated), "jobsets")


def _jobset(replicated: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "big", "namespace": NAMESPACE},
        "spec": {"replicatedJobs": replicated},
    }


def _review(uid: str, obj: dict[str, Any], resource: str) -> bytes:
    """As the API server writes it: AdmissionRequest's fields in their Go order."""
    group, _, version = str(obj["apiVersion"]).rpartition("/")
    kind = {"group": group, "version": version, "kind": obj["kind"]}
    which = {"group": group, "version": version, "resource": resource}
    request = {
        "uid": uid,
        "kind": kind,
        "resource": which,
        "requestKind": kind,
        "requestResource": which,
        "name": obj["metadata"]["name"],
        "namespace": NAMESPACE,
        "operation": "CREATE",
        "userInfo": {"username": "alice", "groups": ["system:authenticated"]},
        "object": obj,
        "oldObject": None,
        "dryRun": False,
        "options": {"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1"},
    }
    review = {"kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1", "request": request}
    return json.dumps(review, separators=(",", ":")).encode()


# --- the server -------------------------------------------------------------------------


def budget(name: str, now: datetime) -> dict[str, Any]:
    body = BudgetBuilder(name).namespaces(NAMESPACE).accelerator_hours(1).enforce().build()
    body["metadata"].update(uid=f"uid-{name}", generation=1)
    until = (now + timedelta(hours=1)).isoformat()
    body["status"] = {"admission": {"holding": True, "holdUntil": until, "observedGeneration": 1}}
    return body


async def churn(cache: Any, rate: float) -> None:
    """`rate` pod changes a second delivered to the cache, in batches every 10 ms."""
    from trainwarden.core.pods import facts
    from trainwarden.core.reads import CODE
    from trainwarden.testing.builders import PodBuilder

    sink = cache.pod_sink()
    pods = [facts(PodBuilder(f"p{i}", NAMESPACE).gpus(1).build(), CODE) for i in range(1000)]
    sink.replace("pods", {f"uid-{i}": p for i, p in enumerate(pods)})
    batch, i = max(1, round(rate / 100)), 0
    while True:
        for _ in range(batch):
            sink.apply("pods", "MODIFIED", f"uid-{i % len(pods)}", pods[i % len(pods)])
            i += 1
        await asyncio.sleep(0.01)


def serve(port: int, budgets: int, directory: Path, server: str, rate: float) -> None:
    """The webhook's server with a fed view; prints "ready" once it listens."""
    from trainwarden.admission import webhook
    from trainwarden.admission.view import BUDGETS, NAMESPACES, AdmissionView, published_budget
    from trainwarden.admission.webhook import Reviews, WebhookSettings, listen, server_context
    from trainwarden.cache.cluster import ClusterCache, namespace_facts
    from trainwarden.core.reads import CODE

    large = ThreadPoolExecutor(1) if server == "thread" else None  # for comparison
    if server == "one-lane":  # idem: every review in the small lane's thread
        webhook.SMALL = webhook.MAX_BODY
    now = datetime.now(UTC)
    cache = ClusterCache()  # as the replica's informers fill it (replica.py)
    bodies = [budget(f"bench-{i}", now) for i in range(budgets)]
    records = {b["metadata"]["uid"]: published_budget(b, None) for b in bodies}
    cache.budget_sink().replace(BUDGETS.name, records)
    namespace = namespace_facts({"metadata": {"name": NAMESPACE, "labels": {}}}, CODE)
    cache.namespace_sink().replace(NAMESPACES.name, {"u": namespace})
    view = AdmissionView(cache)
    settings = WebhookSettings(port=port, address="127.0.0.1", timeout=TIMEOUT)
    context = server_context(None)
    context.load_cert_chain(directory / "tls.crt", directory / "tls.key")

    # A terminated server exits as the operator does: its worker process shut down.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))

    async def run() -> None:
        if rate:
            asyncio.get_running_loop().create_task(churn(cache, rate))
        await listen(Reviews(view, settings, large), settings, context)
        print("ready", flush=True)
        await asyncio.Event().wait()

    asyncio.run(run())


# --- the clients ------------------------------------------------------------------------


Sample = tuple[float, str]
"""Seconds from when a review was due to its answer, and the answer's outcome."""


def _connection(port: int, directory: Path) -> http.client.HTTPSConnection:
    context = ssl.create_default_context(cafile=str(directory / "ca.crt"))
    return http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=30)


def _post(connection: http.client.HTTPSConnection, body: bytes, due: float) -> Sample:
    try:
        connection.request("POST", "/hold", body, {"Content-Type": "application/json"})
        response = connection.getresponse()
        outcome = _outcome(response.status, response.read())
    except (OSError, http.client.HTTPException) as error:
        connection.close()  # reconnects on the next request
        outcome = type(error).__name__
    return time.monotonic() - due, outcome


def _outcome(status: int, answer: bytes) -> str:
    if status != 200:
        return f"http-{status}"
    response = json.loads(answer)["response"]
    warnings = " ".join(response.get("warnings", []))
    if "not decided within" in warnings:
        return "deadline"
    if "not checked against budgets" in warnings:
        return "too-costly"
    return "held" if "patch" in response else "allowed"


def closed_loop(
    count: int, port: int, directory: Path, seconds: float, *, large: bool
) -> list[Sample]:
    """`count` clients each sending (large or small) reviews back to back."""
    bodies = [(large_review if large else small_review)(i) for i in range(4)]
    until = time.monotonic() + seconds

    def one(i: int) -> list[Sample]:
        connection, found = _connection(port, directory), list[Sample]()
        while time.monotonic() < until:
            found.append(_post(connection, bodies[(i + len(found)) % 4], time.monotonic()))
        return found

    with ThreadPoolExecutor(count) as pool:
        return [s for samples in pool.map(one, range(count)) for s in samples]


def open_loop(rate: float, port: int, directory: Path, seconds: float) -> list[Sample]:
    """Small reviews due at `rate` per second whatever the answers take, as the API server
    sends them (one per creation), each latency counted from when it was due: a stall
    shows in every review due during it, not only in the one that waited."""
    bodies, start, lock = [small_review(i) for i in range(4)], time.monotonic(), threading.Lock()
    schedule = iter(range(int(rate * seconds)))

    def worker(_: int) -> list[Sample]:
        connection, found = _connection(port, directory), list[Sample]()
        while True:
            with lock:
                i = next(schedule, None)
            if i is None:
                return found
            due = start + i / rate
            time.sleep(max(0.0, due - time.monotonic()))
            found.append(_post(connection, bodies[i % 4], due))

    with ThreadPoolExecutor(WORKERS) as pool:
        return [s for samples in pool.map(worker, range(WORKERS)) for s in samples]


def clients(kind: str, amount: float, port: int, directory: Path, seconds: float) -> None:
    """Small reviews at a rate or `amount` large-review clients; prints the samples and
    the seconds until the last answer."""
    begun = time.monotonic()
    if kind == "small":
        found = open_loop(amount, port, directory, seconds)
    else:
        found = closed_loop(int(amount), port, directory, seconds, large=kind == "large")
    print(json.dumps({"seconds": time.monotonic() - begun, "samples": found}), flush=True)


def spawn(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, __file__, *args], stdout=subprocess.PIPE, text=True)


def summary(name: str, answered: dict[str, Any]) -> str:
    """Reviews answered per second (until the last answer), latencies and outcomes."""
    samples: list[Sample] = answered["samples"]
    seconds: float = answered["seconds"]
    latencies = sorted(s for s, _ in samples)
    if not latencies:
        return f"{name:34s} no answers"
    outcomes: dict[str, int] = {}
    for _, outcome in samples:
        outcomes[outcome] = outcomes.get(outcome, 0) + 1

    def at(q: float) -> float:
        return 1000 * latencies[min(len(latencies) - 1, int(q * len(latencies)))]

    late = sum(1 for s in latencies if s > TIMEOUT)
    said = ", ".join(f"{k} {v}" for k, v in sorted(outcomes.items()))
    return (
        f"{name:34s} {len(latencies) / seconds:7.1f}/s  p50 {at(0.5):7.1f} ms  "
        f"p99 {at(0.99):7.1f} ms  max {1000 * latencies[-1]:7.1f} ms  "
        f"over {TIMEOUT:g}s {late}/{len(latencies)}  ({said})"
    )


def phase(port: int, directory: Path, seconds: float, rate: float, large: int) -> list[str]:
    """Small reviews due at `rate` (or, at 0, from 4 clients back to back) while `large`
    clients send large ones."""
    args = (str(port), str(directory), str(seconds))
    small = ("small", str(rate)) if rate else ("small-back-to-back", "4")
    small_clients = spawn("--clients", *small, *args)
    large_clients = spawn("--clients", "large", str(large), *args) if large else None
    found = json.loads(small_clients.communicate()[0])
    lines = [summary(f"small reviews ({f'{rate:g}/s due' if rate else '4 clients'})", found)]
    if large_clients is not None:
        big = json.loads(large_clients.communicate()[0])
        lines.append(summary(f"2.6 MiB JobSet reviews ({large} clients)", big))
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=20.0, help="per phase")
    parser.add_argument("--rate", type=float, default=50.0, help="small reviews per second")
    parser.add_argument("--large", type=int, default=12, help="concurrent large-review clients")
    parser.add_argument("--budgets", type=int, default=20)
    parser.add_argument("--server", choices=SERVERS, default="process")
    parser.add_argument("--churn", type=float, default=0.0, help="pod changes/s on the loop")
    parser.add_argument("--serve", nargs=5, help=argparse.SUPPRESS)
    parser.add_argument("--clients", nargs=5, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        port, budgets, directory, server, rate = args.serve
        serve(int(port), int(budgets), Path(directory), server, float(rate))
        return 0
    if args.clients:
        kind, amount, port, directory, seconds = args.clients
        clients(kind, float(amount), int(port), Path(directory), float(seconds))
        return 0
    directory = Path(tempfile.mkdtemp(prefix="webhook-load-"))
    bundle = certs.renewed(None, ("127.0.0.1",), datetime.now(UTC))
    (directory / "ca.crt").write_bytes(bundle.ca_cert)
    (directory / "tls.crt").write_bytes(bundle.cert)
    (directory / "tls.key").write_bytes(bundle.key)
    port = _free_port()
    server = spawn(
        "--serve", str(port), str(args.budgets), str(directory), args.server, str(args.churn)
    )
    try:
        assert server.stdout is not None
        assert server.stdout.readline().strip() == "ready"
        # Its log lines (one per held review) go on being read, or the server blocks.
        threading.Thread(target=server.stdout.read, daemon=True).start()
        print(
            f"webhook ({args.server}) on 127.0.0.1:{port}, {args.budgets} budgets, "
            f"{args.churn:g} pod changes/s on its loop, "
            f"{os.cpu_count()} CPUs, {args.seconds:g}s per phase; large review "
            f"{len(large_review(0)) / 2**20:.2f} MiB, small {len(small_review(0))} B"
        )
        print("reference (small reviews alone):")
        for line in phase(port, directory, args.seconds, args.rate, 0):
            print("  " + line)
        print(f"with {args.large} concurrent 2.6 MiB JobSet reviews:")
        for line in phase(port, directory, args.seconds, args.rate, args.large):
            print("  " + line)
        print("capacity: small reviews back to back, with the same large ones:")
        for line in phase(port, directory, args.seconds, 0, args.large):
            print("  " + line)
    finally:
        server.terminate()
        server.wait()
    return 0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


if __name__ == "__main__":
    sys.exit(main())
