"""The shape of one budget evaluation, followed as data: how many of the operator's source
files it enters, and how often the call stack climbs from a lower layer to a higher one.

Run: .venv/bin/python bench/data_path.py [-v]

The controllers are wired as `trainwarden run` wires them (runtime.bootstrap and
runtime.wire: every listener and link) over the fake API server of the
unit tests (tests/fakekube.py through tests/world.py, the trainwarden.testing builders). An
Enforce budget of 4 GPU-hours, one 8-GPU Job running for an hour; traced with
`sys.setprofile`, in two phases:

1. the pod's event: a pod change reaches the cache and its listeners (the budget index);
2. the evaluation: the budget controller evaluates the budget, which suspends the Job and
   writes status, and the written status comes back as kopf delivers it.

A file is entered when one of its functions is called; its folder is its package
(trainwarden.testing, the fake's builders, is not the operator's and is not counted). A
climb is a call whose nearest operator caller sits in a lower layer than the callee,
layers read from the import-linter `layers` contracts in pyproject.toml (the most specific
contract that ranks both ends); counted as calls made and as distinct caller -> callee
function pairs. `-v` lists both.

The first figure counts every file the two phases enter, including the other slices'
listeners the same events reach (checkpoints, receipts, Kueue: they are wired as `run`
wires them). The second, "the budget's own path", leaves out what runs under a call into
another slice (a frame of trainwarden.checkpoints, .receipts, .kueue, .idle or .admission
on the stack): the files a reader follows to understand one budget.
"""

import asyncio
import sys
import tomllib
from collections import Counter
from datetime import timedelta
from pathlib import Path
from types import FrameType
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "operator" / "trainwarden"
sys.path.insert(0, str(ROOT / "tests"))  # the fake API server and its world

from trainwarden.testing.builders import (  # noqa: E402
    BudgetBuilder,
    JobBuilder,
    NamespaceBuilder,
    PodBuilder,
)
from world import World  # noqa: E402

NS = "team-a"
OTHER_SLICES = tuple(
    f"trainwarden.{s}" for s in ("checkpoints", "receipts", "kueue", "idle", "admission")
)
TB = ("trainwarden.dev/v1alpha1", "TrainingBudget")


def module_of(filename: str) -> str | None:
    """The dotted module of an operator source file; None for any other file."""
    path = Path(filename)
    if not path.is_relative_to(SOURCE) or path.relative_to(SOURCE).parts[0] == "testing":
        return None
    parts = ["trainwarden", *path.relative_to(SOURCE).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def layer_tables() -> list[dict[str, int]]:
    """Each import-linter `layers` contract as module prefix -> rank (0 the highest)."""
    with (ROOT / "pyproject.toml").open("rb") as f:
        contracts = tomllib.load(f)["tool"]["importlinter"]["contracts"]
    tables = []
    for contract in contracts:
        if contract.get("type") != "layers":
            continue
        containers = contract.get("containers") or [""]
        table: dict[str, int] = {}
        for rank, layer in enumerate(contract["layers"]):
            for name in layer.replace(":", "|").split("|"):
                name = name.strip().strip("()")
                for container in containers:
                    table[f"{container}.{name}" if container else name] = rank
        tables.append(table)
    return tables


def _match(table: dict[str, int], module: str) -> str | None:
    found = [p for p in table if module == p or module.startswith(p + ".")]
    return max(found, key=len, default=None)


def climbs(caller: str, callee: str, tables: list[dict[str, int]]) -> bool:
    """Whether `caller` sits in a lower layer than `callee`, by the most specific contract
    that ranks both in different layers."""
    best: tuple[int, bool] | None = None
    for table in tables:
        low, high = _match(table, caller), _match(table, callee)
        if low is None or high is None or table[low] == table[high]:
            continue
        specificity = len(low) + len(high)
        if best is None or specificity > best[0]:
            best = (specificity, table[low] > table[high])
    return best is not None and best[1]


def _under_other_slice(frame: FrameType | None) -> bool:
    """Whether the call runs in, or under a call into, a slice other than the budget's."""
    while frame is not None:
        module = module_of(frame.f_code.co_filename)
        if module is not None and module.startswith(OTHER_SLICES):
            return True
        frame = frame.f_back
    return False


class Tracer:
    def __init__(self) -> None:
        self.phase = ""
        self.files: dict[str, set[str]] = {}
        self.own: dict[str, set[str]] = {}
        """The files entered outside any call into another slice, by phase."""
        self.calls: Counter[tuple[str, str, str, str]] = Counter()
        """(caller module, its function, callee module, its function) -> calls made"""

    def __call__(self, frame: FrameType, event: str, arg: object) -> None:
        if event != "call":
            return
        callee = module_of(frame.f_code.co_filename)
        if callee is None:
            return
        self.files.setdefault(self.phase, set()).add(frame.f_code.co_filename)
        if not _under_other_slice(frame):
            self.own.setdefault(self.phase, set()).add(frame.f_code.co_filename)
        back = frame.f_back
        while back is not None and module_of(back.f_code.co_filename) is None:
            back = back.f_back  # through asyncio, the fake API server, the test's world
        if back is not None:
            caller = module_of(back.f_code.co_filename)
            assert caller is not None
            key = (caller, back.f_code.co_qualname, callee, frame.f_code.co_qualname)
            self.calls[key] += 1


def controllers(world: World) -> Any:
    """The controllers `trainwarden run` wires (runtime.bootstrap, runtime.wire), without
    Prometheus."""
    from trainwarden.budget.controller import BudgetController
    from trainwarden.cache.reads import PolicyReads
    from trainwarden.checkpoints.controller import CheckpointController
    from trainwarden.controllers.links import Links
    from trainwarden.idle.controller import IdleController
    from trainwarden.kueue.controller import KueueController
    from trainwarden.receipts.controller import ReceiptController
    from trainwarden.receipts.reconcile import ReceiptSettings
    from trainwarden.runtime import wire

    kube, cache, now, links = world.fake, world.cache, world.clock, Links()
    checkpoints = CheckpointController(kube, cache, None, None, clock=now)
    budgets = BudgetController(kube, cache, clock=now, links=links)
    idle = IdleController(kube, cache, None, clock=now)
    kueue = KueueController(kube, cache, links, controller="trainwarden.dev/budget")
    settings = ReceiptSettings()
    receipts = ReceiptController(kube, cache, budgets.index, None, settings, links=links, clock=now)
    wire(cache, budgets, idle, checkpoints, kueue, receipts, PolicyReads(), links)
    return budgets


async def scenario() -> Tracer:
    world = World()
    world.put(NamespaceBuilder(NS).build())
    budgets = controllers(world)
    spec = BudgetBuilder("b").namespaces(NS).accelerator_hours(4).enforce().grace("0s")
    budgets.policy_event("ADDED", world.put(spec.build()))
    job = world.put(JobBuilder("train", NS).gpus(8).build())
    pod = PodBuilder("train-0", NS).gpus(8).owned_by(job).started(world.now - timedelta(hours=1))
    world.fake.put(pod.build())
    tracer = Tracer()
    sys.setprofile(tracer)
    try:
        tracer.phase = "the pod's event"
        world.sync()
        tracer.phase = "the evaluation"
        await budgets._evaluate("b")
        budgets.policy_event("MODIFIED", world.read(*TB, None, "b"))
    finally:
        sys.setprofile(None)
    assert world.read(*TB, None, "b")["status"]["suspended"], "the budget suspended the Job"
    return tracer


def folders(files: set[str]) -> set[str]:
    """The package folders (or the top level, ".") the files are in."""
    return {str(Path(f).relative_to(SOURCE).parent) for f in files}


def main(argv: list[str]) -> None:
    tracer = asyncio.run(scenario())
    tables = layer_tables()
    up = {k: n for k, n in tracer.calls.items() if climbs(k[0], k[2], tables)}
    every = set().union(*tracer.files.values())
    print(
        f"files entered: {len(every)} in {len(folders(every))} folders; "
        f"climbs: {sum(up.values())} calls, {len(up)} distinct"
    )
    for phase, found in tracer.files.items():
        print(f"  {phase}: {len(found)} files in {len(folders(found))} folders")
    own = set().union(*tracer.own.values())
    print(
        f"the budget's own path (no other slice's listeners): {len(own)} files in "
        f"{len(folders(own))} folders"
    )
    for phase, found in tracer.own.items():
        print(f"  {phase}: {len(found)} files in {len(folders(found))} folders")
    if "-v" in argv:
        print("files:", *sorted(str(Path(f).relative_to(SOURCE)) for f in every), sep="\n  ")
        print(
            "of which not on the budget's own path:",
            *sorted(str(Path(f).relative_to(SOURCE)) for f in every - own),
            sep="\n  ",
        )
        print(
            "climbs:", *(f"{a}.{f} -> {b}.{g} ({n})" for (a, f, b, g), n in up.items()), sep="\n  "
        )


if __name__ == "__main__":
    main(sys.argv[1:])
