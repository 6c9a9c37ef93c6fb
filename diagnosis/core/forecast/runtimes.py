"""Runtimes learned per job kind and tenant, and the work each live job is given in one seed.

A snapshot says when a job started, never when it will end (no scheduler adapter reports a time
limit in ``gpuobs.snapshot/v1`` yet). So the forecast learns how long jobs run from the ones that
ended: the snapshot's own ended jobs and the cluster's history the caller passes (the stored
inventory's ended jobs). Samples are grouped by ``(kind, tenant)``, then ``(kind, any tenant)``,
then all jobs; a group needs :data:`MIN_SAMPLES` runtimes to be used.

Per seed, a running job of age ``a`` gets a runtime drawn from its group's runtimes longer than
``a`` (its remaining work: the draw minus ``a``); a pending job a draw from its group. A job older
than every runtime of its group, or with no group, keeps the simulator's own estimate (the age
rule, ``diagnosis.core.simulate.replay.remaining_from_age``). Drawing per seed, rather than taking
the median, is what gives the forecast its interval: seeds differ in runtimes as well as in
arrivals.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np

from diagnosis.core.snapshot import ClusterSnapshot

MIN_SAMPLES = 3
ANY = "*"


@dataclass(frozen=True)
class RuntimeSample:
    """One ended job's runtime (seconds from start to end)."""

    kind: str
    tenant: str
    runtime_s: float


@dataclass(frozen=True)
class LearnedRuntimes:
    """Sorted runtimes (seconds) per ``(kind, tenant)`` key; ``ANY`` stands for every value."""

    groups: Mapping[tuple[str, str], np.ndarray]

    @property
    def samples(self) -> int:
        return len(self.groups.get((ANY, ANY), ()))

    def group_of(self, kind: str, tenant: str) -> np.ndarray | None:
        for key in ((kind, tenant), (kind, ANY), (ANY, ANY)):
            values = self.groups.get(key)
            if values is not None and len(values) >= MIN_SAMPLES:
                return values
        return None

    def median_s(self, kind: str, tenant: str) -> float | None:
        values = self.group_of(kind, tenant)
        return None if values is None else float(np.median(values))


def snapshot_samples(snap: ClusterSnapshot) -> list[RuntimeSample]:
    """The runtimes of the snapshot's ended jobs."""
    jobs = snap.jobs
    ended = jobs[jobs["ended"].notna() & jobs["started"].notna()]
    runtime = (ended["ended"] - ended["started"]).dt.total_seconds().to_numpy()
    kinds = ended["kind"].fillna("").astype(str).tolist()
    tenants = ended["tenant"].fillna("").astype(str).tolist()
    return [
        RuntimeSample(kind, tenant, float(seconds))
        for kind, tenant, seconds in zip(kinds, tenants, runtime.tolist(), strict=True)
        if seconds > 0
    ]


def learn_runtimes(snap: ClusterSnapshot, history: Iterable[RuntimeSample] = ()) -> LearnedRuntimes:
    """Runtimes of the snapshot's ended jobs and of ``history`` (a job in both counts twice:
    harmless for a median, and the caller's history is the stored inventory, which the snapshot
    only overlaps at its edge)."""
    buckets: dict[tuple[str, str], list[float]] = {}
    for sample in [*snapshot_samples(snap), *history]:
        if not sample.runtime_s > 0:
            continue
        for key in (
            (sample.kind, sample.tenant),
            (sample.kind, ANY),
            (ANY, ANY),
        ):
            buckets.setdefault(key, []).append(float(sample.runtime_s))
    return LearnedRuntimes({key: np.sort(np.array(v)) for key, v in buckets.items()})


def work_for_seed(
    snap: ClusterSnapshot, runtimes: LearnedRuntimes, rng: np.random.Generator
) -> dict[str, float]:
    """Per live job id, its work in one seed: remaining work for a running job, whole work for a
    pending one; jobs the learned runtimes cannot speak for are left out."""
    jobs = snap.jobs
    live = jobs[jobs["state"].isin(["pending", "running"])]
    ids = live.index.tolist()
    states = live["state"].tolist()
    kinds = live["kind"].fillna("").astype(str).tolist()
    tenants = live["tenant"].fillna("").astype(str).tolist()
    started = live["started"]
    ages = (snap.as_of - started).dt.total_seconds().fillna(0.0).tolist()
    out: dict[str, float] = {}
    for job_id, state, kind, tenant, age in zip(ids, states, kinds, tenants, ages, strict=True):
        values = runtimes.group_of(kind, tenant)
        if values is None:
            continue
        if state == "running":
            longer = values[np.searchsorted(values, age, side="right") :]
            if not len(longer):
                continue
            out[job_id] = float(longer[int(rng.integers(len(longer)))] - age)
        else:
            out[job_id] = float(values[int(rng.integers(len(values)))])
    return out
