"""The summed-up idle window against the per-step judgment over drawn histories, on the
real Prometheus (the one the cluster runs, 2.55), with what live scraping rarely produces:
NaN samples, missed scrapes on one accelerator of several, values at the threshold, both
label conventions, series that stop. The histories are written into a TSDB block by
promtool (backfill) and served by a Prometheus of their own: no cluster needed.

Invariant: for every pod and every instant, the verdict and idle-since from the window's
summary (what the operator reads) equal those of the per-step range query (what it read
before, with the scrape-coverage filter in Python)."""

import asyncio
import math
import random
import subprocess
import urllib.parse
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest

from harness import CLUSTER_DIR, free_port, wait_for
from idle_steps import per_step
from trainwarden.adapters.prometheus import Prometheus
from trainwarden.core.idleness import Observation, judge
from trainwarden.testing.windows import grid

PROMTOOL = CLUSTER_DIR / "prometheus" / "usr" / "bin" / "promtool"
PROMETHEUS = CLUSTER_DIR / "bin" / "prometheus"
WINDOW, STEP, SCRAPE = timedelta(seconds=60), timedelta(seconds=10), 5.0
MIN_SAMPLES, THRESHOLD = 2, 5.0
HISTORY = 300  # seconds of samples per series
PODS = 150
INSTANTS = 40
SEED = 20261207
NS = "hist"


def values(rng: random.Random) -> Iterator[float | None]:
    """One accelerator's samples, a scrape apart: regimes of busy, idle, at-threshold and
    NaN, with missed scrapes (None) at the pod's own rate, and sometimes an end."""
    dropout = rng.choice([0.0, 0.0, 0.05, 0.3])
    stops_at = rng.choice([None, None, rng.randrange(HISTORY // 2, HISTORY)])
    regime = rng.choice(["busy", "idle", "edge"])
    for i in range(int(HISTORY / SCRAPE)):
        if stops_at is not None and i * SCRAPE >= stops_at:
            return
        if rng.random() < 0.08:
            regime = rng.choice(["busy", "idle", "edge", "nan"])
        if rng.random() < dropout:
            yield None
        elif regime == "busy":
            yield rng.uniform(THRESHOLD, 100)
        elif regime == "idle":
            yield rng.uniform(0, 4.99)
        elif regime == "edge":
            yield rng.choice([4.999, 5.0, 5.001])
        else:
            yield math.nan


def openmetrics(start: float, rng: random.Random) -> str:
    lines = ["# TYPE DCGM_FI_DEV_GPU_UTIL gauge"]
    for p in range(PODS):
        exported = rng.random() < 0.5
        for gpu in range(rng.choice([1, 1, 2, 3])):
            consumer = (
                f'exported_namespace="{NS}",exported_pod="p{p}",namespace="gpu-operator",'
                'pod="dcgm-exporter-0"'
                if exported
                else f'namespace="{NS}",pod="p{p}"'
            )
            labels = f'{consumer},gpu="{gpu}",UUID="GPU-{p}-{gpu}"'
            for i, v in enumerate(values(rng)):
                if v is not None:
                    at = start + i * SCRAPE + rng.uniform(0, 0.3)  # scrapes are not punctual
                    shown = "NaN" if math.isnan(v) else repr(v)
                    lines.append(f"DCGM_FI_DEV_GPU_UTIL{{{labels}}} {shown} {at:.3f}")
    return "\n".join(lines) + "\n# EOF\n"


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, float]]:
    """A Prometheus serving the drawn histories; (its URL, when they start)."""
    if not PROMTOOL.exists() or not PROMETHEUS.exists():
        pytest.skip("promtool and prometheus come with `make cluster`")
    here = tmp_path_factory.mktemp("history")
    start = math.floor(datetime.now(UTC).timestamp()) - 3 * 3600  # before any head block
    (here / "series.om").write_text(openmetrics(start, random.Random(SEED)))
    data = here / "data"
    subprocess.run(
        [str(PROMTOOL), "tsdb", "create-blocks-from", "openmetrics", "series.om", str(data)],
        cwd=here, check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    (here / "prometheus.yml").write_text("global: {}\n")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    process = subprocess.Popen(
        [
            str(PROMETHEUS),
            f"--config.file={here / 'prometheus.yml'}",
            f"--storage.tsdb.path={data}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=subprocess.DEVNULL, stderr=(here / "prometheus.log").open("w"),
    )  # fmt: skip
    try:
        wait_for(lambda: _ready(url), timeout=60, what="the history's Prometheus ready")
        yield url, float(start)
    finally:
        process.terminate()
        process.wait(timeout=30)


def _ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/-/ready", timeout=2) as response:
            return bool(response.status == 200)
    except OSError:
        return False


def summed(url: str, now: datetime) -> dict[str, Observation]:
    answer = asyncio.run(
        Prometheus(url).idle_window(
            "DCGM_FI_DEV_GPU_UTIL",
            namespaces=[NS],
            at=now,
            window=WINDOW,
            resolution=STEP,
            threshold=THRESHOLD,
            min_samples=MIN_SAMPLES,
        )
    )
    assert answer.steps.count == len(grid(now, WINDOW, STEP))

    def verdict(pod: str) -> Observation:
        coverage = answer.pods.get((NS, pod))
        return judge(coverage, answer.steps, now=now, window=WINDOW, resolution=STEP)

    return {f"p{p}": verdict(f"p{p}") for p in range(PODS)}


def test_the_summary_judges_every_drawn_history_as_every_step(
    history: tuple[str, float],
) -> None:
    url, start = history
    rng = random.Random(SEED + 1)
    seen: dict[str, int] = {}
    for _ in range(INSTANTS):
        now = datetime.fromtimestamp(
            start + rng.uniform(WINDOW.total_seconds(), HISTORY + 30) + rng.randrange(1000) / 1e3,
            UTC,
        )
        theirs = per_step(
            url, NS, now, window=WINDOW, step=STEP, threshold=THRESHOLD, min_samples=MIN_SAMPLES
        )
        ours = summed(url, now)
        nothing = Observation("Unknown")
        for pod in ours:  # a pod without a point in the range is Unknown either way
            assert ours[pod] == theirs.get(pod, nothing), (pod, now)
            seen[ours[pod].verdict] = seen.get(ours[pod].verdict, 0) + 1
    print(f"\nverdicts compared: {seen}")
    assert {"Idle", "Busy", "Suspect", "Unknown"} <= set(seen), "every verdict was drawn"
