"""What the models accept, the code can use: each place that interprets a policy's value
(time zones, cron expressions, limits and prices, the idle signal's steps, S3 endpoints and
regions, sizes), against everything its field admits. A value the code cannot use is an
invalid spec naming the field; the models mirror every CEL rule of the CRDs, for specs no
API server checked. The Isolation suite (test_isolation.py) runs whole policies through
every path; these are the holes it found, one by one."""

import asyncio
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, model_validator

from crdgen import CRON, durations, zone_words
from trainwarden.adapters.s3 import Bucket, Credentials
from trainwarden.api.v1alpha1 import CheckpointPolicySpec, IdleReclaimPolicySpec, TrainingBudgetSpec
from trainwarden.api.v1alpha1.names import CHECK_CONTROLLER
from trainwarden.api.v1alpha1.validation import parse_spec
from trainwarden.budget.decide import Memory
from trainwarden.budget.ledger import current_window
from trainwarden.budget.reconcile import reconcile
from trainwarden.checkpoints.controller import scans
from trainwarden.checkpoints.pruner import PrunerOutcome, PrunerReport, parse_report
from trainwarden.checkpoints.pvc import _run as pvc_run
from trainwarden.controllers.links import Links
from trainwarden.core.accounting import Usage
from trainwarden.core.admission import BudgetView, admit, budget_view
from trainwarden.core.budgets import Limits, crossing_time, percent_used
from trainwarden.core.locations import Location, next_run
from trainwarden.core.quantity import parse_quantity
from trainwarden.core.runs import Run
from trainwarden.kueue.controller import CHECKS, KueueController
from trainwarden.receipts.locations import located
from trainwarden.storage.s3_prefix import StoreError
from trainwarden.testing.builders import (
    AdmissionCheckBuilder,
    BudgetBuilder,
    JobBuilder,
    NamespaceBuilder,
    WorkloadBuilder,
)
from trainwarden.testing.windows import grid
from webhook_views import fed_view
from world import World

NOW = datetime(2026, 12, 1, 12, tzinfo=UTC)
KUEUE = "kueue.x-k8s.io/v1beta2"
TB = ("trainwarden.dev/v1alpha1", "TrainingBudget")
SCOPE = {"namespaces": ["a"]}
BUDGET = {"scope": SCOPE, "limits": {"acceleratorHours": 10}}
CHECKPOINTS = {"scope": SCOPE, "storage": {"pvc": {}}}
S3 = {
    "endpoint": "http://s3:9000",
    "bucket": "ckpts",
    "prefix": "runs/a",
    "credentials": {"namespace": "a", "name": "k"},
}
PROMETHEUS_POINTS = 11_000
"""Points per series Prometheus answers in one range query."""
FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def problems(model: type[BaseModel], spec: dict[str, Any]) -> list[str]:
    parsed = parse_spec(model, spec)
    assert isinstance(parsed, list), f"{spec} parsed"
    return parsed


@pytest.mark.parametrize("zone", ["Europe", "Asia", "America/Argentina", "Etc", "US"])
def test_a_directory_of_the_time_zone_database_is_an_unknown_time_zone(zone: str) -> None:
    """ZoneInfo("Europe") raises IsADirectoryError, which the validators let through: the
    budget's evaluation, the webhook's informer and every Kueue check pass raised."""
    budget = {**BUDGET, "period": {"type": "Daily", "timeZone": zone}}
    assert problems(TrainingBudgetSpec, budget) == [
        f"spec.period.timeZone: unknown time zone '{zone}': "
        'use an IANA name such as "UTC" or "Europe/Paris"'
    ]
    checkpoints = {**CHECKPOINTS, "schedule": {"cron": "0 3 * * *", "timeZone": zone}}
    [problem] = problems(CheckpointPolicySpec, checkpoints)
    assert problem.startswith(f"spec.schedule.timeZone: unknown time zone '{zone}'")


def test_every_name_of_the_time_zone_database_is_a_zone_the_periods_use_or_invalid() -> None:
    """Files and directories of the database (zone.tab, Europe/, right/UTC...), as a
    budget's period and a checkpoint schedule: parsed and computed with, or refused."""
    used = 0
    for zone in zone_words():
        budget = parse_spec(TrainingBudgetSpec, {**BUDGET, "period": {"timeZone": zone}})
        if isinstance(budget, TrainingBudgetSpec):
            used += 1
            window = current_window("Monthly", NOW, time_zone=budget.period.time_zone)
            assert window.end is not None
            assert window.start <= NOW < window.end
        schedule = {"cron": "0 3 * * *", "timeZone": zone}
        spec = parse_spec(CheckpointPolicySpec, {**CHECKPOINTS, "schedule": schedule})
        if isinstance(spec, CheckpointPolicySpec):
            at = next_run(
                None,
                Location("a", "ckpt", "/"),
                interval=timedelta(hours=1),
                after_delay=None,
                created=NOW,
                cron="0 3 * * *",
                zone=zone,
            )
            assert NOW < at <= NOW + timedelta(days=1, hours=1)
    assert used > 500, "the IANA zones themselves stay valid"


def exhausted_budgets() -> list[dict[str, Any]]:
    """Two exhausted Enforce budgets holding new work in namespace "team", as their status
    says; the first with period.timeZone: Europe (a directory of the database)."""
    bad = BudgetBuilder("a-bad").namespaces("team").accelerator_hours(1).enforce().unchecked()
    bad["spec"]["period"] = {"type": "Daily", "timeZone": "Europe"}
    good = BudgetBuilder("b-good").namespaces("team").accelerator_hours(1).enforce().build()
    holding = {"holding": True, "holdUntil": "2026-12-01T12:05:00Z", "observedGeneration": 1}
    exhausted = {
        "type": "Exhausted",
        "status": "True",
        "reason": "LimitReached",
        "lastTransitionTime": "2026-12-01T11:00:00Z",
    }
    for uid, body in (("u1", bad), ("u2", good)):
        body["metadata"].update(uid=uid, generation=1)
        body["status"] = {
            "admission": holding,
            "observedGeneration": 1,
            "conditions": [exhausted],
            "remaining": {"acceleratorHours": 0.0},
        }
    return [bad, good]


def test_the_webhook_skips_a_budget_with_an_unusable_time_zone_and_holds_for_the_others() -> None:
    """The webhook's informer called budget_view on a "Europe" budget and relisted forever:
    a Job the other, exhausted budget should hold came out unknown."""
    budgets = exhausted_budgets()
    assert budget_view(budgets[0]) is None, "the first has the unusable time zone"
    view = fed_view(budgets, {"team": {}})
    verdict = admit(JobBuilder("train", "team").gpus(1).build(), {}, view.budgets(), NOW)
    assert (verdict.outcome, verdict.held_by) == ("held", "b-good")


class Views:
    """The `budget_views` link over these budget bodies (BudgetController.budget_views)."""

    def __init__(self, bodies: list[dict[str, Any]]) -> None:
        self.bodies = bodies

    def budget_views(self) -> list[BudgetView]:
        return [v for b in self.bodies if (v := budget_view(b)) is not None]


def test_the_kueue_check_skips_a_budget_with_an_unusable_time_zone() -> None:
    """Every check pass read the budgets through budget_view and raised: Workloads stayed
    Pending whatever the other budgets said."""
    world = World(NOW)
    world.put(NamespaceBuilder("team").build())
    world.put(AdmissionCheckBuilder("budget").build())
    job = world.put(JobBuilder("train", "team").gpus(1).queue("lq").build())
    pending = WorkloadBuilder("job-train", "team").for_job(job).reserved("cq", NOW)
    workload = world.put(pending.check("budget", "Pending", NOW).max_execution(1800).build())
    bodies = exhausted_budgets()
    checks = KueueController(
        world.fake,
        world.cache,
        Links(budget_views=Views(bodies)),
        controller=CHECK_CONTROLLER,
        clock=world.clock,
    )
    asyncio.run(checks.process([CHECKS, workload["metadata"]["uid"]]))
    entries = world.read(KUEUE, "Workload", "team", "job-train")["status"]["admissionChecks"]
    [entry] = [e for e in entries if e["name"] == "budget"]
    assert entry["state"] == "Pending"
    assert entry["message"].startswith("TrainingBudget b-good is exhausted"), entry


def test_a_cron_expression_that_never_fires_is_an_invalid_spec() -> None:
    """ "0 0 LW * */7" (the last weekday of a month that is also a Sunday: cronsim reads a
    day-of-week starting with * as AND) parsed, then every evaluation raised StopIteration."""
    schedule = {"cron": "0 0 LW * */7"}
    [problem] = problems(CheckpointPolicySpec, {**CHECKPOINTS, "schedule": schedule})
    assert problem == ("spec.schedule: cron '0 0 LW * */7': it names no time in the next 50 years")


@FUZZ
@given(
    st.lists(st.sampled_from(CRON), min_size=5, max_size=5).map(" ".join),
    st.sampled_from(["UTC", "Europe/Paris", "Australia/Lord_Howe", "Pacific/Apia"]),
    st.integers(-3 * 365 * 86400, 3 * 365 * 86400).map(lambda s: NOW + timedelta(seconds=s)),
)
@example("0 0 LW * */7", "UTC", NOW)
def test_every_schedule_the_model_accepts_names_a_next_run(
    cron: str, zone: str, last: datetime
) -> None:
    schedule = {"cron": cron, "timeZone": zone}
    if isinstance(parse_spec(CheckpointPolicySpec, {**CHECKPOINTS, "schedule": schedule}), list):
        return
    at = next_run(
        last,
        Location("a", "ckpt", "/"),
        interval=timedelta(hours=1),
        after_delay=None,
        created=NOW,
        cron=cron,
        zone=zone,
    )
    assert at > last


def test_a_limit_no_date_can_reach_has_no_projected_exhaustion() -> None:
    """A budget of 1e300 accelerator-hours burning 1 an hour: timedelta(hours=1e300)
    raised OverflowError in every evaluation."""
    limits = Limits(accelerator_hours=1e300)
    used, rate = Usage({"nvidia.com/gpu": 2.0}), Usage({"nvidia.com/gpu": 1.0})
    assert crossing_time(used, rate, limits, 100, NOW) is None
    near = crossing_time(used, rate, Limits(accelerator_hours=4.0), 100, NOW)
    assert near == NOW + timedelta(hours=2), "a reachable crossing is still exact"


def test_a_limit_next_to_zero_is_a_finite_percentage() -> None:
    """5e-324 accelerator-hours: 100 * 2 / 5e-324 is infinity, which no JSON carries (and
    math.floor(inf) raised OverflowError writing the status)."""
    percent, dimension = percent_used(
        Usage({"nvidia.com/gpu": 2.0}), Limits(accelerator_hours=5e-324)
    )
    assert (percent, dimension) == (1e9, "acceleratorHours")


@pytest.mark.parametrize(
    "rates",
    [
        {"acceleratorHour": [{"price": 1e308}]},
        {"cpuCoreHour": 1.7e308},
        {"memoryGiBHour": 1e10},
    ],
)
def test_a_price_that_would_overflow_a_cost_is_an_invalid_spec(rates: dict[str, Any]) -> None:
    """A price of 1e308 times two GPUs is an infinite cost: the status could not be
    written (OverflowError, or Infinity the API server refuses)."""
    [problem] = problems(TrainingBudgetSpec, {**BUDGET, "rates": rates})
    assert "less than or equal to 1000000000" in problem


@pytest.mark.parametrize(
    ("signal", "problem"),
    [
        ({"window": "36500d"}, "window 36500d at resolution 1m is 52560002 points; Prometheus"),
        ({"window": "1d", "resolution": "1500ms"}, "resolution 1s500ms must be whole seconds"),
        ({"window": "1m", "resolution": "500ms"}, "resolution 500ms must be whole seconds"),
    ],
)
def test_an_idle_signal_prometheus_cannot_answer_is_an_invalid_spec(
    signal: dict[str, str], problem: str
) -> None:
    """36500d at 1m laid out 52 million steps in the operator's event loop at every
    evaluation (every controller stalled); 500ms queried ranges of "0s"."""
    [found] = problems(IdleReclaimPolicySpec, {"scope": SCOPE, "signal": signal})
    assert found.startswith(f"spec.signal: {problem}"), found


@FUZZ
@given(durations(), durations())
def test_every_signal_the_model_accepts_is_a_query_prometheus_answers(
    window: str, resolution: str
) -> None:
    spec = parse_spec(
        IdleReclaimPolicySpec,
        {"scope": SCOPE, "signal": {"window": window, "resolution": resolution}},
    )
    if isinstance(spec, list):
        return
    signal = spec.signal
    assert signal.resolution % timedelta(seconds=1) == timedelta(0), "ranges are in seconds"
    assert (signal.window + 2 * signal.resolution) / signal.resolution <= PROMETHEUS_POINTS
    steps = grid(NOW, signal.window + 2 * signal.resolution, signal.resolution)
    assert len(steps) <= PROMETHEUS_POINTS + 1


@pytest.mark.parametrize(
    ("spec", "problem"),
    [
        (
            {
                "scope": {
                    "namespaceSelector": {"matchExpressions": [{"key": "t", "operator": "In"}]}
                }
            },
            "values must be set for In/NotIn and empty for Exists/DoesNotExist",
        ),
        (
            {
                "scope": {
                    "namespaceSelector": {
                        "matchExpressions": [{"key": "t", "operator": "Exists", "values": ["a"]}]
                    }
                }
            },
            "values must be set for In/NotIn and empty for Exists/DoesNotExist",
        ),
        ({"limits": {}}, "set at least one limit"),
        (
            {"limits": {"acceleratorHoursByResource": {"nvidia.com/gpu": -1}}},
            "must not be negative",
        ),
        ({"thresholds": {"warn": 90, "enforce": 80}}, "warn must not be above enforce"),
        ({"limits": {"cost": 100}}, "a cost limit needs rates to price usage"),
    ],
)
def test_every_cel_rule_of_a_budget_holds_where_no_api_server_checked(
    spec: dict[str, Any], problem: str
) -> None:
    """A budget read from a file (`trainwarden estimate --budgets`), or stored before a
    rule existed: the model says what the API server would have."""
    found = problems(TrainingBudgetSpec, {**BUDGET, **spec})
    assert any(problem in p for p in found), found


@pytest.mark.parametrize(
    ("s3", "field"),
    [
        ({"region": "a b"}, "region"),
        ({"region": "123"}, "region"),
        ({"endpoint": "http://["}, "endpoint"),
        ({"endpoint": "http://a b"}, "endpoint"),
        ({"endpoint": "http://s3:99999"}, "endpoint"),
        ({"credentials": {"namespace": "a b", "name": "k"}}, "credentials.namespace"),
        ({"credentials": {"namespace": "a", "name": "../k"}}, "credentials.name"),
    ],
)
def test_an_s3_source_boto3_or_the_api_refuses_is_an_invalid_spec(
    s3: dict[str, Any], field: str
) -> None:
    """boto3 refuses the region "a b" (InvalidRegionError) or the endpoint "http://[" when
    it makes the client, at every run: the policy's evaluation raised instead of saying so."""
    spec = {"scope": SCOPE, "storage": {"s3": {**S3, **s3}}}
    [problem] = problems(CheckpointPolicySpec, spec)
    assert problem.startswith(f"spec.storage.s3.{field}: "), problem


def test_a_bucket_boto3_cannot_make_a_client_for_is_a_store_error() -> None:
    with pytest.raises(StoreError, match="could not reach s3://ckpts"):
        Bucket("http://s3:9000", "a b", "ckpts", Credentials("k", "s"))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.sampled_from(["http://", "https://"]),
    st.one_of(
        st.from_regex(r"\A[a-z0-9.\-\[\]:]{1,20}\Z"), st.sampled_from(["s3", "[::1]", "10.0.0.1"])
    ),
    st.one_of(st.none(), st.integers(0, 99999)),
    st.from_regex(r"\A[a-zA-Z0-9 ._/-]{0,12}\Z"),
)
def test_every_s3_source_the_model_accepts_is_a_client_boto3_makes(
    scheme: str, host: str, port: int | None, region: str
) -> None:
    endpoint = f"{scheme}{host}{'' if port is None else f':{port}'}"
    spec = parse_spec(
        CheckpointPolicySpec,
        {"scope": SCOPE, "storage": {"s3": {**S3, "endpoint": endpoint, "region": region}}},
    )
    if isinstance(spec, CheckpointPolicySpec):
        assert spec.storage.s3 is not None
        Bucket(spec.storage.s3.endpoint, spec.storage.s3.region, "ckpts", Credentials("k", "s"))


def test_a_size_too_long_to_print_is_an_invalid_spec() -> None:
    """maxTotalSize of 5,000 digits parsed; the retention note that names it raised
    ValueError (Python prints integers of at most 4,300 digits)."""
    huge = "9" * 5000
    [problem] = problems(CheckpointPolicySpec, {**CHECKPOINTS, "retention": {"maxTotalSize": huge}})
    assert problem.startswith("spec.retention.maxTotalSize: String should have at most 32")
    assert str(int(parse_quantity("9" * 32 + "Ei")))


def test_a_checkpoint_path_with_a_nul_is_an_invalid_spec() -> None:
    """No file system has a name with a NUL: the pruner's open raised ValueError."""
    pvc = {"path": "/runs\x00/x"}
    [problem] = problems(CheckpointPolicySpec, {**CHECKPOINTS, "storage": {"pvc": pvc}})
    assert problem.startswith("spec.storage.pvc.path: String should match pattern")


def test_any_exception_of_a_validator_is_a_reason() -> None:
    """IsADirectoryError is an OSError: parse_spec caught ValueError, OverflowError and
    RecursionError only."""

    class Odd(BaseModel):
        @model_validator(mode="after")
        def _lookup(self) -> "Odd":
            raise IsADirectoryError(21, "Is a directory")

    assert parse_spec(Odd, {}) == ["spec: IsADirectoryError: [Errno 21] Is a directory"]


@pytest.mark.parametrize("at", ["9999-12-31T23:59:59-14:00", "0001-01-01T00:00:00+14:00"])
def test_a_status_time_no_date_holds_is_read_as_absent(at: str) -> None:
    """RFC 3339 spells both, the schema admits both, and neither is a date in UTC (the
    years 10000 and 0): a budget whose status said so (a restored backup, an edit) raised
    ValueError in every evaluation."""
    world = World(NOW)
    world.put(NamespaceBuilder("a").build())
    made = BudgetBuilder("b").namespaces("a").accelerator_hours(1).period("Daily").build()
    body = world.put({**made, "status": {"periodStart": at, "periodEnd": at}})
    asyncio.run(reconcile(body, None, world.cache, world.fake, Memory(), world.now))
    status = world.read(*TB, None, "b")["status"]
    assert status["periodStart"] == "2026-12-01T00:00:00Z", status


def test_a_checkpoint_status_count_below_zero_is_no_location_for_receipts() -> None:
    """A CheckpointPolicy's status saying kept: -1 where a run's checkpoints are: the
    receipts' lookup, in the cache's listener as the run closed, raised ValidationError
    (the receipt's count is never negative), so the listeners after it missed the change."""
    entry = {"source": "PVC", "namespace": "a", "pvc": "ckpt", "path": "/runs", "kept": -1}
    policy = {"metadata": {"name": "cp"}, "spec": CHECKPOINTS, "status": {"locations": [entry]}}
    run = Run("batch/v1", "Job", "a", "train", "u", NOW.timestamp(), NOW.timestamp())
    run.checkpoint_path = "ckpt:/runs"
    found = located(scans(policy), run, {})
    assert found is not None
    assert found.checkpoints.policy == "", "an entry the model refuses is no entry"


def test_a_pruner_report_time_no_date_holds_is_refused_not_raised() -> None:
    """The report accepted completion times up to 2**40 s (the year 36812); the run was
    then recorded with datetime.fromtimestamp, which raised ValueError out of the policy's
    evaluation (every location of the policy, every team's)."""
    report = {"dryRun": False, "scanned": 1, "kept": 1, "deletedCount": 0, "bytesFreed": 0}
    report |= {"bytesRetained": 0, "completed": [2**39]}
    parsed = parse_report(json.dumps(report))
    outcome = PrunerOutcome("prune-1", NOW, parsed if isinstance(parsed, PrunerReport) else None)
    recorded = pvc_run(outcome)
    assert not recorded.completed, "no time taken from a report the operator refuses"
