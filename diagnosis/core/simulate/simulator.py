"""A discrete-event simulator of a GPU cluster's queue, scheduler and GPUs.

Events (arrivals, completions, faults, changes) sit in one heap keyed by simulated time; after
every batch of simultaneous events (or on multiples of ``Policy.tick_s``) a scheduling pass
places pending jobs. Free GPUs per node live in numpy arrays, one contiguous run of nodes per
pool, so node choice is vectorised; the pending queue of each pool is kept sorted by the
policy's order with its job shapes in numpy arrays, so a pass skips what cannot fit without a
Python loop over it. A pass that follows only arrivals (nothing freed) tries only the new jobs:
everything that did not fit before still does not.

Times are simulated seconds since ``ClusterSpec.start``. The simulator is deterministic for a
seed: random placement draws from a numpy Generator seeded with it, metric noise is a hash of it.
"""

from __future__ import annotations

import heapq
import math
from bisect import bisect_left, bisect_right
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import numpy as np

from diagnosis.core.simulate.cluster import ClusterSpec, QueueSpec, gpu_power_envelope
from diagnosis.core.simulate.faults import (
    DeadlockingGangs,
    Fault,
    GpuRepaired,
    Misplace,
    NodeDown,
    NodeRepaired,
    ProfileSwitch,
    Xid,
    xid_consequence,
)
from diagnosis.core.simulate.jobs import PARTIAL, JobSpec
from diagnosis.core.simulate.metrics import (
    DARK,
    FREE,
    NOMINAL_UTIL,
    PROFILE_CODE,
    SAMPLE_S,
    GpuFleet,
    JobTable,
    MetricSeries,
    job_constant,
    sample,
)
from diagnosis.core.simulate.placement import NO_NODE, choose_gpus, choose_node, pod_slots
from diagnosis.core.simulate.policy import (
    Change,
    DrainNode,
    Policy,
    ResumeNode,
    SetPlacement,
    SetQueueWeight,
    check_placement,
)

# Node states, as codes (NODE_STATES[code] is the snapshot word).
READY, CORDONED, DRAINED, DOWN = 0, 1, 2, 3
NODE_STATES = ("ready", "cordoned", "drained", "down")

# Event classes: at equal times completions free GPUs before faults strike, and both happen
# before arrivals are queued; the scheduling pass follows the whole batch.
_COMPLETION, _FAULT, _CHANGE, _ARRIVAL, _TICK = 0, 1, 2, 3, 4

FRAGMENTATION_SAMPLE_S = 300.0
MAX_RETAINED_JOBS = 5000

# Pending reasons (jobs[].pending_reason).
QUEUED = "Queued"
UNSCHEDULABLE = "Unschedulable"
QUEUE_CAPABILITY = "QueueCapability"
BEHIND_BLOCKED_JOB = "Priority"
PARTIALLY_BOUND = "PartiallyBound"


class _Job:
    """Mutable state of one submitted job."""

    __slots__ = (
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
        "reason",
        "remaining",
        "run_since",
        "spec",
        "started",
        "state",
        "submitted",
        "token",
    )

    def __init__(self, number: int, spec: JobSpec, pool: int, queue: int, partial: bool) -> None:
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
        self.pods: list[tuple[int, tuple[int, ...], np.ndarray]] = []
        self.partial_since: float | None = None
        self.preemptions = 0
        self.profiles: list[tuple[float, str]] = [(-math.inf, spec.metric_profile)]
        self.misplace = False
        self.token = 0
        self.reason = QUEUED
        self.failed_scheduling_reported = False
        self.in_queue = False
        self.key: tuple = ()

    @property
    def gpus_bound(self) -> int:
        return len(self.pods) * self.spec.gpus_per_pod

    def profile_at(self, t: float) -> str:
        current = self.profiles[0][1]
        for since, profile in self.profiles:
            if since <= t:
                current = profile
        return current


class _PendingQueue:
    """A pool's pending jobs, sorted by the policy's order key, with their shapes in numpy rows
    (GPUs per pod, pods needed to start -- 1 for a partial gang, which binds pod by pod -- and
    the partial flag) kept in step by in-place shifts."""

    def __init__(self) -> None:
        self.keys: list[tuple] = []
        self.jobs: list[_Job] = []
        self._shapes = np.zeros((3, 64), dtype=np.int64)

    def __len__(self) -> int:
        return len(self.jobs)

    @property
    def pod_gpus(self) -> np.ndarray:
        return self._shapes[0, : len(self.jobs)]

    @property
    def pods_needed(self) -> np.ndarray:
        return self._shapes[1, : len(self.jobs)]

    @property
    def partial(self) -> np.ndarray:
        return self._shapes[2, : len(self.jobs)] != 0

    def add(self, job: _Job) -> None:
        at = bisect_left(self.keys, job.key)
        count = len(self.jobs)
        if count == self._shapes.shape[1]:
            self._shapes = np.concatenate([self._shapes, np.zeros_like(self._shapes)], axis=1)
        shapes = self._shapes
        shapes[:, at + 1 : count + 1] = shapes[:, at:count]
        spec = job.spec
        shapes[:, at] = (spec.gpus_per_pod, 1 if job.partial else spec.members_needed, job.partial)
        self.keys.insert(at, job.key)
        self.jobs.insert(at, job)
        job.in_queue = True

    def remove(self, job: _Job) -> None:
        at = bisect_left(self.keys, job.key)
        count = len(self.jobs)
        if at >= count or self.jobs[at] is not job:
            raise KeyError(f"job {job.spec.id} is not queued")
        shapes = self._shapes
        shapes[:, at : count - 1] = shapes[:, at + 1 : count]
        del self.keys[at]
        del self.jobs[at]
        job.in_queue = False


@dataclass
class _Queue:
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


class _SlotCounter:
    """Pod slots per pod size on a pool's free GPUs, counted once per size until forgotten
    (after a placement)."""

    def __init__(self, free: np.ndarray) -> None:
        self.free = free
        self.counts: dict[int, int] = {}

    def of(self, size: int) -> int:
        count = self.counts.get(size)
        if count is None:
            count = self.counts[size] = pod_slots(self.free, size)
        return count

    def for_each(self, sizes: np.ndarray) -> np.ndarray:
        if not len(sizes):
            return np.zeros(0, dtype=np.int64)
        table = np.zeros(int(sizes.max()) + 1, dtype=np.int64)
        for size in np.unique(sizes).tolist():
            table[size] = self.of(size)
        return table[sizes]

    def forget(self) -> None:
        self.counts.clear()


class _Allocation:
    """One pod's hold on GPUs from ``start`` to ``end`` (inf while held); the job runs on them
    from ``running_from`` (inf while it only holds them as part of a partial gang)."""

    __slots__ = ("end", "gids", "job", "running_from", "start")

    def __init__(self, job: int, gids: np.ndarray, start: float) -> None:
        self.job = job
        self.gids = gids
        self.start = start
        self.end = math.inf
        self.running_from = math.inf


class Simulator:
    """A simulated cluster. Submit jobs, inject faults, apply changes, advance time, read it."""

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

        self.queues: list[_Queue] = []
        self.queue_number: dict[str, int] = {}
        for queue in spec.queues:
            self._add_queue(queue)

        self.jobs: list[_Job] = []
        self.job_by_id: dict[str, _Job] = {}
        self.live: dict[int, _Job] = {}
        self.ended_jobs: list[_Job] = []
        self.pending = [_PendingQueue() for _ in self.pool_names]
        self.blocker: list[_Job | None] = [None] * len(self.pool_names)

        self._heap: list[tuple[float, int, int, str, Any]] = []
        self._seq = 0
        self._dirty = False
        self._freed_pools: set[int] = set()
        self._new_arrivals: dict[int, list[_Job]] = {}
        self._pending_changes: list[Change] = []
        self._tick_scheduled = False

        self.events: list[tuple[float, str, str | None, str | None, str | None, str | None]] = []
        self.event_cursor = 0
        self.xids: list[tuple[float, int, int, int]] = []
        self.active_allocations: dict[int, list[_Allocation]] = {}
        self.closed_allocations: list[_Allocation] = []
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

    # -- public API ------------------------------------------------------------------------------

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

    def submit(self, jobs: JobSpec | Iterable[JobSpec]) -> None:
        """Queue jobs for arrival at their ``arrival_s`` (now, when that is past)."""
        for spec in [jobs] if isinstance(jobs, JobSpec) else jobs:
            self._register(spec)

    def inject(self, fault: Fault | Iterable[Fault]) -> None:
        """Schedule faults at their time ``at`` (now, when that is past)."""
        for one in [fault] if not isinstance(fault, Iterable) else fault:
            self._push(max(one.at, self._now), _FAULT, "fault", one)

    def apply(self, change: Change | Iterable[Change]) -> None:
        """Apply changes from the next scheduling pass on (the next event batch, or now)."""
        for one in [change] if not isinstance(change, Iterable) else change:
            self.validate_change(one)
            self._pending_changes.append(one)
        self._push(self._now, _CHANGE, "change", None)

    def run_until(self, t: float) -> None:
        """Advance to simulated second ``t``, processing every event up to and including it."""
        if t < self._now:
            raise ValueError(f"cannot run back in time (now {self._now}, asked {t})")
        heap = self._heap
        while heap and heap[0][0] <= t:
            moment = heap[0][0]
            self._advance(moment)
            tick = False
            while heap and heap[0][0] == moment:
                _, _, _, kind, payload = heapq.heappop(heap)
                if kind == "completion":
                    self._complete(*payload)
                elif kind == "arrival":
                    self._arrive(payload)
                elif kind == "fault":
                    self._fault(payload)
                elif kind == "change":
                    self._dirty = True
                elif kind == "tick":
                    tick = True
                    self._tick_scheduled = False
            if self._dirty:
                if self.policy.tick_s <= 0 or tick:
                    self._schedule()
                elif not self._tick_scheduled:
                    tick_s = self.policy.tick_s
                    self._push(math.ceil(moment / tick_s - 1e-9) * tick_s, _TICK, "tick", None)
                    self._tick_scheduled = True
        self._advance(t)

    def step(self, dt: float) -> None:
        self.run_until(self._now + dt)

    def run(self) -> None:
        """Run until no event is left (careful with long-running jobs)."""
        while self._heap:
            self.run_until(self._heap[0][0])

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

    def snapshot(self, at: float | None = None, *, window_s: int | None = None) -> dict[str, Any]:
        """A ``gpuobs.snapshot/v1`` document at ``at`` (run there first) or now; its events are
        those since the previous snapshot (the first: since the window's start)."""
        from diagnosis.core.simulate.document import build_document

        if at is not None:
            self.run_until(at)
        return build_document(self, window_s or self.policy.window_s)

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

    def summary(self):
        """Utilisation, waits, fragmentation and job counts since the start (see summary.py)."""
        from diagnosis.core.simulate.summary import summarize

        return summarize(self)

    @classmethod
    def from_snapshot(
        cls,
        document: Any,
        policy: Policy | None = None,
        seed: int = 0,
        **options: Any,
    ) -> Simulator:
        """A simulator rebuilt from a snapshot (see replay.py), at its ``as_of``."""
        from diagnosis.core.simulate.replay import simulator_from_snapshot

        return simulator_from_snapshot(document, policy, seed, **options)

    # -- queues and jobs -------------------------------------------------------------------------

    def _add_queue(self, queue: QueueSpec) -> int:
        if queue.name in self.queue_number:
            raise ValueError(f"queue {queue.name!r} is defined twice")
        self.queue_number[queue.name] = len(self.queues)
        self.queues.append(
            _Queue(
                queue.name,
                queue.owner,
                float(queue.weight),
                queue.deserved_gpus,
                queue.capability_gpus,
            )
        )
        return self.queue_number[queue.name]

    def _register(self, spec: JobSpec, *, arrives: bool = True) -> _Job:
        if spec.id in self.job_by_id:
            raise ValueError(f"job {spec.id!r} submitted twice")
        pool_name = spec.pool or self.pool_names[0]
        if pool_name not in self.pool_number:
            raise ValueError(f"job {spec.id}: unknown pool {pool_name!r}")
        pool = self.pool_number[pool_name]
        queue = self.queue_number.get(spec.queue_name)
        if queue is None:
            queue = self._add_queue(QueueSpec(spec.queue_name, tenant=spec.tenant))
        admission = spec.admission or self.policy.gang_admission
        partial = spec.is_gang and admission == PARTIAL
        job = _Job(len(self.jobs), spec, pool, queue, partial)
        job.key = self._order_key(job)
        self.jobs.append(job)
        self.job_by_id[spec.id] = job
        if arrives:
            self._push(max(spec.arrival_s, self._now), _ARRIVAL, "arrival", job)
        return job

    def _order_key(self, job: _Job) -> tuple:
        if self.policy.queue_order == "fifo":
            return (job.submitted, job.number)
        return (-job.spec.priority, job.submitted, job.number)

    def _push(self, t: float, event_class: int, kind: str, payload: Any) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (t, event_class, self._seq, kind, payload))

    def _log(
        self,
        kind: str,
        job: _Job | None = None,
        node: int | None = None,
        reason: str | None = None,
        message: str | None = None,
    ) -> None:
        self.events.append(
            (
                self._now,
                kind,
                job.spec.id if job is not None else None,
                self.node_names[node] if node is not None else None,
                reason,
                message,
            )
        )

    # -- time ------------------------------------------------------------------------------------

    def _advance(self, t: float) -> None:
        """Integrate the GPU-second counters up to ``t`` and take due fragmentation samples."""
        while self._next_fragmentation_sample <= t:
            self._sample_fragmentation(self._next_fragmentation_sample)
            self._next_fragmentation_sample += FRAGMENTATION_SAMPLE_S
        dt = t - self._now
        if dt > 0:
            seconds = self.gpu_seconds
            seconds["allocated"] += self.allocated_gpus * dt
            seconds["partial"] += self.partial_gpus * dt
            seconds["activity"] += self.activity * dt
            seconds["unusable"] += self.unusable_gpus * dt
            self._now = t

    def _sample_fragmentation(self, t: float) -> None:
        """Free GPUs that cannot host the pool's request size: the largest pending pod size, or
        when nothing is pending the typical pod size (GPU-weighted median of all requests)."""
        typical = self._typical_pod_gpus()
        fragmented = 0
        free_total = 0
        for p, (lo, hi) in enumerate(self.pool_slices):
            free = self.sched_free[lo:hi]
            queue = self.pending[p]
            size = int(queue.pod_gpus.max()) if len(queue) else typical
            fragmented += int(free.sum() - size * np.floor_divide(free, size).sum())
            free_total += int(free.sum())
        self.fragmentation_samples.append((t, fragmented, free_total))

    def _typical_pod_gpus(self) -> int:
        if not self._pod_size_gpus:
            return 1
        sizes = sorted(self._pod_size_gpus)
        weights = np.array([self._pod_size_gpus[s] for s in sizes], dtype=np.float64)
        cumulative = np.cumsum(weights) / weights.sum()
        return int(sizes[int(np.searchsorted(cumulative, 0.5))])

    # -- events ----------------------------------------------------------------------------------

    def _arrive(self, job: _Job) -> None:
        job.state = "pending"
        self.live[job.number] = job
        spec = job.spec
        self._pod_size_gpus[spec.gpus_per_pod] = (
            self._pod_size_gpus.get(spec.gpus_per_pod, 0) + spec.gpus
        )
        self._log("submitted", job)
        self._enqueue(job)

    def _enqueue(self, job: _Job) -> None:
        job.reason = QUEUED
        self.pending[job.pool].add(job)
        self._new_arrivals.setdefault(job.pool, []).append(job)
        self._dirty = True

    def _complete(self, job: _Job, token: int) -> None:
        if job.token != token or job.state != "running":
            return  # the job failed or was evicted since this completion was planned
        job.remaining = 0.0
        self._release(job)
        self._end(job, "completed")
        self._log("completed", job, job.pods[0][0] if job.pods else None)

    def _end(self, job: _Job, state: str, reason: str | None = None) -> None:
        job.state = state
        job.ended = self._now
        job.end_reason = reason
        self.live.pop(job.number, None)
        self.ended_jobs.append(job)

    def _fault(self, fault: Fault) -> None:
        if isinstance(fault, Xid):
            self._xid(fault)
        elif isinstance(fault, NodeDown):
            self._node_down(fault)
        elif isinstance(fault, NodeRepaired):
            self._node_repaired(fault)
        elif isinstance(fault, GpuRepaired):
            gid = self._gid(fault.node, fault.gpu)
            self._set_healthy(gid, True)
        elif isinstance(fault, ProfileSwitch):
            self._switch_profile(self._job(fault.job), fault.profile)
        elif isinstance(fault, Misplace):
            self._job(fault.job).misplace = True
        elif isinstance(fault, DeadlockingGangs):
            for gang_id in fault.ids:
                self._register(
                    JobSpec(
                        gang_id,
                        arrival_s=self._now,
                        duration_s=fault.duration_s,
                        pods=fault.pods,
                        gpus_per_pod=fault.gpus_per_pod,
                        tenant=fault.tenant,
                        queue=fault.queue,
                        pool=fault.pool,
                        priority=fault.priority,
                        gang=True,
                        admission=PARTIAL,
                    )
                )
        else:
            raise TypeError(f"unknown fault {fault!r}")

    def _job(self, job_id: str) -> _Job:
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

    def _xid(self, fault: Xid) -> None:
        gid = self._gid(fault.node, fault.gpu)
        n = int(self.gpu_node[gid])
        self.xids.append((self._now, n, fault.gpu, fault.code))
        owner = int(self.gpu_owner[gid])
        job = self.jobs[owner] if owner >= 0 else None
        self._log("xid", job, n, f"Xid {fault.code}", f"GPU {fault.gpu} reported Xid {fault.code}")
        consequence = xid_consequence(fault.code)
        if consequence == "gpu-fatal":
            self._set_healthy(gid, False)
        if job is not None and consequence != "none":
            self._fail(job, f"Xid{fault.code}", f"Xid {fault.code} on {fault.node} GPU {fault.gpu}")

    def _node_down(self, fault: NodeDown) -> None:
        n = self._node(fault.node)
        if self.node_state[n] == DOWN:
            return
        for job in self._jobs_on_node(n):
            self._fail(job, fault.reason, f"node {fault.node} is down")
        self._set_node_state(n, DOWN)
        lo = int(self.node_offset[n])
        for gid in range(lo, lo + int(self.node_gpus[n])):
            self._update_dark(gid)

    def _node_repaired(self, fault: NodeRepaired) -> None:
        n = self._node(fault.node)
        lo = int(self.node_offset[n])
        state = DRAINED if self.node_cordoned_by_operator[n] else READY
        self._set_node_state(n, state)
        for gid in range(lo, lo + int(self.node_gpus[n])):
            self._set_healthy(gid, True)

    def _set_healthy(self, gid: int, healthy: bool) -> None:
        if bool(self.gpu_healthy[gid]) == healthy:
            return
        self.gpu_healthy[gid] = healthy
        n = int(self.gpu_node[gid])
        if self.gpu_owner[gid] < 0:
            self.free[n] += 1 if healthy else -1
            self._refresh_node(n)
        self._update_dark(gid)
        self._refresh_unusable()

    def _update_dark(self, gid: int) -> None:
        dark = not self.gpu_healthy[gid] or self.node_state[self.gpu_node[gid]] == DOWN
        since = self.gpu_dark_since[gid]
        if dark and np.isnan(since):
            self.gpu_dark_since[gid] = self._now
        elif not dark and not np.isnan(since):
            self.dark_intervals.append((float(since), self._now, gid))
            self.gpu_dark_since[gid] = np.nan

    def _set_node_state(self, n: int, state: int) -> None:
        self.node_state[n] = state
        if state != CORDONED:
            self.node_draining[n] = False
        self._refresh_node(n)
        lo = int(self.node_offset[n])
        for gid in range(lo, lo + int(self.node_gpus[n])):
            self._update_dark(gid)
        self._refresh_unusable()

    def _refresh_node(self, n: int) -> None:
        before = self.sched_free[n]
        self.sched_free[n] = self.free[n] if self.node_state[n] == READY else 0
        if self.sched_free[n] > before:
            self._freed_pools.add(int(self.node_pool[n]))
            self._dirty = True

    def _refresh_unusable(self) -> None:
        not_ready = self.node_state[self.gpu_node] != READY
        self.unusable_gpus = int((not_ready | ~self.gpu_healthy).sum())

    def _switch_profile(self, job: _Job, profile: str) -> None:
        if job.state == "running":
            before = NOMINAL_UTIL[job.profile_at(self._now)]
            self.activity += (NOMINAL_UTIL[profile] - before) * job.gpus_bound
        job.profiles.append((self._now, profile))

    def _jobs_on_node(self, n: int) -> list[_Job]:
        lo = int(self.node_offset[n])
        owners = self.gpu_owner[lo : lo + int(self.node_gpus[n])]
        return [self.jobs[o] for o in sorted({int(o) for o in owners if o >= 0})]

    # -- changes ---------------------------------------------------------------------------------

    def validate_change(self, change: Change) -> None:
        """Raise KeyError/ValueError for a change this cluster cannot take (unknown target)."""
        if isinstance(change, SetPlacement):
            if change.pool not in self.pool_number:
                raise KeyError(f"no pool {change.pool!r}")
            check_placement(change.placement)
        elif isinstance(change, SetQueueWeight):
            if change.queue not in self.queue_number:
                raise KeyError(f"no queue {change.queue!r}")
        elif isinstance(change, DrainNode | ResumeNode):
            self._node(change.node)
        else:
            raise TypeError(f"unknown change {change!r}")

    def _apply_changes(self) -> None:
        changes, self._pending_changes = self._pending_changes, []
        for change in changes:
            if isinstance(change, SetPlacement):
                self.placement[change.pool] = change.placement
                self._freed_pools.add(self.pool_number[change.pool])
            elif isinstance(change, SetQueueWeight):
                self.queues[self.queue_number[change.queue]].weight = float(change.weight)
                self._freed_pools.update(range(len(self.pool_names)))
            elif isinstance(change, DrainNode):
                self._drain(self._node(change.node), change.reason, change.evict)
            elif isinstance(change, ResumeNode):
                n = self._node(change.node)
                self.node_cordoned_by_operator[n] = False
                self.node_drain_reason[n] = None
                if self.node_state[n] != DOWN:
                    self._set_node_state(n, READY)

    def _drain(self, n: int, reason: str, evict: bool) -> None:
        self.node_cordoned_by_operator[n] = True
        self.node_drain_reason[n] = reason
        if self.node_state[n] == DOWN:
            return
        self._set_node_state(n, CORDONED)
        self._log("node_cordoned", node=n, reason="Cordoned", message=reason)
        if evict:
            for job in self._jobs_on_node(n):
                self._evict(job, f"node {self.node_names[n]} drained: {reason}")
        if not self._jobs_on_node(n):
            self._set_node_state(n, DRAINED)
            self._log("node_drained", node=n, reason="Drained", message=reason)
        else:
            self.node_draining[n] = True

    def _evict(self, job: _Job, message: str) -> None:
        running = job.state == "running"
        if running:
            job.remaining = max(job.remaining - (self._now - job.run_since), 1.0)
            job.token += 1
        self._release(job)
        job.state = "pending"
        job.started = None
        job.partial_since = None
        job.pods = []
        job.preemptions += 1
        self.preemptions += 1
        self._log("evicted", job, reason="Evicted", message=message)
        if not job.in_queue:
            self._enqueue(job)

    # -- binding and releasing ---------------------------------------------------------------------

    def _bind_pod(self, job: _Job, n: int, scatter: bool) -> None:
        size = job.spec.gpus_per_pod
        lo = int(self.node_offset[n])
        hi = lo + int(self.node_gpus[n])
        usable = (self.gpu_owner[lo:hi] < 0) & self.gpu_healthy[lo:hi]
        mask = int((usable.astype(np.int64) << np.arange(len(usable), dtype=np.int64)).sum())
        chosen = choose_gpus(self.node_domains[n], self.node_numa[n], mask, size, scatter)
        gids = lo + np.array(chosen, dtype=np.int64)
        self.gpu_owner[gids] = job.number
        self.free[n] -= size
        self.sched_free[n] = self.free[n] if self.node_state[n] == READY else 0
        job.pods.append((n, chosen, gids))
        record = _Allocation(job.number, gids, self._now)
        if job.state == "running":
            record.running_from = self._now
        self.active_allocations.setdefault(job.number, []).append(record)
        self.queues[job.queue].usage += size
        self.allocated_gpus += size
        if job.state != "running":
            self.partial_gpus += size

    def _release(self, job: _Job) -> None:
        if not job.pods:
            return
        held = job.gpus_bound
        for n, _, gids in job.pods:
            self.gpu_owner[gids] = -1
            self.free[n] += int(self.gpu_healthy[gids].sum())
            self._refresh_node(n)
        for record in self.active_allocations.pop(job.number, []):
            record.end = self._now
            self.closed_allocations.append(record)
            self._closed_ends.append(self._now)
        self.queues[job.queue].usage -= held
        self.allocated_gpus -= held
        if job.state == "running":
            self.activity -= NOMINAL_UTIL[job.profile_at(self._now)] * held
        else:
            self.partial_gpus -= held
        nodes = {n for n, _, _ in job.pods}
        job.pods = []
        self._freed_pools.add(job.pool)
        self._dirty = True
        for n in nodes:
            if self.node_draining[n] and not self._jobs_on_node(n):
                self._set_node_state(n, DRAINED)
                self._log(
                    "node_drained", node=n, reason="Drained", message=self.node_drain_reason[n]
                )

    def _start(self, job: _Job) -> None:
        if job.in_queue:
            self.pending[job.pool].remove(job)
        held_partial = job.gpus_bound
        job.state = "running"
        job.started = self._now
        if job.first_started is None:
            job.first_started = self._now
        job.run_since = self._now
        job.reason = None
        self.partial_gpus -= held_partial
        self.activity += NOMINAL_UTIL[job.profile_at(self._now)] * job.gpus_bound
        for record in self.active_allocations.get(job.number, []):
            if record.running_from == math.inf:
                record.running_from = self._now
        job.token += 1
        self._push(self._now + job.remaining, _COMPLETION, "completion", (job, job.token))
        first_node = job.pods[0][0]
        self._log("started", job, first_node)

    def _fail(self, job: _Job, reason: str, message: str) -> None:
        node = job.pods[0][0] if job.pods else None
        if job.state == "running":
            job.remaining = max(job.remaining - (self._now - job.run_since), 0.0)
            job.token += 1
        self._release(job)
        if job.in_queue:
            self.pending[job.pool].remove(job)
        self._end(job, "failed", reason)
        self._log("failed", job, node, reason, message)

    # -- scheduling ------------------------------------------------------------------------------

    def _schedule(self) -> None:
        self._dirty = False
        self._apply_changes()
        backfill = self.policy.backfill
        for p in range(len(self.pool_names)):
            new = self._new_arrivals.get(p, [])
            full = p in self._freed_pools or not backfill
            if (full or new) and len(self.pending[p]):
                self._schedule_pool(p, full, new)
        self._freed_pools.clear()
        self._new_arrivals.clear()
        # Binding may have freed nothing, but releases during the pass (none today) would.
        self._dirty = False

    def _schedule_pool(self, p: int, full: bool, new: list[_Job]) -> None:
        queue = self.pending[p]
        lo, hi = self.pool_slices[p]
        free = self.sched_free[lo:hi]
        backfill = self.policy.backfill
        self.blocker[p] = None
        slots = _SlotCounter(free)
        if full and backfill:
            fits = queue.pods_needed <= slots.for_each(queue.pod_gpus)
            candidates = [queue.jobs[i] for i in np.flatnonzero(fits)]
        elif full:
            candidates = list(queue.jobs)
        else:
            candidates = sorted((j for j in new if j.in_queue), key=lambda j: j.key)
        if not candidates:
            return
        ordered: Iterable[_Job] = candidates
        if self.policy.queue_order == "fair-share":
            ordered = self._fair_share_order(candidates)
        partial_done = False
        for job in ordered:
            if not job.in_queue:
                continue
            if job.partial:
                if partial_done:
                    continue
                partial_done = True
                waiting = self._bind_partial_gangs(p, [j for j in candidates if j.partial])
                slots.forget()
                if waiting is not None and not backfill:
                    self.blocker[p] = waiting
                    break
                continue
            if slots.of(job.spec.gpus_per_pod) < job.spec.members_needed:
                outcome: str | None = UNSCHEDULABLE
            else:
                outcome = self._place(job, p, free, lo)
            if outcome is None:
                slots.forget()
                continue
            self._unschedulable(job, outcome, free)
            if outcome == UNSCHEDULABLE and not backfill:
                self.blocker[p] = job
                break

    def _fair_share_order(self, jobs: list[_Job]) -> Iterator[_Job]:
        """Jobs in turn from the queue whose usage / weight (or / deserved) is lowest now."""
        by_queue: dict[int, deque[_Job]] = {}
        for job in jobs:
            by_queue.setdefault(job.queue, deque()).append(job)
        basis = self.policy.fair_share_basis
        while by_queue:
            q = min(by_queue, key=lambda q: (self.queues[q].share(basis), q))
            waiting = by_queue[q]
            job = waiting.popleft()
            if not waiting:
                del by_queue[q]
            yield job

    def _place(self, job: _Job, p: int, free: np.ndarray, lo: int) -> str | None:
        """Bind and start an all-or-nothing job; None when placed, else the pending reason."""
        spec = job.spec
        size = spec.gpus_per_pod
        need = spec.members_needed - len(job.pods)
        slots = pod_slots(free, size)
        if slots < need:
            return UNSCHEDULABLE
        queue = self.queues[job.queue]
        if queue.capability_gpus is not None and queue.usage + need * size > queue.capability_gpus:
            return QUEUE_CAPABILITY
        pods = min(spec.pods - len(job.pods), slots)
        placement = self.placement[self.pool_names[p]]
        capacity = self.node_gpus[lo : lo + len(free)]
        used = np.zeros(len(free), dtype=bool) if job.misplace else None
        for _ in range(pods):
            if used is not None:
                i = choose_node("spread", free, capacity, size, self.rng, exclude=used)
                if i == NO_NODE:
                    i = choose_node("spread", free, capacity, size, self.rng)
                used[i] = True
            else:
                i = choose_node(placement, free, capacity, size, self.rng)
            self._bind_pod(job, lo + i, scatter=job.misplace)
        self._log("scheduled", job, job.pods[0][0], "Scheduled", self._placement_message(job))
        self._start(job)
        return None

    def _bind_partial_gangs(self, p: int, jobs: list[_Job]) -> _Job | None:
        """Bind pods of partial-admission gangs one at a time while any fits, always to the
        gang with the fewest bound pods (ties: queue order) -- the pods of gangs pending
        together interleave as they do in a pod queue -- and start those reaching
        ``min_member``. Returns the first gang (in queue order) still incomplete, if any."""
        lo, hi = self.pool_slices[p]
        free = self.sched_free[lo:hi]
        capacity = self.node_gpus[lo:hi]
        placement = self.placement[self.pool_names[p]]
        waiting = [j for j in jobs if j.in_queue]
        trying = list(waiting)
        while trying:
            job = min(trying, key=lambda j: (len(j.pods), j.key))
            size = job.spec.gpus_per_pod
            queue = self.queues[job.queue]
            if queue.capability_gpus is not None and queue.usage + size > queue.capability_gpus:
                job.reason = QUEUE_CAPABILITY
                trying.remove(job)
                continue
            i = choose_node(placement, free, capacity, size, self.rng)
            if i == NO_NODE:
                trying.remove(job)
                continue
            self._bind_pod(job, lo + i, scatter=job.misplace)
            if job.partial_since is None:
                job.partial_since = self._now
            self._log(
                "scheduled",
                job,
                lo + i,
                "Scheduled",
                f"pod {len(job.pods)}/{job.spec.pods} bound to {self.node_names[lo + i]}",
            )
            if len(job.pods) >= job.spec.members_needed:
                self._start(job)
                trying.remove(job)
                waiting.remove(job)
        for job in waiting:
            if job.pods:
                job.reason = PARTIALLY_BOUND
            elif job.reason != QUEUE_CAPABILITY:
                self._unschedulable(job, UNSCHEDULABLE, free)
        return waiting[0] if waiting else None

    def _unschedulable(self, job: _Job, reason: str, free: np.ndarray) -> None:
        job.reason = reason
        if job.failed_scheduling_reported:
            return
        job.failed_scheduling_reported = True
        size = job.spec.gpus_per_pod
        if reason == QUEUE_CAPABILITY:
            queue = self.queues[job.queue]
            message = (
                f"queue {queue.name} would exceed its capability of {queue.capability_gpus:g} GPUs"
            )
        else:
            short = int((free < size).sum())
            message = (
                f"0/{len(free)} nodes are available: {short} Insufficient nvidia.com/gpu."
                if short == len(free)
                else f"{job.spec.members_needed} pods of {size} GPUs do not fit on the free GPUs"
                f" of {len(free) - short} nodes"
            )
        self._log("failed_scheduling", job, None, reason, message)

    def _placement_message(self, job: _Job) -> str:
        nodes = sorted({self.node_names[n] for n, _, _ in job.pods})
        shown = ", ".join(nodes[:4]) + (f" and {len(nodes) - 4} more" if len(nodes) > 4 else "")
        return f"{len(job.pods)} pods bound to {shown}"

    # -- restoring state (replay) ----------------------------------------------------------------

    def restore(
        self,
        spec: JobSpec,
        allocation: list[tuple[str, list[int]]],
        *,
        running: bool,
        started_s: float | None = None,
        partial_since_s: float | None = None,
    ) -> None:
        """Put a job found in a snapshot into the cluster now, bound exactly as given: running
        (its remaining work is ``spec.duration_s``), or pending -- a partial gang when it holds
        pods -- and queued for the next pass."""
        job = self._register(spec, arrives=False)
        job.state = "pending"
        self.live[job.number] = job
        size = spec.gpus_per_pod
        self._pod_size_gpus[size] = self._pod_size_gpus.get(size, 0) + spec.gpus
        for node, gpus in allocation:
            n = self._node(node)
            gids = int(self.node_offset[n]) + np.array(gpus, dtype=np.int64)
            if len(gpus) != size or (self.gpu_owner[gids] >= 0).any():
                raise ValueError(f"job {spec.id}: cannot restore its pod on {node} {gpus}")
            self.gpu_owner[gids] = job.number
            self.free[n] -= int(self.gpu_healthy[gids].sum())
            self.sched_free[n] = self.free[n] if self.node_state[n] == READY else 0
            job.pods.append((n, tuple(gpus), gids))
            record = _Allocation(job.number, gids, self._now)
            self.active_allocations.setdefault(job.number, []).append(record)
            self.queues[job.queue].usage += size
            self.allocated_gpus += size
            self.partial_gpus += size
        if running:
            self._start(job)
            if started_s is not None:
                job.started = job.first_started = started_s
        else:
            if job.pods:
                job.partial_since = partial_since_s if partial_since_s is not None else self._now
            self._enqueue(job)
            job.reason = PARTIALLY_BOUND if job.pods else QUEUED

    def restore_node(self, node: str, state: str, reason: str | None = None) -> None:
        """Set a node's state as found in a snapshot (``ready``, ``cordoned``, ``drained``,
        ``down``)."""
        n = self._node(node)
        code = NODE_STATES.index(state)
        if code in (CORDONED, DRAINED):
            self.node_cordoned_by_operator[n] = True
            self.node_drain_reason[n] = reason
        self._set_node_state(n, code)

    def restore_gpu_health(self, node: str, gpu: int, healthy: bool) -> None:
        self._set_healthy(self._gid(node, gpu), healthy)

    # -- metric samples ------------------------------------------------------------------------

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
