"""Running jobs joined with their GPUs' statistics, the evidence a job finding opens with, and the
tolerant threshold comparisons the job rules (idle-allocation, data-starvation, low-mfu, ...)
share. Not a rule: it has no RULE."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from diagnosis.core.rules.base import Threshold
from diagnosis.core.rules.facts import SnapshotFacts
from diagnosis.core.snapshot import ClusterSnapshot

NO_START = "running without a start time"
NO_GPUS = "running without allocated GPUs"
NO_UTIL = "no utilisation metric on any of its GPUs"

# The job columns the job rules read (the rest of the jobs frame is left behind).
JOB_COLUMNS = [
    "tenant",
    "queue",
    "pool",
    "kind",
    "started",
    "gpus_per_pod",
    "achieved_tflops_per_gpu",
]

TEXT_COLUMNS = ["tenant", "queue", "pool", "kind"]


def text(values: pd.Series) -> pd.Series:
    """A text column as Python objects with None (never NaN) where a value is missing, so that
    evidence built from it is plain JSON."""
    return values.astype(object).where(values.notna(), None)


# Fractions are compared with this tolerance, so that a value equal to a threshold up to float
# rounding (a mean of 0.05s, a p90 - p10 of 0.7 - 0.2) counts as equal to it.
EPS = 1e-9


def at_least(values: Any, threshold: float) -> Any:
    """``values >= threshold`` up to :data:`EPS` (NaN is never at least anything)."""
    return values >= threshold - EPS


def below(values: Any, threshold: float) -> Any:
    """``values < threshold`` up to :data:`EPS` (NaN is never below anything)."""
    return values < threshold - EPS


def at_most(values: Any, threshold: float) -> Any:
    """``values <= threshold`` up to :data:`EPS` (NaN is never at most anything)."""
    return values <= threshold + EPS


def running_jobs_with_stats(
    snapshot: ClusterSnapshot,
    facts: SnapshotFacts,
    min_runtime: float,
    *,
    kind: str | None = None,
) -> tuple[pd.DataFrame, dict[str, int]]:
    """Running jobs (of ``kind``, when given) started at least ``min_runtime`` seconds before
    ``as_of``, joined with :attr:`SnapshotFacts.job_gpu_stats` and a ``runtime_s`` column (in
    place of ``started``); plus
    the not-judged counts for running jobs without a start time or without allocated GPUs."""
    running = _RunningJobs.of(snapshot, facts)
    of_kind = running.kind == kind if kind is not None else np.ones(len(running.kind), bool)
    old_enough = of_kind & ~running.no_start & (running.runtime >= min_runtime)
    not_judged = {
        NO_START: int((of_kind & running.no_start & running.gpu_jobs).sum()),
        NO_GPUS: int((old_enough & ~running.has_gpus & running.gpu_jobs).sum()),
    }
    return running.judged[old_enough[running.judged_rows]], not_judged


class _RunningJobs:
    """What :func:`running_jobs_with_stats` filters, built once per snapshot (five rules ask):
    per running job (in ``snapshot.jobs`` order) its ``kind``, ``no_start``, ``runtime``,
    ``has_gpus`` (it has GPU statistics) and ``gpu_jobs`` (asks for GPUs); ``judged``: those
    started and with statistics, joined with them, at ``judged_rows`` of the running jobs."""

    def __init__(self, snapshot: ClusterSnapshot, facts: SnapshotFacts) -> None:
        jobs = snapshot.jobs
        running = jobs.loc[jobs["state"] == "running", JOB_COLUMNS].copy()
        for column in TEXT_COLUMNS:
            running[column] = text(running[column])
        self.kind = running["kind"].to_numpy(dtype=object)
        no_start = running["started"].isna()
        runtime = (snapshot.as_of - running["started"]).dt.total_seconds()
        stats = facts.job_gpu_stats
        self.no_start = no_start.to_numpy()
        self.runtime = runtime.to_numpy(dtype=float)
        self.has_gpus = running.index.isin(stats.index)
        self.gpu_jobs = (running["gpus_per_pod"] > 0).to_numpy()
        self.judged_rows = np.flatnonzero(~self.no_start & self.has_gpus)
        # without ``started`` (``runtime_s`` says it): the rules' to_dict("records") would box
        # a Timestamp per job for nothing
        judged = running.iloc[self.judged_rows].drop(columns="started").join(stats, how="inner")
        judged["runtime_s"] = runtime.reindex(judged.index)
        self.judged = judged

    @classmethod
    def of(cls, snapshot: ClusterSnapshot, facts: SnapshotFacts) -> _RunningJobs:
        cache = facts.__dict__
        if "_running_jobs" not in cache:
            cache["_running_jobs"] = cls(snapshot, facts)
        return cache["_running_jobs"]


def job_evidence(job_id: str, job: Mapping[str, Any]) -> dict[str, Any]:
    """The head of a job finding's evidence: the job's id, ``tenant``, ``queue``, ``pool``,
    ``kind``, ``runtime_s`` and ``gpus``, from one row of :func:`running_jobs_with_stats`."""
    return {
        "job": job_id,
        "tenant": job["tenant"],
        "queue": job["queue"],
        "pool": job["pool"],
        "kind": job["kind"],
        "runtime_s": int(job["runtime_s"]),
        "gpus": int(job["gpus"]),
    }


def min_runtime_threshold(default_s: int) -> Threshold:
    """The ``min_runtime`` threshold of a job rule (what :func:`running_jobs_with_stats` takes):
    only jobs started at least this long ago are judged."""
    return Threshold(
        "min_runtime", default_s, "only jobs started at least this long ago are judged", unit="s"
    )
