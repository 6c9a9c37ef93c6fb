"""Predicted starts of a snapshot's pending jobs: the simulator replays the snapshot forward.

For each seed the simulator is rebuilt from the snapshot under the policy its scheduler reports
(queue order, placement, backfill, queue weights and capabilities: ``policy_of``,
``simulator_from_snapshot``), every live job's work drawn from the learned runtimes
(:mod:`diagnosis.core.forecast.runtimes`), new arrivals a Poisson stream at the recent rate
(``resampled_arrivals``). It runs in steps of ``step_s`` until every job that was pending has
started or ``horizon_s`` has passed. A job's predicted start is the median over the seeds, its
interval the earliest and the latest seed; a seed in which it did not start within the horizon
counts as "later than the horizon" (so a median past the horizon is unknown, never a number).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pandas as pd

from diagnosis.core.forecast.causes import BlockingCause, blocking_causes
from diagnosis.core.forecast.runtimes import (
    LearnedRuntimes,
    RuntimeSample,
    learn_runtimes,
    work_for_seed,
)
from diagnosis.core.gc_pause import paused_gc
from diagnosis.core.simulate.replay import (
    DEFAULT_LOOKBACK_S,
    policy_of,
    resampled_arrivals,
    simulator_from_snapshot,
)
from diagnosis.core.snapshot import ClusterSnapshot

REDUCED_FROM_GPUS = 8192  # the impact estimates' default (GPUOBS_IMPACT_REDUCED_FROM_GPUS)
REDUCED_SEEDS = 2
REDUCED_HORIZON_S = 6 * 3600.0
WorkOfSeed = Callable[[int], Mapping[str, float]]


@dataclass(frozen=True)
class ForecastSettings:
    seeds: tuple[int, ...] = (0, 1, 2, 3, 4)
    horizon_s: float = 24 * 3600.0
    step_s: float = 900.0
    lookback_s: float = DEFAULT_LOOKBACK_S
    arrivals: bool = True


def forecast_settings_for(
    gpus: int,
    settings: ForecastSettings | None = None,
    *,
    reduced_from_gpus: int = REDUCED_FROM_GPUS,
) -> tuple[ForecastSettings, str]:
    """The settings for a cluster of ``gpus`` GPUs and the model's name: ``full``, or from
    ``reduced_from_gpus`` on ``reduced`` (two seeds, six hours), so that a forecast stays within
    the impact queue's bound on a big cluster."""
    settings = settings or ForecastSettings()
    if gpus < reduced_from_gpus:
        return settings, "full"
    reduced = replace(
        settings,
        seeds=settings.seeds[:REDUCED_SEEDS],
        horizon_s=min(settings.horizon_s, REDUCED_HORIZON_S),
    )
    return reduced, "reduced"


@dataclass(frozen=True)
class StartForecast:
    """One pending job's forecast. Times are seconds after the snapshot's ``as_of``; None: not
    within the horizon (``start_s``: in half the seeds or more)."""

    job: str
    waited_s: float
    start_s: float | None
    low_s: float | None
    high_s: float | None
    started_in: int
    seeds: int
    cause: BlockingCause

    def as_dict(self) -> dict[str, Any]:
        return {
            "job": self.job,
            "waited_s": round(self.waited_s, 1),
            "start_s": _rounded(self.start_s),
            "low_s": _rounded(self.low_s),
            "high_s": _rounded(self.high_s),
            "started_in": self.started_in,
            "seeds": self.seeds,
            "cause": self.cause.as_dict(),
        }


@dataclass(frozen=True)
class Forecast:
    as_of: pd.Timestamp  # the snapshot's
    jobs: tuple[StartForecast, ...]
    settings: ForecastSettings
    model: str = "full"
    runtime_samples: int = 0
    cpu_s: float = 0.0

    def by_job(self) -> dict[str, StartForecast]:
        return {f.job: f for f in self.jobs}


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


def forecast_starts(
    snap: ClusterSnapshot,
    *,
    findings: Iterable[tuple[str, str]] = (),
    history: Iterable[RuntimeSample] = (),
    settings: ForecastSettings | None = None,
    model: str = "full",
) -> Forecast:
    """Every pending job's predicted start and blocking cause (see the module's docstring)."""
    settings = settings or ForecastSettings()
    started_at = time.process_time()
    jobs = snap.jobs
    pending_ids = [str(j) for j in jobs.index[(jobs["state"] == "pending").to_numpy()]]
    if not pending_ids:
        return Forecast(snap.as_of, (), settings, model)
    runtimes = learn_runtimes(snap, history)
    starts = simulated_starts(snap, pending_ids, runtimes_work(snap, runtimes), settings)
    causes = blocking_causes(snap, findings)
    waited = (snap.as_of - jobs.loc[pending_ids, "submitted"]).dt.total_seconds().tolist()
    out = []
    for job_id, waited_s in zip(pending_ids, waited, strict=True):
        seen = starts[job_id]
        out.append(
            StartForecast(
                job_id,
                max(float(waited_s), 0.0),
                *_median_and_interval(seen),
                started_in=int(np.isfinite(seen).sum()),
                seeds=len(seen),
                cause=causes[job_id],
            )
        )
    return Forecast(
        snap.as_of,
        tuple(out),
        settings,
        model,
        runtime_samples=runtimes.samples,
        cpu_s=round(time.process_time() - started_at, 3),
    )


def runtimes_work(snap: ClusterSnapshot, runtimes: LearnedRuntimes) -> WorkOfSeed:
    """A seed -> per-job work function over learned runtimes."""

    def work(seed: int) -> Mapping[str, float]:
        return work_for_seed(snap, runtimes, np.random.default_rng([seed, 0xF0CA]))

    return work


def simulated_starts(
    snap: ClusterSnapshot,
    job_ids: Sequence[str],
    work: WorkOfSeed,
    settings: ForecastSettings,
) -> dict[str, np.ndarray]:
    """Per job id, its start (seconds after ``as_of``) in each seed; +inf: not within the
    horizon. ``work(seed)`` gives the per-job work of a seed."""
    policy = policy_of(snap)
    out = {job_id: np.full(len(settings.seeds), np.inf) for job_id in job_ids}
    for position, seed in enumerate(settings.seeds):
        with paused_gc():
            sim = simulator_from_snapshot(snap, policy, seed, work=work(seed))
            if settings.arrivals:
                arrivals = resampled_arrivals(
                    snap, settings.horizon_s, seed, lookback_s=settings.lookback_s
                )
                sim.submit(a for a in arrivals if a.pool is None or a.pool in sim.pool_number)
            watched = [sim.job_by_id[j] for j in job_ids if j in sim.job_by_id]
            t = 0.0
            sim.apply([])  # a scheduling pass at once, even with no event due (nothing runs)
            sim.step(0)
            while t < settings.horizon_s:
                if all(job.first_started is not None for job in watched):
                    break
                t = min(t + settings.step_s, settings.horizon_s)
                sim.run_until(t)
            for job in watched:
                if job.first_started is not None:
                    out[job.spec.id][position] = float(job.first_started)
            del sim
    return out


def _median_and_interval(
    seen: np.ndarray,
) -> tuple[float | None, float | None, float | None]:
    ordered = np.sort(seen)
    median = float(np.median(ordered)) if len(ordered) else math.inf
    low = float(ordered[0]) if len(ordered) else math.inf
    high = float(ordered[-1]) if len(ordered) else math.inf

    def finite(value: float) -> float | None:
        return value if math.isfinite(value) else None

    return finite(median), finite(low), finite(high)
