"""Start-time forecasts in the pure core (diagnosis/core/forecast/): predicted starts from the
simulator, learned runtimes, blocking causes and the finding each links, the backtest. No
database. Snapshots come from the builders (tests/support/builders.py) and from the demo
scenario's own simulator (``seed_scenario``), the shapes a cycle stores."""

from __future__ import annotations

import numpy as np
import pytest

from diagnosis.core import snapshot as snapshot_format
from diagnosis.core.diagnose import diagnose
from diagnosis.core.forecast.backtest import backtest
from diagnosis.core.forecast.causes import blocking_causes
from diagnosis.core.forecast.runtimes import RuntimeSample, learn_runtimes, work_for_seed
from diagnosis.core.forecast.starts import (
    ForecastSettings,
    forecast_settings_for,
    forecast_starts,
)
from diagnosis.core.simulate.scenarios import seed_scenario
from tests.support.builders import SnapshotBuilder

NO_ARRIVALS = ForecastSettings(seeds=(0, 1, 2), horizon_s=6 * 3600.0, arrivals=False)


def hour_long_history(n: int = 5) -> list[RuntimeSample]:
    return [RuntimeSample("training", "team-a", 3600.0) for _ in range(n)]


@pytest.fixture(scope="module")
def demo_snapshot() -> snapshot_format.ClusterSnapshot:
    """The demo at 3 h: two deadlocked sweep gangs and research-big blocked by fragmentation
    (docs/simulator.md "Scenarios")."""
    return snapshot_format.load(seed_scenario(0).build().snapshot(at=3 * 3600))


def test_a_pending_job_starts_when_the_running_job_it_waits_for_ends() -> None:
    snap = (
        SnapshotBuilder()
        .pool("a100", nodes=1, gpus=8)
        .job("running", gpus_per_pod=8, node="a100-000", ran="30m")
        .job("waiting", state="pending", gpus_per_pod=8, waited="10m")
        .build()
    )
    forecast = forecast_starts(snap, history=hour_long_history(), settings=NO_ARRIVALS)
    (job,) = forecast.jobs
    # learned: training jobs of team-a run an hour; 30 min are left in every seed
    assert job.job == "waiting"
    assert job.start_s == pytest.approx(1800.0)
    assert (job.low_s, job.high_s) == (pytest.approx(1800.0), pytest.approx(1800.0))
    assert job.started_in == job.seeds == 3
    assert job.cause.kind == "capacity"
    assert job.cause.figures["short_gpus"] == 8


def test_without_history_the_age_rule_gives_the_remaining_work() -> None:
    snap = (
        SnapshotBuilder()
        .pool("a100", nodes=1, gpus=8)
        .job("running", gpus_per_pod=8, node="a100-000", ran="2h")
        .job("waiting", state="pending", gpus_per_pod=8, waited="10m")
        .build()
    )
    (job,) = forecast_starts(snap, settings=NO_ARRIVALS).jobs
    assert job.start_s == pytest.approx(7200.0)  # remaining = its age, 2 h


def test_a_job_that_cannot_start_within_the_horizon_has_no_start() -> None:
    snap = (
        SnapshotBuilder()
        .pool("a100", nodes=1, gpus=8)
        .job("waiting", state="pending", pods=2, gpus_per_pod=8)
        .build()
    )
    (job,) = forecast_starts(snap, settings=NO_ARRIVALS).jobs
    assert (job.start_s, job.low_s, job.high_s, job.started_in) == (None, None, None, 0)
    assert job.cause.kind == "too-big"
    assert job.cause.figures["pool_gpus"] == 8


def test_runtimes_are_drawn_per_seed_from_the_jobs_group() -> None:
    snap = (
        SnapshotBuilder()
        .pool("a100", nodes=1, gpus=8)
        .job("running", gpus_per_pod=8, node="a100-000", ran="30m")
        .build()
    )
    history = [RuntimeSample("training", "team-a", s) for s in (1200.0, 2400.0, 3600.0, 7200.0)]
    runtimes = learn_runtimes(snap, history)
    draws = {work_for_seed(snap, runtimes, np.random.default_rng(s))["running"] for s in range(20)}
    # only runtimes longer than its 30 min so far, less those 30 min
    assert draws <= {600.0, 1800.0, 5400.0}
    assert len(draws) > 1


def test_a_quota_cause_says_how_much_the_capability_must_grow() -> None:
    snap = (
        SnapshotBuilder()
        .pool("a100", nodes=2, gpus=8)
        .queue("team-a", tenant="team-a", capability_gpus=8)
        .job("running", gpus_per_pod=8, node="a100-000")
        .job("waiting", state="pending", gpus_per_pod=4)
        .build()
    )
    cause = blocking_causes(snap)["waiting"]
    assert cause.kind == "quota"
    assert cause.figures["grow_by_gpus"] == 4
    assert cause.figures["queue"] == "team-a"


def test_a_job_that_fits_now_waits_only_for_the_order() -> None:
    snap = (
        SnapshotBuilder()
        .pool("a100", nodes=1, gpus=8)
        .job("first", state="pending", gpus_per_pod=4, waited="20m")
        .job("second", state="pending", gpus_per_pod=4, waited="10m")
        .build()
    )
    causes = blocking_causes(snap)
    assert causes["second"].kind == "order"
    assert causes["second"].figures["jobs_ahead"] == 1
    forecast = forecast_starts(snap, settings=NO_ARRIVALS).by_job()
    assert forecast["second"].start_s == pytest.approx(0.0)


def test_every_pending_demo_job_has_a_forecast_and_a_cause_linked_to_its_finding(
    demo_snapshot,
) -> None:
    diagnosis, _ = diagnose(demo_snapshot)
    findings = [(f.rule, f.subject) for f in diagnosis.findings]
    forecast = forecast_starts(demo_snapshot, findings=findings, settings=NO_ARRIVALS)
    pending = set(demo_snapshot.jobs.index[demo_snapshot.jobs["state"] == "pending"])
    by_job = forecast.by_job()
    assert set(by_job) == pending
    assert pending
    big = by_job["research-big"].cause
    assert big.kind == "fragmentation"
    assert big.finding == ("fragmentation", "pool:a100")
    gang = by_job["sweep-gang-a"].cause
    assert gang.kind == "partial-gang"
    assert gang.finding is not None
    assert gang.finding[0] == "gang-deadlock"
    assert "sweep-gang-a" in gang.finding[1]


def test_big_clusters_are_forecast_with_the_reduced_model() -> None:
    full, model = forecast_settings_for(1024)
    assert model == "full"
    assert len(full.seeds) == 5
    reduced, model = forecast_settings_for(16384)
    assert model == "reduced"
    assert len(reduced.seeds) == 2
    assert reduced.horizon_s <= 6 * 3600


def test_the_backtest_scores_forecasts_against_the_real_run() -> None:
    result = backtest(
        seed_scenario(0),
        (5400.0, 9000.0),
        ForecastSettings(seeds=(0, 1), horizon_s=12 * 3600.0),
        name="demo-short",
    )
    figures = result.as_dict()
    assert result.pending == result.scored + result.censored > 0
    assert result.scored > 0
    assert figures["median_rel_error"] is not None
    assert figures["median_rel_error"] >= 0
    assert figures["p90_abs_error_s"] >= figures["median_abs_error_s"]
    assert set(result.by_cause) <= {
        "partial-gang",
        "quota",
        "too-big",
        "fragmentation",
        "partial-gangs",
        "capacity",
        "order",
    }
