"""What a run's receipt may say of the checkpoint location it names: the status entry of
the CheckpointPolicy that scans it — only if that policy governs the run. The entries
come typed through the `checkpoint_scans` link (controllers/links.py), published by the
checkpoint slice; nothing here reads a CheckpointPolicy's raw status.

A run names its location in an annotation its own team writes, so the name alone
claims nothing: a PVC location is the run's namespace's by construction (`<pvc>:<path>`
names a claim there), but the policy scanning it must still govern that namespace; an
S3 prefix is declared in a cluster-scoped policy and belongs to the namespace of the
credentials it is scanned with (core/receipts.py `governs`). Otherwise the receipt says
the location is not governed for the run, and no history or waste is taken from it.
"""

from collections.abc import Iterable, Mapping

from trainwarden.api.v1alpha1.checkpoint_status import MAX_COMPLETIONS, PrunedLocation
from trainwarden.api.v1alpha1.receipt import Checkpoints
from trainwarden.controllers.links import CheckpointScan
from trainwarden.core import locations as loc
from trainwarden.core import receipts
from trainwarden.core.runs import CheckpointHistory, Run

Wanted = tuple[str, str, str, str]
"""(source, namespace, pvc, path) of a status entry."""


def _wanted(run: Run) -> Wanted | None:
    raw = run.checkpoint_path or ""
    try:
        if raw.startswith(loc.S3):
            return ("S3", "", "", loc.s3_url(raw))
        return ("PVC", run.namespace, *loc.parse_path(raw))
    except ValueError:
        return None


def _key(found: PrunedLocation) -> Wanted:
    return (found.source, found.namespace, found.pvc, found.path)


def _refused(scan: CheckpointScan, want: Wanted, run: Run, labels: Mapping[str, str]) -> str | None:
    where = (run.checkpoint_path or "")[:200]
    if scan.spec is None:
        return (
            f"{where} is not governed for namespace {run.namespace}: the spec of the "
            "CheckpointPolicy scanning it is invalid"
        )
    return receipts.governs(
        scan.spec,
        where=where,
        s3_url=want[3] if want[0] == "S3" else None,
        namespace=run.namespace,
        namespace_labels=labels,
    )


def _entry(
    scans: Iterable[CheckpointScan], run: Run, labels: Mapping[str, str]
) -> CheckpointScan | str | None:
    """The status entry of the location the run names, in the first policy (by name) that
    governs the run; else why a policy scanning it does not (None: none scans it)."""
    want = _wanted(run)
    if want is None:
        return None
    why: str | None = None
    for scan in sorted(scans, key=lambda s: s.policy):
        if _key(scan.location) != want:
            continue
        refused = _refused(scan, want, run, labels)
        if refused is None:
            return scan
        why = why or refused
    return why


def located(
    scans: Iterable[CheckpointScan], run: Run, namespace_labels: Mapping[str, str]
) -> receipts.Located | None:
    """What a CheckpointPolicy governing the run found at the location it names: the
    checkpoints its last run kept, and when the complete ones its scans saw were written."""
    if run.checkpoint_path is None:
        return None
    found = _entry(scans, run, namespace_labels)
    where = run.checkpoint_path[:1100]
    if not isinstance(found, CheckpointScan):
        return receipts.Located(Checkpoints(location=where), None, found or "")
    name, entry = found.policy, found.location
    times = [t.timestamp() for t in entry.completions]
    as_of = entry.completions_as_of
    history = CheckpointHistory(
        complete=times,
        as_of=as_of.timestamp() if as_of else None,
        horizon=min(times) if len(times) >= MAX_COMPLETIONS else None,
    )
    return receipts.Located(
        Checkpoints(
            location=where,
            policy=name,
            count=entry.kept,
            bytes=entry.bytes_retained,
            bytes_freed=entry.bytes_freed,
            as_of=entry.last_run,
        ),
        history,
        result=entry.result,
    )
