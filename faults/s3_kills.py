"""Area "s3-kills": the operator SIGKILLed while a CheckpointPolicy run deletes from S3
(issue 17, item 1 for pruning).

S3 prefixes are pruned inside the operator process (a worker thread per run,
checkpoints/s3.py), so killing the operator kills the run: nothing of it is recorded in
status, a DeleteObjects may be half done or done and unanswered, a checkpoint may have
lost its data but not yet its completion marker (those go last, storage/s3_prefix.py).

Per kill, `per_kill` instances as in the s3 area (faults/s3_faults.py: a bucket each,
checkpoints 100..800 complete, 200 pinned, 100 named by resume-from, 900 being written,
objects outside the prefix; the plan computed here deletes 300..600), each policy created
at once (its first run starts at once). Every S3 answer comes 0.3 s late through the
instance's proxy (an S3 endpoint across a network, not a local disk), so a run takes a
few seconds and a kill lands inside it. The operator is SIGKILLed either at a random
moment 0-8 s after the policies were created, or exactly at the k-th DeleteObjects one
of the proxies receives: before it is forwarded (never reached the server) or after the
server carried it out (done, but the answer never reached the operator). It is restarted
at once.

Counted on the objects, listed straight from the server: expected = the plan; taken =
planned checkpoints gone entirely; lost = planned checkpoints (or parts of them) still
there DEADLINE s after the restart (the schedule's next run is 10 min away: only a run
the restarted operator starts at once gets there); wrong = anything else gone (a
protected checkpoint, one outside the plan, an object outside the prefix), or a run that
left planned checkpoints and reported success; double = keys sent in a DeleteObjects
after the operator was told they were deleted.
"""

import contextlib
import threading
import time
from dataclasses import dataclass, field

from faults import kit, s3_faults
from faults.kit import Context, Operators, harness
from faults.s3_faults import Bucket, Instance
from faults.table import Row

LATENCY = 0.3
"""Seconds every S3 answer is held back: a run of ~25 requests takes ~8 s."""
RANDOM_WINDOW = 8.0
DEADLINE = 60.0
"""Seconds after the restart for the plan to be carried out."""
KILLS = ("random", "before-delete", "after-delete")


@dataclass
class Kill:
    """One kill: how, and the hook a proxy calls at each DeleteObjects."""

    how: str
    victim: harness.Operator
    target: int = 0
    """The DeleteObjects (counted across every proxy of the run) the kill happens at."""
    seen: int = 0
    done: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)
    mine: threading.local = field(default_factory=threading.local)
    """The number of the DeleteObjects this proxy thread handles (its "after" follows its
    "before" in the same thread, while other requests go on)."""

    def at_delete(self, when: str) -> bool:
        """True when this very request kills the operator: what it sent is dropped, or
        never answered. Once it is dead, requests (the restarted operator's) go through."""
        with self.lock:
            if self.done.is_set():
                return False
            if when == "before":
                self.seen += 1
                self.mine.number = self.seen
            number = getattr(self.mine, "number", 0)
            if f"{when}-delete" != self.how or number != self.target:
                return False
            self.victim.process.kill()
            self.victim.process.wait()
            self.done.set()
            return True


def _kill(ctx: Context, ops: Operators, kill: Kill) -> str:
    """SIGKILL at the chosen moment; returns what happened, for the notes."""
    if kill.how == "random":
        time.sleep(ctx.rng.uniform(0, RANDOM_WINDOW))  # the fault schedule
        with kill.lock:
            kill.done.set()
            ops.kill(kill.victim)
        return f"random moment (after {kill.seen} DeleteObjects)"
    if kill.done.wait(timeout=60):
        ops.running.remove(kill.victim)
        return f"{kill.how} #{kill.target}"
    with kill.lock:
        kill.done.set()
        ops.kill(kill.victim)
    return f"{kill.how} #{kill.target} never came (SIGKILL after 60 s, {kill.seen} seen)"


def _judge(row: Row, store: Bucket, inst: Instance, restarted: float) -> float | None:
    """Count one instance; returns seconds from the restart to the plan carried out."""
    left = max(1.0, DEADLINE - (time.monotonic() - restarted))
    finished: float | None = None
    with contextlib.suppress(AssertionError):  # what is missing is counted below
        kit.wait_for(lambda: s3_faults.done(store, inst), timeout=left, what="the plan")
        finished = time.monotonic() - restarted
    s3_faults.count(row, store, inst)
    for seen in inst.seen:
        if seen.remaining and not seen.failed:
            row.wrong += 1
            row.notes.append(f"{inst.namespace}: a run left {sorted(seen.remaining)}, said success")
    return finished


def _one_kill(ctx: Context, row: Row, ops: Operators, store: Bucket, made: list[str]) -> str:
    buckets: list[str] = []
    insts = [s3_faults.setup(ctx, store, made, buckets) for _ in range(ctx.per_kill)]
    newest = max(max(store.keys(i.bucket).values()) for i in insts).timestamp()
    kit.wait_for(lambda: time.time() > newest + 1.5, timeout=10, what="minAge passed")
    recorder = s3_faults.observer(ctx, store, {i.policy: i for i in insts})
    recorder.synced.wait(30)
    how = str(ctx.rng.choice(KILLS))
    kill = Kill(how, ops.running[0], target=ctx.rng.randint(1, 3 * ctx.per_kill))
    try:
        for inst in insts:
            inst.proxy.settings.slow_seconds = LATENCY
            inst.proxy.settings.at_delete = kill.at_delete
            inst.proxy.set("slow")
            inst.before = set(store.keys(inst.bucket))
            ctx.create_policy(s3_faults.CPP, s3_faults.manifest(inst))
        said = _kill(ctx, ops, kill)
        ops.start()
        restarted = time.monotonic()
        took = [_judge(row, store, i, restarted) for i in insts]
    finally:
        recorder.stop()
        for inst in insts:
            inst.proxy.close()
            kit.delete_namespace(ctx.cluster, inst.namespace)
        for bucket in buckets:
            with contextlib.suppress(Exception):  # cleanup only; the figures are in
                store.drop(bucket)
    done = [f"{t:.0f}" for t in took if t is not None]
    return f"{said}; plan done {', '.join(done) or 'never'} s after the restart"


def run_area(ctx: Context) -> Row:
    row = Row("SIGKILL during S3 pruning")
    store = Bucket(harness.read_env(harness.CLUSTER_DIR / "cluster.env"))
    ops = ctx.operators("s3-kills")
    hows: dict[str, int] = {}
    with kit.namespaces(ctx.cluster) as made:
        for number in range(ctx.runs):
            ops.start()
            said = _one_kill(ctx, row, ops, store, made)
            ops.stop_all()
            row.runs += 1
            hows[said.split(" ")[0]] = hows.get(said.split(" ")[0], 0) + 1
            ctx.say(f"  {row.scenario}: kill {number + 1}/{ctx.runs}: {said}")
            row.notes.append(f"kill {number + 1}: {said}")
    row.notes.append(", ".join(f"{n} kills {how}" for how, n in sorted(hows.items())))
    return row
