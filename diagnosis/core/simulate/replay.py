"""What-if replays: rebuild a simulator from a snapshot and run it forward under a policy.

:func:`simulator_from_snapshot` puts the snapshot's cluster into a simulator at its ``as_of``
(simulated second 0): nodes with their pools, GPU models, topology and states, unhealthy GPUs,
queues with their weights, and every pending or running job -- running jobs and partial gangs
bound to exactly the GPUs the snapshot lists. What a snapshot cannot say is estimated:

- **remaining work** of a running job: as long as it has run so far (for a job whose length is
  unknown, the median remaining life of a heavy-tailed runtime distribution is about its age),
  clamped to [10 min, 7 days];
- **work** of a pending job: the median runtime of the snapshot's ended jobs of the same size
  class (any class when none; one hour when the snapshot has no ended job);
- **metric profile** of a job: from its GPUs' window statistics (idle, data-starved, low-MFU or
  healthy; inference for inference jobs).

:func:`replay` runs that simulator ``horizon_s`` forward once per seed, with arrivals resampled
per seed from the jobs the snapshot shows as submitted in the last ``lookback_s`` (a Poisson
stream at their rate, shapes drawn from them). Arrivals depend only on the seed, never on the
policy, so a current and a proposed setting are compared on the same workloads.
"""

from __future__ import annotations

import math
from collections import namedtuple
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from diagnosis.core import snapshot as snapshot_format
from diagnosis.core.gc_pause import paused_gc
from diagnosis.core.simulate.cluster import ClusterSpec, NodeSpec, PoolSpec, QueueSpec
from diagnosis.core.simulate.jobs import (
    DATA_STARVED,
    HEALTHY,
    IDLE,
    INFERENCE,
    LOW_MFU,
    PARTIAL,
    JobSpec,
    size_class,
)
from diagnosis.core.simulate.policy import PLACEMENTS, QUEUE_ORDERS, Change, Policy
from diagnosis.core.simulate.simulator import Simulator
from diagnosis.core.simulate.summary import Summary

MIN_REMAINING_S = 600.0
MAX_REMAINING_S = 7 * 86400.0
DEFAULT_WORK_S = 3600.0
DEFAULT_LOOKBACK_S = 3 * 3600.0

SnapshotSource = snapshot_format.ClusterSnapshot | Mapping[str, Any] | str | Path | bytes


def load_snapshot(source: SnapshotSource) -> snapshot_format.ClusterSnapshot:
    if isinstance(source, snapshot_format.ClusterSnapshot):
        return source
    return snapshot_format.load(source)


def policy_of(snap: snapshot_format.ClusterSnapshot) -> Policy:
    """The policy a snapshot's scheduler reports (placement per pool; for the simulator's own
    snapshots also queue order and backfill), defaults elsewhere."""
    scheduler = snap.scheduler
    placement = {
        pool: name
        for pool, name in (scheduler.get("placement") or {}).items()
        if name in PLACEMENTS
    }
    order = scheduler.get("queue_order")
    backfill = scheduler.get("backfill")
    return Policy(
        queue_order=order if order in QUEUE_ORDERS else "fifo",
        placement=placement,
        backfill=backfill if isinstance(backfill, bool) else True,
        window_s=int(snap.window_s),
    )


def cluster_of(snap: snapshot_format.ClusterSnapshot) -> ClusterSpec:
    """The snapshot's nodes (grouped by pool, in order of appearance) and queues."""
    gpus = snap.gpus
    gpus = gpus[~gpus[["node", "index"]].duplicated().to_numpy()]  # MIG instances: one GPU
    rows_of = _rows_by_key(gpus["node"].to_numpy())
    gpu_index = gpus["index"].to_numpy()
    gpu_domain = gpus["nvlink_domain"].to_numpy()
    gpu_numa = gpus["numa"].to_numpy()
    pools: dict[str, list[NodeSpec]] = {}
    for node in snap.nodes.itertuples(index=False):
        rows = rows_of.get(node.name)
        domains: tuple[tuple[int, ...], ...] | None = None
        numa: tuple[int, ...] | None = None
        if rows is not None and len(rows):
            index = gpu_index[rows]
            domain = gpu_domain[rows]
            if (domain >= 0).any():
                domains = tuple(
                    tuple(int(i) for i in index[domain == d])
                    for d in sorted(set(domain[domain >= 0].tolist()))
                )
            numa_values = gpu_numa[rows]
            if (numa_values >= 0).all():
                numa = tuple(int(v) for v in numa_values)
        pools.setdefault(node.pool, []).append(
            NodeSpec(
                node.name,
                gpus=int(node.gpus),
                gpu_model=node.gpu_model or "unknown",
                nvlink_domains=domains,
                numa=numa,
            )
        )
    queues = tuple(
        QueueSpec(
            q.name,
            tenant=q.tenant,
            weight=float(q.weight) if q.weight > 0 else 1.0,
            deserved_gpus=_optional(q.deserved_gpus),
            capability_gpus=_optional(q.capability_gpus),
        )
        for q in snap.queues.itertuples(index=False)
    )
    return ClusterSpec(
        pools=tuple(PoolSpec(name, tuple(nodes)) for name, nodes in pools.items()),
        queues=queues,
        name=snap.cluster,
        start=snap.as_of.to_pydatetime(),
    )


def _rows_by_key(keys: np.ndarray) -> dict[Any, np.ndarray]:
    """Row positions per key, each key's rows in their order (a groupby without its per-group
    frames: one stable sort, then slices)."""
    codes, uniques = pd.factorize(keys)
    order = np.argsort(codes, kind="stable")
    bounds = np.searchsorted(codes[order], np.arange(len(uniques) + 1))
    return {key: order[bounds[i] : bounds[i + 1]] for i, key in enumerate(uniques)}


def _optional(value: float) -> float | None:
    return None if value is None or math.isnan(value) else float(value)


def infer_profiles(snap: snapshot_format.ClusterSnapshot) -> dict[str, str]:
    """A metric profile per job holding GPUs, from its GPUs' window statistics."""
    stats_columns = ["util_mean", "util_p10", "util_p90", "tensor_active_mean"]
    joined = snap.allocations.merge(
        snap.gpus[[*snapshot_format.GPU_KEY, *stats_columns]],
        on=snapshot_format.GPU_KEY,
        how="left",
    )
    means = joined.groupby("job", sort=False)[stats_columns].mean()
    kind = snap.jobs["kind"].reindex(means.index).to_numpy()
    util = means["util_mean"].to_numpy()
    spread = (means["util_p90"] - means["util_p10"]).to_numpy()
    tensor = means["tensor_active_mean"].to_numpy()
    with np.errstate(invalid="ignore"):
        profile = np.select(
            [
                kind == "inference",
                np.isnan(util),
                util < 0.05,
                (util < 0.6) & ~np.isnan(spread) & (spread >= 0.5),
                (util >= 0.6) & (tensor < 0.25),
            ],
            [INFERENCE, HEALTHY, IDLE, DATA_STARVED, LOW_MFU],
            default=HEALTHY,
        )
    return dict(zip(means.index, profile.tolist(), strict=True))


def typical_work_by_size(snap: snapshot_format.ClusterSnapshot) -> dict[str, float]:
    """Median runtime of the snapshot's ended jobs per size class (key ``"*"``: all)."""
    jobs = snap.jobs
    ended = jobs[jobs["ended"].notna() & jobs["started"].notna()]
    runtime = (ended["ended"] - ended["started"]).dt.total_seconds()
    runtime = runtime[runtime > 0]
    out = {"*": float(runtime.median()) if len(runtime) else DEFAULT_WORK_S}
    if len(runtime):
        classes = (ended.loc[runtime.index, "pods"] * ended.loc[runtime.index, "gpus_per_pod"]).map(
            size_class
        )
        for name, values in runtime.groupby(classes.to_numpy()):
            out[str(name)] = float(values.median())
    return out


def remaining_from_age(age_s: float) -> float:
    """Remaining work of a running job of unknown length that has run ``age_s`` seconds."""
    return float(min(max(age_s, MIN_REMAINING_S), MAX_REMAINING_S))


def simulator_from_snapshot(
    source: SnapshotSource,
    policy: Policy | None = None,
    seed: int = 0,
    *,
    remaining: Callable[[float], float] = remaining_from_age,
    work: Mapping[str, float] | None = None,
) -> Simulator:
    """A simulator holding the snapshot's cluster, queues and live jobs at its ``as_of``.

    ``work``, when given, overrides the estimates per job id: a running job's remaining work, a
    pending job's whole work (the start-time forecast's learned runtimes, docs/forecasts.md)."""
    snap = load_snapshot(source)
    spec = cluster_of(snap)
    sim = Simulator(spec, policy or policy_of(snap), seed)
    for node in snap.nodes.itertuples(index=False):
        if node.state != "ready":
            sim.restore_node(node.name, node.state)
    for gpu in snap.gpus[snap.gpus["health"] == "unhealthy"].itertuples(index=False):
        sim.restore_gpu_health(gpu.node, int(gpu.index), False)

    as_of = snap.as_of
    profiles = infer_profiles(snap)
    typical = typical_work_by_size(snap)
    pods_of = _allocations_by_job(snap)
    default_pool = spec.pools[0].name
    live = snap.jobs[snap.jobs["state"].isin(["pending", "running"])]
    live = live.sort_values(["submitted", "id"], kind="stable")
    # Columns as Python lists and times as seconds from as_of in numpy, read row by row below:
    # no pandas row, Timestamp or Timedelta per job.
    submitted = live["submitted"]
    started = live["started"].where(live["started"].notna(), submitted)
    seconds = {
        "submitted_s": (submitted - as_of).dt.total_seconds(),
        "started_s": (started - as_of).dt.total_seconds(),
        "age_s": (as_of - started).dt.total_seconds(),
        "partial_since_s": (live["partial_since"] - as_of).dt.total_seconds(),
    }
    columns = {name: live[name].tolist() for name in _RESTORED_COLUMNS}
    columns.update((name, values.tolist()) for name, values in seconds.items())
    for job in _rows(columns):
        allocation = pods_of.get(job.id, [])
        running = job.state == "running" and bool(allocation)
        if running:
            duration = remaining(job.age_s)
        else:
            gpus = int(job.pods) * int(job.gpus_per_pod)
            duration = typical.get(size_class(gpus), typical["*"])
        if work is not None and job.id in work:
            duration = work[job.id]
        pool = job.pool if isinstance(job.pool, str) and job.pool in sim.pool_number else None
        spec_job = JobSpec(
            job.id,
            arrival_s=0.0,
            duration_s=max(duration, 1.0),
            pods=int(job.pods),
            gpus_per_pod=max(int(job.gpus_per_pod), 1),
            tenant=job.tenant or job.queue or "default",
            queue=job.queue,
            pool=pool or default_pool,
            priority=int(job.priority),
            kind=job.kind or "training",
            gang=bool(job.gang),
            min_member=int(job.min_member),
            tp=None if math.isnan(job.tp) else int(job.tp),
            profile=profiles.get(job.id),
            name=job.name,
            submitted_s=job.submitted_s,
            reports_tflops=not math.isnan(job.achieved_tflops_per_gpu),
            # A gang found partly bound was admitted pod by pod; it goes on that way.
            admission=PARTIAL if allocation and not running and bool(job.gang) else None,
        )
        if running:
            sim.restore(spec_job, allocation, running=True, started_s=job.started_s)
        else:
            partial_since = None
            if allocation and not math.isnan(job.partial_since_s):
                partial_since = job.partial_since_s
            sim.restore(spec_job, allocation, running=False, partial_since_s=partial_since)
    return sim


_RESTORED_COLUMNS = (
    "id",
    "state",
    "pods",
    "gpus_per_pod",
    "tenant",
    "queue",
    "pool",
    "priority",
    "kind",
    "gang",
    "min_member",
    "tp",
    "name",
    "achieved_tflops_per_gpu",
)


def _rows(columns: dict[str, list[Any]]) -> Iterator[Any]:
    """Rows of equally long columns as named tuples (what ``itertuples`` yields, from lists)."""
    row = namedtuple("Row", list(columns))
    return map(row._make, zip(*columns.values(), strict=True))


def _allocations_by_job(
    snap: snapshot_format.ClusterSnapshot,
) -> dict[str, list[tuple[str, list[int]]]]:
    out: dict[str, list[tuple[str, list[int]]]] = {}
    allocations = snap.allocations
    allocations = allocations[allocations["job"].notna() & allocations["pod"].notna()]
    allocations = allocations.sort_values(["job", "pod", "order"], kind="stable")
    jobs = allocations["job"].to_numpy()
    pods = allocations["pod"].to_numpy()
    nodes = allocations["node"].to_numpy()
    index = allocations["index"].to_numpy()
    if not len(jobs):
        return out
    starts = np.flatnonzero(np.r_[True, (jobs[1:] != jobs[:-1]) | (pods[1:] != pods[:-1])])
    ends = np.r_[starts[1:], len(jobs)]
    for start, end in zip(starts.tolist(), ends.tolist(), strict=True):
        out.setdefault(jobs[start], []).append((nodes[start], index[start:end].tolist()))
    return out


def resampled_arrivals(
    snap: snapshot_format.ClusterSnapshot,
    horizon_s: float,
    seed: int,
    *,
    lookback_s: float = DEFAULT_LOOKBACK_S,
) -> list[JobSpec]:
    """A Poisson stream over ``[0, horizon_s)`` at the rate the snapshot's jobs were submitted
    in the last ``lookback_s``, each a copy (new id) of one of those jobs drawn at random, with
    that job's runtime (ended), age plus estimated remaining work (running) or the typical work
    of its size class (pending)."""
    jobs = snap.jobs
    since = snap.as_of - pd.Timedelta(seconds=lookback_s)
    recent = jobs[jobs["submitted"] >= since]
    if recent.empty or horizon_s <= 0:
        return []
    oldest = recent["submitted"].min()
    observed_s = max((snap.as_of - oldest).total_seconds(), 600.0)
    rate = len(recent) / observed_s
    work = typical_work_by_size(snap)
    rng = np.random.default_rng([seed, 0x5EED])
    arrivals: list[JobSpec] = []
    t = 0.0
    rows = list(recent.itertuples(index=False))
    while True:
        t += float(rng.exponential(1.0 / rate))
        if t >= horizon_s:
            return arrivals
        model = rows[int(rng.integers(len(rows)))]
        gpus = int(model.pods) * int(model.gpus_per_pod)
        if not pd.isna(model.ended) and not pd.isna(model.started):
            duration = (model.ended - model.started).total_seconds()
        elif not pd.isna(model.started):
            # Still running: its age so far plus the remaining work estimated from that age
            # (drawing only ended jobs would favour short ones).
            age = (snap.as_of - model.started).total_seconds()
            duration = age + remaining_from_age(age)
        else:
            duration = work.get(size_class(gpus), work["*"])
        arrivals.append(
            JobSpec(
                f"whatif-{len(arrivals):05d}",
                arrival_s=round(t, 3),
                duration_s=max(duration, 60.0),
                pods=int(model.pods),
                gpus_per_pod=max(int(model.gpus_per_pod), 1),
                tenant=model.tenant or model.queue or "default",
                queue=model.queue,
                pool=model.pool if isinstance(model.pool, str) else None,
                priority=int(model.priority),
                kind=model.kind or "training",
                gang=bool(model.gang),
                min_member=int(model.min_member),
                tp=None if math.isnan(model.tp) else int(model.tp),
            )
        )


def replay(
    source: SnapshotSource,
    policy: Policy | None,
    horizon_s: float,
    seeds: Sequence[int] | int = (0, 1, 2),
    *,
    changes: Iterable[Change] = (),
    arrivals: str = "resample",
    lookback_s: float = DEFAULT_LOOKBACK_S,
    remaining: Callable[[float], float] = remaining_from_age,
    observe: Callable[[Simulator], None] | None = None,
) -> list[Summary]:
    """Summaries of ``horizon_s`` seconds after the snapshot under ``policy`` (None: the
    snapshot's own) with ``changes`` applied at the start, one per seed.

    ``arrivals``: ``"resample"`` (see :func:`resampled_arrivals`) or ``"none"`` (only the jobs
    the snapshot shows). ``remaining`` maps a running job's age to its remaining work.
    ``observe``, when given, is called with each seed's simulator at the end of its run, before
    its summary is taken (to read what a summary does not hold, e.g. one job's wait).
    """
    if arrivals not in ("resample", "none"):
        raise ValueError("arrivals must be 'resample' or 'none'")
    snap = load_snapshot(source)
    changes = list(changes)
    summaries = []
    for seed in [seeds] if isinstance(seeds, int) else seeds:
        with paused_gc():
            sim = simulator_from_snapshot(snap, policy, seed, remaining=remaining)
            if changes:
                sim.apply(changes)
            if arrivals == "resample":
                new_jobs = resampled_arrivals(snap, horizon_s, seed, lookback_s=lookback_s)
                sim.submit(
                    job for job in new_jobs if job.pool is None or job.pool in sim.pool_number
                )
            sim.run_until(horizon_s)
            if observe is not None:
                observe(sim)
            summaries.append(sim.summary())
            del sim
    return summaries
