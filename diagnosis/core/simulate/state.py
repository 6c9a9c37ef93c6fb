"""The simulated cluster's state, apart from the event loop that changes it.

Records of mutable state (a submitted job, a queue's usage, a pool's pending jobs, one pod's hold
on GPUs) and :class:`ClusterState`: per-node and per-GPU numpy arrays (one contiguous run of nodes
per pool), the jobs and queues, the event heap and log, the GPU-second integrals, and what can be
read from them (names, states, metric samples) without changing anything.
:mod:`~diagnosis.core.simulate.transitions` changes this state one event at a time and
:mod:`~diagnosis.core.simulate.simulator` runs the event loop and the scheduling pass over it;
the snapshot document and the summary read only what this module defines.
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import numpy as np

from diagnosis.core.simulate.cluster import ClusterSpec, QueueSpec, gpu_power_envelope
from diagnosis.core.simulate.jobs import JobSpec
from diagnosis.core.simulate.metrics import (
    DARK,
    FREE,
    PROFILE_CODE,
    SAMPLE_S,
    GpuFleet,
    JobTable,
    MetricSeries,
    job_constant,
    sample,
)
from diagnosis.core.simulate.policy import Change, Policy
from diagnosis.core.vocabulary import NODE_STATES

# Node states, as codes (NODE_STATES[code] is the snapshot word).
READY, CORDONED, DRAINED, DOWN = 0, 1, 2, 3

# Event classes: at equal times completions free GPUs before faults strike, and both happen
# before arrivals are queued; the scheduling pass follows the whole batch.
COMPLETION, FAULT, CHANGE, ARRIVAL, TICK = 0, 1, 2, 3, 4

# Pending reasons (jobs[].pending_reason).
QUEUED = "Queued"
UNSCHEDULABLE = "Unschedulable"
QUEUE_CAPABILITY = "QueueCapability"
BEHIND_BLOCKED_JOB = "Priority"
PARTIALLY_BOUND = "PartiallyBound"


class SettledFlags:
    """Per job number: whether the job waits as a scheduling pass in which nothing fits leaves
    it -- its failed scheduling reported, its reason ``Unschedulable`` -- so that such a pass
    skips it without looking at it. :attr:`Job.reason`'s setter keeps the flag (any other reason
    clears it), so a set flag is always true; a cleared one only costs the pass a look."""

    __slots__ = ("array",)

    def __init__(self) -> None:
        self.array = np.zeros(64, dtype=bool)

    def make_room(self, number: int) -> None:
        if number >= len(self.array):
            grown = np.zeros(max(2 * len(self.array), number + 1), dtype=bool)
            grown[: len(self.array)] = self.array
            self.array = grown


class Job:
    """Mutable state of one submitted job."""

    __slots__ = (
        "_flags",
        "_reason",
        "end_reason",
        "ended",
        "failed_scheduling_reported",
        "first_started",
        "in_queue",
        "key",
        "misplace",
        "number",
        "partial",
        "partial_since",
        "pods",
        "pool",
        "preemptions",
        "profiles",
        "queue",
        "remaining",
        "run_since",
        "spec",
        "started",
        "state",
        "submitted",
        "token",
    )

    def __init__(
        self,
        number: int,
        spec: JobSpec,
        pool: int,
        queue: int,
        partial: bool,
        flags: SettledFlags | None = None,
    ) -> None:
        self.number = number
        self.spec = spec
        self.pool = pool
        self.queue = queue
        self.partial = partial
        self.state = "waiting"  # not yet arrived
        self.submitted = spec.submitted
        self.started: float | None = None
        self.first_started: float | None = None
        self.ended: float | None = None
        self.end_reason: str | None = None
        self.remaining = float(spec.duration_s)
        self.run_since = 0.0
        # Tuples, replaced when they change: a tuple of untracked items is no work for the cyclic
        # garbage collector, which a list per job is (tens of thousands at 16k GPUs).
        self.pods: tuple[tuple[int, tuple[int, ...], np.ndarray], ...] = ()
        self.partial_since: float | None = None
        self.preemptions = 0
        self.profiles: tuple[tuple[float, str], ...] = ((-math.inf, spec.metric_profile),)
        self.misplace = False
        self.token = 0
        self.failed_scheduling_reported = False
        if flags is None:
            flags = SettledFlags()
        flags.make_room(number)
        self._flags = flags
        self.reason = QUEUED
        self.in_queue = False
        self.key: tuple = ()

    @property
    def reason(self) -> str | None:
        """Why the job waits (a pending reason), None once it runs."""
        return self._reason

    @reason.setter
    def reason(self, value: str | None) -> None:
        self._reason = value
        self._flags.array[self.number] = value == UNSCHEDULABLE and self.failed_scheduling_reported

    @property
    def gpus_bound(self) -> int:
        return len(self.pods) * self.spec.gpus_per_pod

    def profile_at(self, t: float) -> str:
        current = self.profiles[0][1]
        for since, profile in self.profiles:
            if since <= t:
                current = profile
        return current


Row = tuple[int, int, int, int, int]


class PendingQueue:
    """A pool's pending jobs, sorted by the policy's order key, with their shapes in numpy rows
    (GPUs per pod, pods needed to start -- 1 for a partial gang, which binds pod by pod -- the
    partial flag as the job was queued, the job's number and its queue's).

    The rows are columns ``lo .. lo + len`` of a 32-bit array with room on both sides, so that
    an insertion or removal shifts the shorter side: a quarter of the queue on average, not
    half, of 20 bytes per job rather than 40. Jobs added are staged and sorted in when the
    queue is next read: one at a time (a binary search and a shift) when few are, in one merge
    when many are -- restoring a snapshot's backlog of 14,000 jobs one shift at a time was
    quadratic (issue #17)."""

    MERGE_FROM = 32  # staged jobs from which a flush merges instead of inserting one by one

    def __init__(self) -> None:
        self._keys: list[tuple] = []
        self._jobs: list[Job] = []
        self._shapes = np.zeros((5, 64), dtype=np.int32)
        self._lo = 32
        self._staged: list[tuple[Job, Row]] = []  # with their rows as they were added

    def __len__(self) -> int:
        return len(self._jobs) + len(self._staged)

    @property
    def keys(self) -> list[tuple]:
        self._flush()
        return self._keys

    @property
    def jobs(self) -> list[Job]:
        self._flush()
        return self._jobs

    def _row(self, r: int) -> np.ndarray:
        self._flush()
        return self._shapes[r, self._lo : self._lo + len(self._jobs)]

    @property
    def pod_gpus(self) -> np.ndarray:
        return self._row(0)

    @property
    def pods_needed(self) -> np.ndarray:
        return self._row(1)

    @property
    def partial(self) -> np.ndarray:
        return self._row(2) != 0

    def rows(self, at: np.ndarray) -> np.ndarray:
        """The rows of the jobs at positions ``at``: GPUs per pod, pods needed, queued partial
        (0/1), job number, queue number."""
        self._flush()
        return self._shapes.take(at + self._lo, axis=1)

    def positions(self, jobs: list[Job]) -> np.ndarray:
        """The positions of distinct queued jobs, in queue order."""
        keys = self.keys
        if len(jobs) == len(keys):  # all of them (a restored backlog's first pass)
            return np.arange(len(keys))
        return np.array(sorted(bisect_left(keys, job.key) for job in jobs), dtype=np.int64)

    def add(self, job: Job) -> None:
        spec = job.spec
        needed = 1 if job.partial else spec.members_needed
        self._staged.append((job, (spec.gpus_per_pod, needed, job.partial, job.number, job.queue)))
        job.in_queue = True

    def remove(self, job: Job) -> None:
        self._flush()
        at = bisect_left(self._keys, job.key)
        count = len(self._jobs)
        if at >= count or self._jobs[at] is not job:
            raise KeyError(f"job {job.spec.id} is not queued")
        shapes, lo = self._shapes, self._lo
        if 2 * at < count:  # the front moves back one
            shapes[:, lo + 1 : lo + at + 1] = shapes[:, lo : lo + at]
            self._lo = lo + 1
        else:  # the back moves forward one
            shapes[:, lo + at : lo + count - 1] = shapes[:, lo + at + 1 : lo + count]
        del self._keys[at]
        del self._jobs[at]
        job.in_queue = False

    def _flush(self) -> None:
        staged = self._staged
        if not staged:
            return
        self._staged = []
        if len(staged) >= self.MERGE_FROM:
            self._merge(staged)
            return
        for job, row in staged:
            self._insert(job, row)

    def _insert(self, job: Job, row: Row) -> None:
        at = bisect_left(self._keys, job.key)
        count = len(self._jobs)
        front = 2 * at < count
        if (self._lo == 0) if front else (self._lo + count == self._shapes.shape[1]):
            self._respace(self._shapes[:, self._lo : self._lo + count])
        shapes, lo = self._shapes, self._lo
        if front:  # the front moves forward one
            shapes[:, lo - 1 : lo + at - 1] = shapes[:, lo : lo + at]
            lo = self._lo = lo - 1
        else:  # the back moves back one
            shapes[:, lo + at + 1 : lo + count + 1] = shapes[:, lo + at : lo + count]
        shapes[:, lo + at] = row
        self._keys.insert(at, job.key)
        self._jobs.insert(at, job)

    def _respace(self, rows: np.ndarray) -> None:
        """Hold ``rows`` in a new array with as much room again, half of it on each side."""
        count = rows.shape[1]
        self._shapes = np.zeros((5, max(64, 2 * count)), dtype=np.int32)
        self._lo = (self._shapes.shape[1] - count) // 2
        self._shapes[:, self._lo : self._lo + count] = rows

    def _merge(self, staged: list[tuple[Job, Row]]) -> None:
        count = len(self._jobs)
        keys = self._keys + [job.key for job, _ in staged]
        order = _key_order(keys)
        jobs = self._jobs + [job for job, _ in staged]
        rows = np.array([row for _, row in staged], dtype=np.int32).T
        held = self._shapes[:, self._lo : self._lo + count]
        self._respace(np.concatenate([held, rows], axis=1)[:, order])
        self._keys = [keys[i] for i in order]
        self._jobs = [jobs[i] for i in order]


def _key_order(keys: list[tuple]) -> list[int]:
    """The positions of ``keys`` in sorted order (the keys are distinct): by numpy, as columns
    of float64, when the keys are tuples of one length of numbers below 2**53 in magnitude
    (exact as floats, no NaN: the tuples' own order), else by Python."""
    try:
        columns = np.array(keys, dtype=np.float64)
    except (TypeError, ValueError):
        columns = None
    if columns is None or columns.ndim != 2 or not (np.abs(columns) < 2.0**53).all():
        return sorted(range(len(keys)), key=keys.__getitem__)
    return np.lexsort(columns.T[::-1]).tolist()


@dataclass
class Queue:
    name: str
    tenant: str
    weight: float
    deserved_gpus: float | None
    capability_gpus: float | None
    usage: int = 0

    def share(self, basis: str) -> float:
        if basis == "deserved" and self.deserved_gpus:
            return self.usage / self.deserved_gpus
        return self.usage / self.weight


class Allocation:
    """One pod's hold on GPUs from ``start`` to ``end`` (inf while held); the job runs on them
    from ``running_from`` (inf while it only holds them as part of a partial gang)."""

    __slots__ = ("end", "gids", "job", "running_from", "start")

    def __init__(self, job: int, gids: np.ndarray, start: float) -> None:
        self.job = job
        self.gids = gids
        self.start = start
        self.end = math.inf
        self.running_from = math.inf


class ClusterState:
    """A simulated cluster's state at ``now``: what it holds and what can be read from it."""

    def __init__(self, spec: ClusterSpec, policy: Policy | None = None, seed: int = 0) -> None:
        self.spec = spec
        self.policy = policy or Policy()
        self.seed = int(seed)
        self.rng = np.random.default_rng(self.seed)
        self._now = 0.0

        nodes = list(spec.nodes())
        self.node_names = [n.name for n in nodes]
        self.node_number = {name: i for i, name in enumerate(self.node_names)}
        self.node_specs = nodes
        self.pool_names = [p.name for p in spec.pools]
        self.pool_number = {name: i for i, name in enumerate(self.pool_names)}
        self.pool_slices: list[tuple[int, int]] = []
        node_pool: list[int] = []
        first = 0
        for p, pool in enumerate(spec.pools):
            self.pool_slices.append((first, first + len(pool.nodes)))
            node_pool.extend([p] * len(pool.nodes))
            first += len(pool.nodes)
        self.node_pool = np.array(node_pool, dtype=np.int64)
        self.node_gpus = np.array([n.gpus for n in nodes], dtype=np.int64)
        self.node_offset = np.concatenate([[0], np.cumsum(self.node_gpus)[:-1]]).astype(np.int64)
        self.node_domains = [n.domain_of_gpu() for n in nodes]
        self.node_numa = [n.numa_of_gpu() for n in nodes]
        self.node_state = np.full(len(nodes), READY, dtype=np.int64)
        self.node_drain_reason: list[str | None] = [None] * len(nodes)
        self.node_draining = np.zeros(len(nodes), dtype=bool)
        self.node_cordoned_by_operator = np.zeros(len(nodes), dtype=bool)
        self.repairs_on_drain: dict[int, list[Any]] = {}  # node -> RepairAfterDrain faults

        total = int(self.node_gpus.sum())
        self.gpu_node = np.repeat(np.arange(len(nodes)), self.node_gpus)
        self.gpu_index = np.arange(total) - self.node_offset[self.gpu_node]
        self.gpu_owner = np.full(total, -1, dtype=np.int64)
        self.gpu_healthy = np.ones(total, dtype=bool)
        self.gpu_dark_since = np.full(total, np.nan)
        self.dark_intervals: list[tuple[float, float, int]] = []
        power = [gpu_power_envelope(n.gpu_model) for n in nodes]
        self.fleet = GpuFleet(
            ids=np.arange(total, dtype=np.int64),
            idle_w=np.repeat([p[0] for p in power], self.node_gpus).astype(np.float64),
            board_w=np.repeat([p[1] for p in power], self.node_gpus).astype(np.float64),
        )
        self.free = self.node_gpus.copy()
        self.sched_free = self.node_gpus.copy()
        self.placement = {pool: self.policy.placement_of(pool) for pool in self.pool_names}

        self.queues: list[Queue] = []
        self.queue_number: dict[str, int] = {}
        for queue in spec.queues:
            self._add_queue(queue)

        self.jobs: list[Job] = []
        self.settled = SettledFlags()
        self.job_by_id: dict[str, Job] = {}
        self.live: dict[int, Job] = {}
        self.ended_jobs: list[Job] = []
        self.pending = [PendingQueue() for _ in self.pool_names]
        self.blocker: list[Job | None] = [None] * len(self.pool_names)

        self._heap: list[tuple[float, int, int, str, Any]] = []
        self._seq = 0
        self._dirty = False
        self._freed_pools: set[int] = set()
        self._new_arrivals: dict[int, list[Job]] = {}
        self._pending_changes: list[Change] = []
        self._tick_scheduled = False

        self.events: list[tuple[float, str, str | None, str | None, str | None, str | None]] = []
        self.event_cursor = 0
        self.xids: list[tuple[float, int, int, int]] = []
        self.active_allocations: dict[int, list[Allocation]] = {}
        self.closed_allocations: list[Allocation] = []
        self._closed_ends: list[float] = []
        self.last_snapshot_at: float | None = None

        # Time integrals for summary(): GPU-seconds held, running-held, partially held, utilised
        # and unusable, since the start.
        self.allocated_gpus = 0
        self.partial_gpus = 0
        self.activity = 0.0
        self.unusable_gpus = 0
        self.gpu_seconds = {"allocated": 0.0, "partial": 0.0, "activity": 0.0, "unusable": 0.0}
        self.fragmentation_samples: list[tuple[float, int, int]] = []
        self._next_fragmentation_sample = 0.0
        self._pod_size_gpus: dict[int, int] = {}
        self.preemptions = 0

    # -- reading ---------------------------------------------------------------------------------

    @property
    def now(self) -> float:
        """Simulated seconds since the cluster's start."""
        return self._now

    @property
    def now_time(self) -> datetime:
        return self.time_of(self._now)

    def time_of(self, seconds: float) -> datetime:
        return self.spec.start + timedelta(seconds=seconds)

    @property
    def total_gpus(self) -> int:
        return len(self.gpu_owner)

    def job_state(self, job_id: str) -> str:
        return self.job_by_id[job_id].state

    def job_allocation(self, job_id: str) -> list[tuple[str, tuple[int, ...]]]:
        """The job's bound pods as (node name, GPU indexes)."""
        return [(self.node_names[n], gpus) for n, gpus, _ in self.job_by_id[job_id].pods]

    def node_state_of(self, node: str) -> str:
        return NODE_STATES[self.node_state[self.node_number[node]]]

    def gpu_health(self, node: str, gpu: int) -> str:
        gid = self.node_offset[self.node_number[node]] + gpu
        return "ok" if self.gpu_healthy[gid] else "unhealthy"

    def metric_series(self, start: float, end: float, step_s: float = SAMPLE_S) -> MetricSeries:
        """Samples of every GPU metric on ``start, start + step_s, ... <= end`` (simulated
        seconds, at most now)."""
        if end > self._now + 1e-9:
            raise ValueError(f"no metrics after now ({self._now}); asked up to {end}")
        if step_s <= 0 or end < start:
            raise ValueError("need step_s > 0 and end >= start")
        times = start + step_s * np.arange(math.floor((end - start) / step_s + 1e-9) + 1)
        values = self.sample_metrics(times)
        epoch = self.spec.start.timestamp()
        return MetricSeries(
            timestamps=times + epoch,
            nodes=np.array(self.node_names, dtype=object)[self.gpu_node],
            indexes=self.gpu_index.copy(),
            values={m: v.astype(np.float32) for m, v in values.items()},
        )

    # -- queues and lookups ----------------------------------------------------------------------

    def _add_queue(self, queue: QueueSpec) -> int:
        if queue.name in self.queue_number:
            raise ValueError(f"queue {queue.name!r} is defined twice")
        self.queue_number[queue.name] = len(self.queues)
        self.queues.append(
            Queue(
                queue.name,
                queue.owner,
                float(queue.weight),
                queue.deserved_gpus,
                queue.capability_gpus,
            )
        )
        return self.queue_number[queue.name]

    def _job(self, job_id: str) -> Job:
        try:
            return self.job_by_id[job_id]
        except KeyError:
            raise KeyError(f"no job {job_id!r} was submitted") from None

    def _gid(self, node: str, gpu: int) -> int:
        n = self._node(node)
        if not 0 <= gpu < self.node_gpus[n]:
            raise ValueError(f"node {node} has no GPU {gpu}")
        return int(self.node_offset[n] + gpu)

    def _node(self, node: str) -> int:
        try:
            return self.node_number[node]
        except KeyError:
            raise KeyError(f"no node {node!r} in the cluster") from None

    def _jobs_on_node(self, n: int) -> list[Job]:
        lo = int(self.node_offset[n])
        owners = self.gpu_owner[lo : lo + int(self.node_gpus[n])]
        return [self.jobs[o] for o in sorted({int(o) for o in owners if o >= 0})]

    # -- metric samples --------------------------------------------------------------------------

    def sample_metrics(self, times: np.ndarray) -> dict[str, np.ndarray]:
        """Samples of every metric for every GPU at ``times`` (simulated seconds, sorted)."""
        holder, profile = self._paint(times)
        jobs = self._job_table()
        day_offset = (
            self.spec.start - self.spec.start.replace(hour=0, minute=0, second=0, microsecond=0)
        ).total_seconds()
        return sample(self.seed, self.fleet, times, holder, profile, jobs, day_offset)

    def _job_table(self) -> JobTable:
        numbers = np.arange(len(self.jobs), dtype=np.int64)
        return JobTable(
            fb_level=job_constant(self.seed, 9, numbers),
            multi_gpu=np.array([j.spec.gpus > 1 for j in self.jobs], dtype=bool),
        )

    def _paint(self, times: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Who holds each GPU at each time, and the metric profile it shows then."""
        gpus = self.total_gpus
        holder = np.full((gpus, len(times)), -1, dtype=np.int64)
        profile = np.full((gpus, len(times)), FREE, dtype=np.int8)
        if not len(times):
            return holder, profile
        first, last = float(times[0]), float(times[-1])
        start = bisect_right(self._closed_ends, first)
        records = self.closed_allocations[start:]
        records = [r for r in records if r.end > first]
        for active in self.active_allocations.values():
            records.extend(active)
        for record in records:
            if record.start > last:
                continue
            c0 = int(np.searchsorted(times, record.start, "left"))
            c1 = int(np.searchsorted(times, record.end, "left"))
            if c1 <= c0:
                continue
            holder[record.gids, c0:c1] = record.job
            run = max(c0, int(np.searchsorted(times, record.running_from, "left")))
            if run >= c1:
                continue
            job = self.jobs[record.job]
            for i, (since, name) in enumerate(job.profiles):
                until = job.profiles[i + 1][0] if i + 1 < len(job.profiles) else math.inf
                s0 = max(run, int(np.searchsorted(times, since, "left")))
                s1 = min(c1, int(np.searchsorted(times, until, "left")))
                if s1 > s0:
                    profile[record.gids, s0:s1] = PROFILE_CODE[name]
        for since, until, gid in self.dark_intervals:
            if until > first and since <= last:
                c0 = int(np.searchsorted(times, since, "left"))
                c1 = int(np.searchsorted(times, until, "left"))
                profile[gid, c0:c1] = DARK
        dark_now = np.flatnonzero(~np.isnan(self.gpu_dark_since))
        for gid in dark_now:
            c0 = int(np.searchsorted(times, self.gpu_dark_since[gid], "left"))
            profile[gid, c0:] = DARK
        return holder, profile
