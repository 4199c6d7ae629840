"""The run: identities and proxy, the world, then the phases, then cleanup and the report."""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import time
import traceback
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType

from scale import cleanup, clients, figures, operator_metrics, world
from scale.cluster import CLUSTER_DIR, Env, install_crds, make_identity, read_env
from scale.kube import BUDGETS, Kube, Obj
from scale.meters import Meters, Reading
from scale.params import Params, parse
from scale.probes import CrossingProbes, IdleProbes, Probe, remove_phase
from scale.progress import Progress
from scale.report import Latencies, Phase, Results, evaluate_targets, render, write_json


def log(message: str) -> None:
    print(f"[{datetime.now().astimezone():%H:%M:%S}] {message}", flush=True)


class Run:
    def __init__(self, env: Env, admin: Kube, params: Params, workdir: Path) -> None:
        self.env, self.admin, self.params, self.workdir = env, admin, params, workdir
        self.results = Results(params)
        self.processes: list[clients.Process] = []
        self.operator: clients.Operator | None = None
        self.watcher_events: Path | None = None

    # --- setup --------------------------------------------------------------------------
    def start_measurement(self) -> None:
        names = ["operator", "janitor", "watcher"]
        proxy, ports, control = clients.start_proxy(self.workdir, self.env.api_port, names)
        self.processes.append(proxy)
        self.identities = {
            n: make_identity(self.env, self.admin, n, ports[n], self.workdir) for n in names
        }
        flows = {n: i.flow_schema for n, i in self.identities.items()}
        self.meters = Meters(self.admin, control, flows)
        if (pid := self.env.apiserver_pid) is not None:
            self.meters.watch_process("kube-apiserver", pid)

    def started(self, name: str, process: clients.Process) -> None:
        self.processes.append(process)
        self.meters.watch_process(name, process.pid)

    def phase(self, key: str, title: str, start: Reading, end: Reading) -> Phase:
        phase = Phase(key, title, seconds=end.t - start.t)
        for name in ("operator", "janitor", "watcher"):
            if name in start.cpu:
                phase.usage[name] = self.meters.usage(name, start, end)
        api = self.meters.usage("kube-apiserver", start, end)
        phase.apiserver_cores = api.cores
        self.results.phases.append(phase)
        return phase

    # --- phases -------------------------------------------------------------------------
    def initial_sync(self) -> None:
        params, timeout = self.params, self.params.sync_timeout
        phase = Phase("sync", "initial sync: each client started into the full cluster")
        phase.sync_timeout = {c: float(timeout) for c in ("operator", "janitor", "watcher")}
        # The references first, one at a time, so each initial sync is measured alone.
        ids = self.identities
        for name, key in (("watcher", "listed"), ("janitor", "pods")):
            start = self.meters.read()
            if name == "watcher":
                process, self.watcher_events = clients.start_watcher(
                    self.workdir, ids[name].kubeconfig
                )
            else:
                process = clients.start_janitor(
                    self.workdir, ids[name].kubeconfig, params.janitor_interval
                )
            self.started(name, process)
            done = self._first_line(process, key, start.t + timeout)
            end = self.meters.read()
            phase.usage[name] = self.meters.usage(name, start, end)
            phase.sync[name] = done - start.t if done is not None else None
            log(f"{name}: first full pass {_secs(phase.sync[name], timeout)}")
        # The operator, exactly as a user starts it.
        trackers = [figures.Evaluations(self.admin, res, time.time()) for res in figures.POLICIES]
        for tracker in trackers:
            tracker.watch.synced.wait(60)
        start = self.meters.read()
        operator = clients.start_operator(
            self.workdir, self.identities["operator"].kubeconfig, self.env.prometheus_url
        )
        self.operator = operator
        self.started("operator", operator.process)
        for tracker in trackers:
            tracker.since = operator.started
        done, healthy_after = self._wait_evaluated(operator, trackers, phase, timeout)
        end = self.meters.read()
        for tracker in trackers:
            tracker.watch.stop()
        phase.usage["operator"] = self.meters.usage("operator", start, end)
        phase.apiserver_cores = self.meters.usage("kube-apiserver", start, end).cores
        phase.seconds = end.t - start.t
        phase.sync["operator"] = done - operator.started if done is not None else None
        phase.status = figures.status_size(self.admin)
        phase.notes.append(
            "references first, then the operator: each window is its own client's sync; "
            "operator healthy "
            + (f"after {healthy_after:.1f} s" if healthy_after else f"not within {timeout} s")
        )
        self.results.phases.append(phase)
        log(f"operator: every budget evaluated {_secs(phase.sync['operator'], timeout)}")

    def _first_line(self, process: clients.Process, key: str, deadline: float) -> float | None:
        while time.time() < deadline and process.alive():
            for _, line in process.json_lines():
                if key in line:
                    return float(line["done"])
            time.sleep(0.2)
        return None

    def _wait_evaluated(
        self,
        operator: clients.Operator,
        trackers: list[figures.Evaluations],
        phase: Phase,
        timeout: int,
    ) -> tuple[float | None, float | None]:
        deadline = operator.started + timeout
        healthy_after: float | None = None
        progress = Progress("operator initial sync")
        done: dict[str, float] = {}
        try:
            while time.time() < deadline:
                if not operator.process.alive():
                    phase.notes.append(f"the operator exited:\n{operator.process.tail()}")
                    break
                if healthy_after is None and clients.healthy(operator.health_url):
                    healthy_after = time.time() - operator.started
                    progress.set("healthy after", f"{healthy_after:.1f} s")
                for tracker in trackers:
                    evaluated, total = tracker.counts()
                    progress.set(tracker.res.plural, f"{evaluated}/{total}")
                    if total and evaluated == total and tracker.res.plural not in done:
                        done[tracker.res.plural] = time.time()
                if BUDGETS.plural in done and len(done) == len(trackers):
                    break
                time.sleep(0.5)
        finally:
            progress.done()
        for tracker in trackers:
            at = done.get(tracker.res.plural)
            evaluated, total = tracker.counts()
            phase.notes.append(
                f"{tracker.res.plural}: {evaluated}/{total} evaluated "
                + (f"after {at - operator.started:.1f} s" if at else f"within {timeout} s")
            )
        return done.get(BUDGETS.plural), healthy_after

    def steady(self) -> None:
        params = self.params
        log(f"settling {params.settle_seconds} s, then {params.steady_seconds} s of steady state")
        time.sleep(params.settle_seconds)
        start, own = self.meters.read(), self._own()
        self._sleep(params.steady_seconds)
        end = self.meters.read()
        phase = self.phase("steady", "steady state: no pod changing", start, end)
        operator_metrics.breakdown(phase, own, self._own())
        phase.notes += self.unsynced()
        phase.status = figures.status_size(self.admin)
        phase.notes += figures.staleness(self.admin)

    def churn(self, rate: float) -> None:
        params = self.params
        key = f"c{rate:g}".replace(".", "p")
        log(f"churn at {rate:g} pods/s: preparing probes")
        op = CrossingProbes(self.admin, params, key, "operator", params.crossing_probes)
        jan = CrossingProbes(self.admin, params, key, "janitor", params.janitor_probes)
        idle = IdleProbes(self.env, self.admin, params, key)
        probes = (op, jan, idle)
        try:
            for probe in probes:
                probe.prepare()
            t0 = time.time() + 5
            duration = params.churn_seconds
            first, last = t0 + params.probe_lead_seconds, t0 + duration - 10
            op.arm(first, max(first, last))
            jan.arm(first, max(first, last))
            idle_last = t0 + duration - params.idle_window_seconds - 5
            idle.arm(t0 + 5, max(t0 + 5, idle_last))
            time.sleep(max(0.0, t0 - time.time()))
            start, own = self.meters.read(), self._own()
            namespaces = [world.namespace_name(i) for i in range(params.namespaces)]
            churn, churn_log = clients.start_churn(
                self.workdir,
                self.env.kubeconfig,
                phase=key,
                rate=rate,
                seconds=duration,
                namespaces=namespaces,
                node_prefix=world.NODE_PREFIX,
                nodes=params.nodes,
                lifetime=params.churn_pod_seconds,
            )
            self.processes.append(churn)
            log(f"churn at {rate:g} pods/s for {duration} s")
            self._sleep(duration)
            end = self.meters.read()
            phase = self.phase(key, f"churn at {rate:g} pods/s", start, end)
            operator_metrics.breakdown(phase, own, self._own())
            phase.extra["rate"] = rate
            phase.notes += self.unsynced()
            phase.status = figures.status_size(self.admin)
            self._await_probes(probes)
            phase.crossing = {
                "operator": Latencies([p.latency for p in op.probes], params.reaction_timeout),
                "janitor": Latencies(
                    [p.latency for p in jan.probes],
                    params.reaction_timeout + 2 * params.janitor_interval,
                ),
            }
            phase.idle = Latencies([p.latency for p in idle.probes], params.reaction_timeout)
            phase.extra["probes"] = {
                "operator": [_probe(p, op.starts.get(i)) for i, p in enumerate(op.probes)],
                "janitor": [_probe(p, jan.starts.get(i)) for i, p in enumerate(jan.probes)],
                "idle": [_probe(p, None) for p in idle.probes],
            }
            phase.notes += [f"idle probe error: {e}" for e in idle.errors]
            summary = self._churn_summary(churn, time.time() + params.churn_pod_seconds + 180)
            phase.extra["churn"] = summary
            if summary:
                phase.notes.append(
                    f"churn: {summary['created']} pods created at {summary['rate_achieved']:.1f}/s "
                    f"(asked {rate:g}/s; lag p50 {summary['lag_p50']:.2f} s, max "
                    f"{summary['lag_max']:.2f} s), {summary['create_errors']} create errors; "
                    f"{summary['ran']} ran, {summary['finished']} finished and "
                    f"{summary['deleted']} were deleted by {params.churn_pod_seconds + 120} s "
                    "after the last creation (kwok runs and completes them)"
                )
            else:
                phase.notes.append("churn generator: no summary (did not finish in time)")
            if self.watcher_events:
                phase.events = figures.event_latencies(churn_log, self.watcher_events, key)
            phase.notes += figures.staleness(self.admin)
        finally:
            for probe in probes:
                probe.stop()
            remove_phase(self.admin, key)

    def _await_probes(self, probes: tuple[CrossingProbes, CrossingProbes, IdleProbes]) -> None:
        deadline = max(p.deadline(self.params) for p in probes)
        while time.time() < deadline and any(p.pending() for p in probes):
            time.sleep(0.5)

    def _churn_summary(self, churn: clients.Process, deadline: float) -> Obj | None:
        while time.time() < deadline:
            for _, line in churn.json_lines():
                if "created" in line:
                    # Then it deletes what did not finish; let it, before the next phase.
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        churn.popen.wait(timeout=max(1.0, deadline - time.time()) + 300)
                    return line
            if not churn.alive():
                break
            time.sleep(1)
        churn.stop()
        return None

    def _sleep(self, seconds: float) -> None:
        deadline = time.time() + seconds
        while time.time() < deadline:
            if self.operator and not self.operator.process.alive():
                self.results.notes.append("the operator exited during the run")
                self.operator = None
            time.sleep(min(1.0, max(0.0, deadline - time.time())))

    def _own(self) -> operator_metrics.Counts:
        """The operator's own request and event counters, now."""
        return operator_metrics.scrape(self.operator.metrics_url) if self.operator else {}

    # --- figures read from the cluster --------------------------------------------------
    def unsynced(self) -> list[str]:
        sync = self.results.phase("sync")
        if sync and sync.sync.get("operator") is None:
            return [
                "the operator had not evaluated every budget by the sync deadline: "
                "these figures may include its initial sync"
            ]
        return []

    def execute(self) -> None:
        log(f"run directory {self.workdir}")
        self.start_measurement()
        log("building the world")
        world.build(self.env, self.admin, self.params)
        self.initial_sync()
        self.steady()
        for rate in self.params.churn_rates:
            self.churn(rate)

    def stop_processes(self) -> None:
        for process in reversed(self.processes):
            process.stop()
        if hasattr(self, "meters"):
            self.meters.stop()


def _probe(probe: Probe, start: float | None) -> dict[str, float | str | None]:
    """One probe for the JSON: the pod's start, the known instant, the seen reaction."""
    return {
        "name": probe.name,
        "start": start,
        "due": probe.due,
        "reacted": probe.reacted,
        "latency": probe.latency,
    }


def _secs(value: float | None, timeout: float) -> str:
    return f"in {value:.1f} s" if value is not None else f"not within {timeout:.0f} s"


def _interrupt(signum: int, _frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: list[str] | None = None) -> int:
    params = parse(argv)
    env = read_env()
    admin = Kube(env.kubeconfig, pool=32)
    if params.cleanup_only:
        return 0 if cleanup.cleanup(env, admin, params) else 1
    if found := cleanup.leftovers(admin):
        log(f"an earlier run left {found}: cleaning up first")
        if not cleanup.cleanup(env, admin, params):
            return 1
    signal.signal(signal.SIGTERM, _interrupt)
    workdir = CLUSTER_DIR / "bench" / f"scale-{datetime.now(UTC):%Y%m%dT%H%M%SZ}"
    workdir.mkdir(parents=True)
    print(f"parameters: {json.dumps(params.as_dict())}", flush=True)
    install_crds(env)
    run = Run(env, admin, params, workdir)
    failed = False
    try:
        run.execute()
    except BaseException as error:
        failed = True
        run.results.notes.append(f"run aborted: {error!r} (see {workdir}/bench.log)")
        (workdir / "bench.log").write_text(traceback.format_exc())
        log(f"run aborted: {error!r}")
    finally:
        run.stop_processes()
    # The results first: a cleanup that fails must not lose them.
    evaluate_targets(run.results)
    print()
    print(render(run.results), flush=True)
    print()
    if params.json_path:
        write_json(run.results, params.json_path)
        log(f"results written to {params.json_path}")
    if params.keep:
        log("--keep: the world stays (bench/scale.py --cleanup-only removes it)")
        return 1 if failed else 0
    log("cleaning up")
    cleaned = cleanup.cleanup(env, admin, params)
    return 1 if failed or not cleaned else 0
