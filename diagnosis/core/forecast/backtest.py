"""Backtests: forecast at times t of a simulated run, then compare with the starts the run made.

One "real" simulator runs a scenario; at each forecast time it takes the snapshot a cycle would
collect, and the forecast sees only that snapshot and the runtimes of the jobs that had ended by
then (what the stored inventory holds in production). The real run then goes on past the last
forecast time by the horizon, and each job's forecast is compared with its real start:

- *absolute error*: ``|predicted start - real start|``; a forecast "not within the horizon" for
  a job that did start counts as the horizon's end (a lower bound of its error);
- *relative error*: the absolute error over the job's real wait (submission to real start), the
  figure the target (median <= 35 %) is stated in.

A job that did not start in the real run within the horizon is not scored; it is counted
(``censored``), and how many of them the forecast also put past the horizon (``censored_agreed``).

Scenarios: ``demo`` (``seed_scenario``, the demo cluster with its faults) and ``openb`` (the
Alibaba OpenB pod list replayed over time: :func:`openb_scenario`).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from diagnosis.core import snapshot as snapshot_format
from diagnosis.core.forecast.runtimes import RuntimeSample
from diagnosis.core.forecast.starts import ForecastSettings, StartForecast, forecast_starts
from diagnosis.core.simulate.cluster import ClusterSpec, NodeSpec, PoolSpec, QueueSpec
from diagnosis.core.simulate.jobs import JobSpec
from diagnosis.core.simulate.openb.trace import NodeTable, PodTable
from diagnosis.core.simulate.policy import Policy
from diagnosis.core.simulate.scenarios import Scenario, seed_scenario
from diagnosis.core.simulate.simulator import Simulator

DEMO_TIMES_S = tuple(float(h * 3600) for h in (0.5, 1, 1.5, 2, 2.5, 3, 3.5, 4, 4.5, 5, 5.5, 6))


@dataclass(frozen=True)
class Scored:
    job: str
    at_s: float
    predicted_s: float | None  # seconds after the forecast time; None: past the horizon
    real_s: float | None  # seconds after the forecast time; None: not within the horizon
    real_wait_s: float | None
    cause: str


@dataclass(frozen=True)
class BacktestResult:
    scenario: str
    times: int
    pending: int
    scored: int
    censored: int
    censored_agreed: int
    median_abs_error_s: float | None
    p90_abs_error_s: float | None
    median_rel_error: float | None
    p90_rel_error: float | None
    median_real_wait_s: float | None
    gpus: int
    cpu_s: float
    settings: dict[str, Any]
    by_cause: dict[str, dict[str, Any]] = field(default_factory=dict)
    target_rel_error: float = 0.35

    def as_dict(self) -> dict[str, Any]:
        out = dict(self.__dict__)
        out["meets_target"] = (
            None
            if self.median_rel_error is None
            else self.median_rel_error <= self.target_rel_error
        )
        return out


def backtest(
    scenario: Scenario,
    times_s: Sequence[float],
    settings: ForecastSettings | None = None,
    *,
    name: str | None = None,
) -> BacktestResult:
    """Forecast at each of ``times_s`` of ``scenario``'s run and score against the run."""
    settings = settings or ForecastSettings()
    started = time.process_time()
    real = scenario.build()
    made: list[tuple[float, StartForecast]] = []
    for t in sorted(times_s):
        snap = snapshot_format.load(real.snapshot(at=t))
        history = _history(real)
        forecast = forecast_starts(snap, history=history, settings=settings)
        made += [(t, job) for job in forecast.jobs]
    real.run_until(max(times_s) + settings.horizon_s)
    scored = []
    for t, job in made:
        state = real.job_by_id.get(job.job)
        real_start = None if state is None else state.first_started
        real_s = None
        if real_start is not None and real_start >= t and real_start - t <= settings.horizon_s:
            real_s = real_start - t
        elif real_start is not None and real_start < t:
            real_s = 0.0  # started in the very pass the snapshot was taken after
        wait = None if real_s is None else real_s + job.waited_s
        scored.append(Scored(job.job, t, job.start_s, real_s, wait, job.cause.kind))
    gpus = sum(node.gpus for node in scenario.spec.nodes())
    return _summarise(
        name or scenario.name, len(times_s), scored, settings, gpus, time.process_time() - started
    )


def _history(sim: Simulator) -> list[RuntimeSample]:
    """Runtimes of the jobs that ended so far (the inventory's history)."""
    return [
        RuntimeSample(job.spec.kind, job.spec.tenant, job.ended - job.first_started)
        for job in sim.ended_jobs
        if job.first_started is not None and job.ended is not None and job.end_reason != "failed"
    ]


def _summarise(
    name: str,
    times: int,
    scored: list[Scored],
    settings: ForecastSettings,
    gpus: int,
    cpu_s: float,
) -> BacktestResult:
    def figures(rows: list[Scored]) -> dict[str, Any]:
        done = [r for r in rows if r.real_s is not None]
        abs_err = np.array(
            [
                abs((r.predicted_s if r.predicted_s is not None else settings.horizon_s) - r.real_s)
                for r in done
            ]
        )
        waits = np.array([r.real_wait_s for r in done], dtype=float)
        rel = abs_err / np.maximum(waits, 60.0) if len(done) else np.array([])
        censored = [r for r in rows if r.real_s is None]
        return {
            "pending": len(rows),
            "scored": len(done),
            "censored": len(censored),
            "censored_agreed": sum(1 for r in censored if r.predicted_s is None),
            "median_abs_error_s": _q(abs_err, 0.5),
            "p90_abs_error_s": _q(abs_err, 0.9),
            "median_rel_error": _q(rel, 0.5, 3),
            "p90_rel_error": _q(rel, 0.9, 3),
            "median_real_wait_s": _q(waits, 0.5),
        }

    overall = figures(scored)
    by_cause = {
        kind: figures([r for r in scored if r.cause == kind])
        for kind in sorted({r.cause for r in scored})
    }
    return BacktestResult(
        scenario=name,
        times=times,
        gpus=gpus,
        cpu_s=round(cpu_s, 2),
        settings={
            "seeds": list(settings.seeds),
            "horizon_s": settings.horizon_s,
            "step_s": settings.step_s,
        },
        by_cause=by_cause,
        **overall,
    )


def _q(values: np.ndarray, q: float, digits: int = 1) -> float | None:
    return round(float(np.quantile(values, q)), digits) if len(values) else None


def demo_backtest(settings: ForecastSettings | None = None, seed: int = 0) -> BacktestResult:
    """The demo cluster (``seed_scenario``), forecast every 30 min from 0:30 to 6:00."""
    return backtest(seed_scenario(seed), DEMO_TIMES_S, settings, name="demo")


# -- OpenB over time ----------------------------------------------------------------------------


def openb_scenario(
    nodes: NodeTable,
    pods: PodTable,
    *,
    gpus: int = 512,
    span_s: float = 12 * 3600.0,
    max_runtime_s: float = 2 * 86400.0,
) -> Scenario:
    """The OpenB pod list as a workload over time: the GPU pods in creation order, their creation
    times mapped linearly onto ``span_s`` (the trace spreads ~8,000 pods over 149 days on 6,212
    GPUs, a load that never queues), their runtimes the trace's ``deletion - scheduled`` (at most
    ``max_runtime_s``), on the trace's first GPU nodes up to ``gpus`` GPUs in one pool. A shared
    pod (``gpu_milli < 1000``) takes a whole GPU: the discrete-event simulator has no GPU
    sharing (docs/forecasts.md "Limits")."""
    rows = []
    total = 0
    for name, count in zip(nodes.names, nodes.gpu_count.tolist(), strict=True):
        if count <= 0:
            continue
        rows.append(NodeSpec(str(name), gpus=int(count), gpu_model="openb"))
        total += int(count)
        if total >= gpus:
            break
    spec = ClusterSpec(
        pools=(PoolSpec("openb", tuple(rows)),),
        queues=(QueueSpec("openb", tenant="openb"),),
        name="openb",
    )
    created = pods.creation_time
    deleted = pods.deletion_time
    scheduled = pods.scheduled_time
    if created is None or deleted is None or scheduled is None:
        raise ValueError("the OpenB pod list has no creation, deletion or scheduled times")
    gpu_pods = np.flatnonzero(
        (pods.num_gpu > 0) & np.isfinite(created) & np.isfinite(scheduled) & np.isfinite(deleted)
    )
    order = gpu_pods[np.argsort(created[gpu_pods], kind="stable")]
    first, last = float(created[order[0]]), float(created[order[-1]])
    scale = span_s / max(last - first, 1.0)
    jobs = []
    for i in order.tolist():
        runtime = float(min(max(deleted[i] - scheduled[i], 60.0), max_runtime_s))
        gpus_per_pod = int(pods.num_gpu[i])
        jobs.append(
            JobSpec(
                str(pods.names[i]),
                arrival_s=round((float(created[i]) - first) * scale, 3),
                duration_s=runtime,
                gpus_per_pod=gpus_per_pod,
                tenant="openb",
                queue="openb",
            )
        )
    policy = Policy(queue_order="fifo", default_placement="binpack", retention_s=3600.0)
    return Scenario("openb", spec, policy, tuple(jobs))


def openb_backtest(
    nodes: NodeTable,
    pods: PodTable,
    settings: ForecastSettings | None = None,
    *,
    gpus: int = 512,
) -> BacktestResult:
    """:func:`openb_scenario`, forecast every hour from 2 h to 10 h."""
    scenario = openb_scenario(nodes, pods, gpus=gpus)
    times = tuple(float(h * 3600) for h in range(2, 11))
    return backtest(replace(scenario, seed=0), times, settings, name="openb")
