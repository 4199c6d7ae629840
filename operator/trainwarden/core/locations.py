"""Which checkpoint directories a CheckpointPolicy governs, and the state of the jobs that
write into them: pure, over the PVCs and training jobs the shell has listed.

A training job names its checkpoint directory with the annotation
`trainwarden.dev/checkpoint-path: "<pvc>:<path>"` (or `"s3://<bucket>/<prefix>"`); it may
pin checkpoints (`trainwarden.dev/checkpoint-pin: "checkpoint-500,checkpoint-900"`) and
name the one it resumes from (`trainwarden.dev/resume-from`). A malformed annotation is a
problem to report, never a directory to prune.
"""

import contextlib
import hashlib
import posixpath
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from trainwarden.api.v1alpha1.checkpoint import cron_after
from trainwarden.api.v1alpha1.names import CHECKPOINT_PATH, CHECKPOINT_PIN, PREFIX, RESUME_FROM
from trainwarden.api.v1alpha1.types import time_zone

_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")

JobState = Literal["Running", "Finished", "Unknown"]


@dataclass(frozen=True)
class TrainingJob:
    """What the pruning controller needs of a training job that names its checkpoints:
    a batch/v1 Job, a JobSet, a Kubeflow job or a RayJob."""

    namespace: str
    name: str
    uid: str
    annotations: Mapping[str, str]
    finished_at: datetime | None
    """When it completed or failed; None while it runs (or is suspended)."""
    api_version: str = "batch/v1"
    kind: str = "Job"


def training_job(job: Mapping[str, Any]) -> TrainingJob:
    """The index entry of a batch/v1 Job that names a checkpoint directory."""
    meta = job.get("metadata") or {}
    finished_at = None
    for condition in (job.get("status") or {}).get("conditions") or []:
        if condition.get("type") in ("Complete", "Failed") and condition.get("status") == "True":
            stamp = str(condition.get("lastTransitionTime") or "")
            try:
                finished_at = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
            except ValueError:
                continue
    annotations = meta.get("annotations") or {}
    return TrainingJob(
        namespace=str(meta.get("namespace") or ""),
        name=str(meta.get("name") or ""),
        uid=str(meta.get("uid") or ""),
        annotations={k: str(v) for k, v in annotations.items() if k.startswith(PREFIX)},
        finished_at=finished_at,
    )


@dataclass(frozen=True)
class Location:
    namespace: str
    pvc: str
    path: str
    jobs: tuple[str, ...] = ()
    pins: frozenset[str] = frozenset()
    resume_from: frozenset[str] = frozenset()
    finished_at: datetime | None = None
    """When the last of its jobs finished, if every one has."""
    writers: int = field(default=0)
    """How many of its jobs still run."""

    @property
    def key(self) -> str:
        """A short stable name for the directory: pruner Job names and labels carry it."""
        raw = f"{self.namespace}/{self.pvc}:{self.path}".encode()
        return hashlib.sha256(raw).hexdigest()[:10]

    def state(self, now: datetime, delay: timedelta | None) -> JobState:
        """Finished only once every job writing here finished and `delay` has passed
        (None: the policy has no afterCompletion rule, so finishing changes nothing)."""
        if self.writers:
            return "Running"
        if self.finished_at is not None and delay is not None and now >= self.finished_at + delay:
            return "Finished"
        return "Unknown"


def parse_path(value: str) -> tuple[str, str]:
    """`<pvc>:<path>` -> (pvc, normalized absolute path); ValueError saying what is wrong."""
    pvc, sep, path = value.partition(":")
    if not sep or not _NAME.match(pvc):
        raise ValueError(f'{CHECKPOINT_PATH} must be "<pvc>:<path>", got {value!r}')
    path = path or "/"
    if not path.startswith("/"):
        raise ValueError(f"{CHECKPOINT_PATH}: the path must be absolute, got {path!r}")
    if ".." in path.split("/"):
        raise ValueError(f"{CHECKPOINT_PATH}: the path must stay inside the volume: {path!r}")
    return pvc, posixpath.normpath(re.sub("/+", "/", path))


S3 = "s3://"


def s3_url(value: str) -> str:
    """`s3://bucket/a//b` -> `s3://bucket/a/b/`, the form S3Source.url has; ValueError
    saying what is wrong."""
    bucket, _, prefix = value.removeprefix(S3).partition("/")
    parts = [p for p in prefix.split("/") if p]
    if not re.match(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$", bucket):
        raise ValueError(f'{CHECKPOINT_PATH} must be "s3://<bucket>/<prefix>", got {value!r}')
    if any(p in (".", "..") for p in parts):
        raise ValueError(f"{CHECKPOINT_PATH}: the prefix must not contain '.' or '..': {value!r}")
    return f"{S3}{bucket}/" + "".join(f"{p}/" for p in parts)


def s3_location(
    url: str, jobs: Iterable[TrainingJob], owner: str
) -> tuple[Location, list[tuple[TrainingJob, str]]]:
    """The S3 prefix `url` (normalized) with the state of the jobs whose annotation names
    it, and the jobs whose annotation is ignored, with why.

    A prefix belongs to the namespace `owner` of its credentials Secret (the team holding
    the keys to it, where its metrics are counted): only jobs there may name it. A job
    elsewhere in the policy's scope that names the same URL changes nothing (it could
    otherwise switch another team's prefix to afterCompletion, or pin and protect in it).
    A malformed annotation is reported by `locations`, not here."""
    found = Location("", "", url)
    foreign: list[tuple[TrainingJob, str]] = []
    for job in sorted(jobs, key=lambda j: (j.namespace, j.name)):
        raw = job.annotations.get(CHECKPOINT_PATH, "")
        try:
            if not raw.startswith(S3) or s3_url(raw) != url:
                continue
        except ValueError:
            continue
        if job.namespace != owner:
            foreign.append(
                (job, f"{CHECKPOINT_PATH}: {url} belongs to namespace {owner}, not {job.namespace}")
            )
            continue
        found = _with_job(found, job)
    return found, foreign


def _with_job(was: Location, job: TrainingJob) -> Location:
    finished = [t for t in (was.finished_at, job.finished_at) if t is not None]
    return replace(
        was,
        jobs=(*was.jobs, job.name),
        pins=was.pins | _names(job.annotations.get(CHECKPOINT_PIN)),
        resume_from=was.resume_from | _names(job.annotations.get(RESUME_FROM)),
        finished_at=max(finished) if finished else None,
        writers=was.writers + (job.finished_at is None),
    )


def _names(value: str | None) -> frozenset[str]:
    return frozenset(n.strip() for n in (value or "").split(",") if n.strip())


def locations(
    pvcs: Iterable[tuple[str, str]],
    default_path: str,
    jobs: Iterable[TrainingJob],
) -> tuple[list[Location], list[tuple[TrainingJob, str]]]:
    """Locations from PVCs picked by the policy's selector (at `default_path`) and from
    jobs' annotations; and the jobs whose annotation could not be read, with why."""
    found: dict[tuple[str, str, str], Location] = {}
    for namespace, pvc in pvcs:
        key = (namespace, pvc, posixpath.normpath(default_path))
        found[key] = Location(*key)
    problems: list[tuple[TrainingJob, str]] = []
    for job in sorted(jobs, key=lambda j: (j.namespace, j.name)):
        raw = job.annotations.get(CHECKPOINT_PATH)
        if raw is None:
            continue
        try:
            if raw.startswith(S3):
                s3_url(raw)  # an object-storage prefix: see s3_location
                continue
            pvc, path = parse_path(raw)
        except ValueError as error:
            problems.append((job, str(error)))
            continue
        key = (job.namespace, pvc, path)
        found[key] = _with_job(found.get(key) or Location(*key), job)
    return [found[k] for k in sorted(found)], problems


RETRY_FIRST = timedelta(seconds=30)
"""How soon a location is tried again after a failed or partial run."""
RETRY_MAX = timedelta(hours=1)
"""The longest wait between retries, however many runs in a row failed."""


def retry_delay(failed_runs: int) -> timedelta | None:
    """How long after the last run a location whose last `failed_runs` runs in a row failed
    (whole, or in part: a checkpoint that could not be judged or deleted) is tried again:
    30 s, doubling with each failure, at most an hour; None after a successful run."""
    if failed_runs <= 0:
        return None
    delay: timedelta = RETRY_FIRST * (2 ** min(failed_runs - 1, 16))
    return min(delay, RETRY_MAX)


def next_run(
    last_run: datetime | None,
    location: Location,
    *,
    interval: timedelta,
    after_delay: timedelta | None,
    created: datetime,
    cron: str | None = None,
    zone: str = "UTC",
    failed_runs: int = 0,
) -> datetime:
    """When a location's next run is scheduled, from status alone, so a restarted operator
    schedules (and names) the same run: at once the first time, `interval` after the last
    run (or, with `cron`, the first time it names after the last run or the creation), and
    once when its jobs have all finished (plus afterCompletion's delay). After a failed or
    partial run, sooner: `retry_delay(failed_runs)` after it, unless the schedule is sooner."""
    at = last_run + interval if last_run else created
    if cron is not None:
        base = (last_run or created).astimezone(time_zone(zone))
        with contextlib.suppress(ValueError):  # none within 50 years of base: the interval
            at = cron_after(cron, base).astimezone(UTC)
    if after_delay is not None and location.writers == 0 and location.finished_at is not None:
        finish = location.finished_at + after_delay
        if last_run is None or last_run < finish:
            at = min(at, finish)
    retry = retry_delay(failed_runs)
    if retry is not None and last_run is not None:
        at = min(at, last_run + retry)
    return at


FUTURE_SKEW = timedelta(minutes=5)
"""How far after its scan a checkpoint's time may be and still count (clocks differ a
little between a node and the operator); later is not a time a checkpoint was written."""


def completions(
    kept: Iterable[datetime], seen: Iterable[datetime], scanned_at: datetime, limit: int
) -> list[datetime]:
    """A location's completion history after a scan: what it kept and what the scan saw,
    to the second, newest first, at most `limit`; none later than the scan (give or take
    FUTURE_SKEW): an mtime from the future is not a checkpoint written before a failure."""
    latest = scanned_at + FUTURE_SKEW
    times = {t.astimezone(UTC).replace(microsecond=0) for t in (*kept, *seen) if t <= latest}
    return sorted(times, reverse=True)[:limit]
