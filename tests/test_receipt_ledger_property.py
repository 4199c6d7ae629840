"""Whatever a tenant writes into their namespace's ledger, generated: receipts under any
name (the runs' predictable names, guesses at the fallback names, anything), with or
without the operator's labels, with forged specs, copied specs and copied seals; their
own receipts deleted again (a squatter gone after the operator wrote elsewhere); the
operator's receipts deleted or deleted and re-created as they were; the workloads'
receipt annotations stripped or forged — interleaved with the operator writing receipts
(again after restarts), sweeping under any cap and TTL, and rotating its key. Then:

- the sweep deleted only receipts the operator wrote (their exact content);
- once every run was tried again and a sweep ran, each run has exactly one receipt the
  operator wrote;
- every receipt it created holds the figures it computed for that run, and every
  annotation it wrote on a workload carries that run's own figures, never another's.

Outside the model: a tenant holding the key, and a tenant taking a fallback name the
operator used and its sweep freed (both names taken: the receipt is not written, said
with a Warning; docs/receipts.md).
"""

import json
from datetime import timedelta
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trainwarden.api.v1alpha1.names import RECEIPT, SEAL
from trainwarden.api.v1alpha1.receipt import RunReceiptSpec
from trainwarden.core import receipts
from trainwarden.core.runs import PodRecord, Run
from trainwarden.receipts.identity import MIN_KEY, Keyring, canonical, key_id, receipt_name
from trainwarden.receipts.ledger import Identity, sweep
from trainwarden.receipts.reconcile import Ledger, ReceiptSettings, measured, write
from trainwarden.testing.builders import JobBuilder, NamespaceBuilder
from world import JSON, World, run

NS = "team-a"
RR = ("trainwarden.dev/v1alpha1", "RunReceipt")
KEYS = (b"a" * MIN_KEY, b"b" * MIN_KEY, b"c" * MIN_KEY)
RUNS = 2
OURS = {"app.kubernetes.io/managed-by": "trainwarden"}


class Model:
    """The world a history made, and what the operator computes for each run."""

    def __init__(self, world: World, runs: list[Run], specs: dict[str, RunReceiptSpec]) -> None:
        self.world, self.runs, self.specs = world, runs, specs
        """specs: by workload uid, the same every time it is computed."""
        self.ring = Keyring(KEYS[0])
        self.rotations = 0
        self.deleted: list[JSON] = []
        """Every receipt the operator deleted, as it was just before."""
        self.steps: list[str] = []

    def __repr__(self) -> str:
        return "Model(" + "; ".join(self.steps) + ")"

    @property
    def ledger(self) -> Ledger:
        w = self.world
        return Ledger(w.fake, w.cache, None, ReceiptSettings(), None)

    @property
    def who(self) -> Identity:
        return Identity(None, self.ring)

    def receipts(self) -> list[JSON]:
        return [o for k, o in self.world.fake.store.items() if k[:2] == RR]

    def created(self) -> set[tuple[str, str]]:
        """(name, canonical spec) of every receipt the operator created."""
        return {
            (w.name, canonical(RunReceiptSpec.model_validate(w.body["spec"])))
            for w in self.world.fake.writes
            if w.kind == "RunReceipt" and w.verb == "create" and w.outcome == "changed"
        }

    def used_names(self) -> set[str]:
        return {n for n, _ in self.created()}


def _genuine(model: Model, obj: JSON) -> bool:
    """Content the operator wrote (its own create, or an exact re-creation of it)."""
    spec = RunReceiptSpec.model_validate(obj["spec"]) if _spec_ok(obj) else None
    return spec is not None and (obj["metadata"]["name"], canonical(spec)) in model.created()


def _spec_ok(obj: JSON) -> bool:
    try:
        RunReceiptSpec.model_validate(obj.get("spec"))
    except ValueError:
        return False
    return True


def setup() -> Model:
    world = World()
    world.put(NamespaceBuilder(NS).build())
    runs, specs = [], {}
    start = world.now.timestamp() - 3600
    for i in range(RUNS):
        job = world.put(JobBuilder(f"r{i}", NS).gpus(8).build())
        uid = job["metadata"]["uid"]
        r = Run("batch/v1", "Job", NS, f"r{i}", uid, start, start, result="Succeeded")
        r.finished_at = start + 600 * (i + 1)
        r.pods = {"p": PodRecord("p", "p", start, r.finished_at, "Succeeded", 8.0, i, ())}
        runs.append(r)
        model = Model(world, runs, specs)
        _, note = run(measured(model.ledger, r, r.finished_at + 60))
        specs[uid] = receipts.spec(
            r, closed=r.finished_at + 60, measure=None, measurement=note, located=None
        )
    return Model(world, runs, specs)


# --- what the tenant and the operator do -----------------------------------------------------


def _forged(model: Model, draw: st.DrawFn) -> object:
    kind = draw(st.sampled_from(["own", "other", "copy", "junk"]))
    target = model.runs[draw(st.integers(0, RUNS - 1))]
    if kind == "junk":
        return draw(st.sampled_from([{}, {"outcome": "Succeeded"}, "x", None]))
    if kind == "copy" and model.receipts():
        return draw(st.sampled_from(model.receipts()))["spec"]
    spec = model.specs[target.uid].model_dump(by_alias=True, mode="json", exclude_none=True)
    spec["acceleratorHours"] = {"held": 0.01, "used": 0.01, "idle": 0.0, "unknown": 0.0}
    spec["cost"] = 0.01
    return spec


def squat(model: Model, draw: st.DrawFn) -> None:
    """A receipt of the tenant's, at a name nobody holds (and the operator never used)."""
    r = model.runs[draw(st.integers(0, RUNS - 1))]
    guess = draw(st.text("0123456789abcdef", min_size=10, max_size=10))
    name = draw(
        st.sampled_from(
            [
                receipt_name(r.kind, r.name, r.uid),
                receipt_name(r.kind, r.name, r.uid, guess),
                f"fake-{draw(st.integers(0, 5))}",
            ]
        )
    )
    if name in model.used_names() or model.world.fake.read(*RR, NS, name) is not None:
        return
    labels = draw(
        st.sampled_from(
            [{}, dict(OURS), {**OURS, "trainwarden.dev/workload-uid": r.uid[:63]}],
        )
    )
    annotations: dict[str, str] = {}
    seal = draw(st.sampled_from(["none", "copied", "made-up"]))
    stored = model.receipts()
    if seal == "copied" and stored:
        copied = draw(st.sampled_from(stored))["metadata"].get("annotations") or {}
        annotations = {k: v for k, v in copied.items() if k == SEAL}
    elif seal == "made-up":
        annotations = {SEAL: f"{key_id(model.ring.current)}.{guess * 6}{guess[:4]}"}
    meta = {"name": name, "namespace": NS, "labels": labels, "annotations": annotations}
    model.world.fake.put(
        {"apiVersion": RR[0], "kind": RR[1], "metadata": meta, "spec": _forged(model, draw)}
    )


def tenant_deletes(model: Model, draw: st.DrawFn, *, theirs: bool, replay: bool = False) -> None:
    """One of the tenant's own receipts deleted (`theirs`: a squatter gone), or one of the
    operator's (and, with `replay`, created again exactly as it was: a new uid and
    creationTimestamp, the same content)."""
    stored = [o for o in model.receipts() if _genuine(model, o) != theirs]
    if not stored:
        return
    obj = draw(st.sampled_from(stored))
    meta = obj["metadata"]
    model.world.fake.drop(*RR, NS, meta["name"])
    if replay:
        keep = {k: meta[k] for k in ("name", "namespace", "labels", "annotations") if k in meta}
        model.world.fake.put({**obj, "metadata": keep})


def tenant_annotates(model: Model, draw: st.DrawFn) -> None:
    r = model.runs[draw(st.integers(0, RUNS - 1))]
    names = [o["metadata"]["name"] for o in model.receipts()] or ["x"]
    value = draw(
        st.sampled_from(
            [None, None, json.dumps({"receipt": draw(st.sampled_from(names)), "held": 0.01}), "["]
        )
    )
    model.world.fake.edit(
        "batch/v1", "Job", NS, r.name, {"metadata": {"annotations": {RECEIPT: value}}}
    )
    model.world.sync()


def operator_writes(model: Model, index: int) -> None:
    r = model.runs[index]
    done = run(
        write(model.ledger, model.who, r, r.finished_at + 60, located=None, give_up_on_metrics=True)  # type: ignore[operator]
    )
    assert done in ("written", "exists")
    model.world.sync()


def operator_sweeps(model: Model, cap: int, ttl_hours: int) -> None:
    before = {o["metadata"]["name"]: o for o in model.receipts()}
    mark = len(model.world.fake.writes)
    run(
        sweep(
            model.world.fake,
            model.who,
            NS,
            now=model.world.now,
            ttl=timedelta(hours=ttl_hours),
            cap=cap,
        )
    )
    for w in model.world.fake.writes[mark:]:
        if w.verb == "delete" and w.outcome == "changed":
            model.deleted.append(before[w.name])


def rotate(model: Model) -> None:
    if model.rotations < 2:
        model.rotations += 1
        ring = model.ring
        model.ring = Keyring(KEYS[model.rotations], (ring.current, *ring.retired))


STEPS = [
    *["squat"] * 3,
    *["write"] * 3,
    "sweep",
    *["unsquat"] * 2,
    "delete",
    "replay",
    "annotate",
    "rotate",
]
"""What may happen next (repeated: more likely)."""


@st.composite
def histories(draw: st.DrawFn) -> Model:
    model = setup()
    for _ in range(draw(st.integers(0, 14))):
        step: str = draw(st.sampled_from(STEPS))
        model.steps.append(step)
        if step == "squat":
            squat(model, draw)
        elif step == "write":
            operator_writes(model, draw(st.integers(0, RUNS - 1)))
        elif step == "sweep":
            operator_sweeps(model, draw(st.integers(0, 4)), draw(st.sampled_from([1, 2, 10_000])))
        elif step in ("unsquat", "delete", "replay"):
            tenant_deletes(model, draw, theirs=step == "unsquat", replay=step == "replay")
        elif step == "annotate":
            tenant_annotates(model, draw)
        else:
            rotate(model)
    return model


@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(histories())
def test_whatever_a_tenant_writes_the_ledger_keeps_one_genuine_receipt_per_run(
    model: Model,
) -> None:
    for i in range(RUNS):  # every run tried again (a restart while its Job is still there)
        operator_writes(model, i)
    operator_sweeps(model, cap=100, ttl_hours=10_000)
    assert all(_genuine(model, obj) for obj in model.deleted), "a receipt it did not write deleted"
    for r in model.runs:
        mine = [
            o
            for o in model.receipts()
            if _genuine(model, o) and o["spec"]["workload"]["uid"] == r.uid
        ]
        assert len(mine) == 1, f"{r.name}: {[o['metadata']['name'] for o in mine]}"
    for w in model.world.fake.writes:
        if w.kind == "RunReceipt" and w.verb == "create" and w.outcome == "changed":
            made = RunReceiptSpec.model_validate(w.body["spec"])
            assert canonical(made) == canonical(model.specs[made.workload.uid])
    names = {n for n, _ in model.created()}
    for w in model.world.fake.writes:
        if w.kind == "Job" and w.verb == "patch":
            value = w.body["metadata"]["annotations"][RECEIPT]
            uid = next(r.uid for r in model.runs if r.name == w.name)
            _figures_of(value, model.specs[uid], names)


def _figures_of(value: str, spec: RunReceiptSpec, names: set[str]) -> None:
    """The annotation carries the run's own figures and names a receipt the operator wrote."""
    written: dict[str, Any] = json.loads(value)
    assert written["receipt"] in names
    assert written == json.loads(receipts.annotation(written["receipt"], spec))
