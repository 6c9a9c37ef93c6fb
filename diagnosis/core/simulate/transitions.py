"""What each event does to the simulated cluster's state.

:class:`StateTransitions` adds to :class:`~diagnosis.core.simulate.state.ClusterState` the moves
of one event, each keeping the arrays, the queues' usage, the event log and the GPU-second
integrals in step: a job registered, arriving, queued, bound pod by pod, started, released,
ended, failed or evicted; a GPU or node failing, repaired, cordoned or drained; a job found in a
snapshot restored as it was. Which moves happen when is the event loop's and the scheduling
pass's business (:mod:`~diagnosis.core.simulate.simulator`).
"""

from __future__ import annotations

import heapq
import math
from typing import Any

import numpy as np

from diagnosis.core.simulate.cluster import QueueSpec
from diagnosis.core.simulate.faults import (
    GpuRepaired,
    NodeDown,
    NodeRepaired,
    Xid,
    xid_consequence,
)
from diagnosis.core.simulate.jobs import PARTIAL, JobSpec
from diagnosis.core.simulate.metrics import NOMINAL_UTIL
from diagnosis.core.simulate.placement import choose_gpus
from diagnosis.core.simulate.state import (
    ARRIVAL,
    COMPLETION,
    CORDONED,
    DOWN,
    DRAINED,
    FAULT,
    PARTIALLY_BOUND,
    QUEUED,
    READY,
    Allocation,
    ClusterState,
    Job,
)
from diagnosis.core.vocabulary import NODE_STATES

FRAGMENTATION_SAMPLE_S = 300.0


class StateTransitions(ClusterState):
    """A cluster's state with the moves that change it (no event loop, no scheduling pass)."""

    # -- jobs and the event log ------------------------------------------------------------------

    def _register(self, spec: JobSpec, *, arrives: bool = True) -> Job:
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
        job = Job(len(self.jobs), spec, pool, queue, partial, self.settled)
        job.key = self._order_key(job)
        self.jobs.append(job)
        self.job_by_id[spec.id] = job
        if arrives:
            self._push(max(spec.arrival_s, self._now), ARRIVAL, "arrival", job)
        return job

    def _order_key(self, job: Job) -> tuple:
        if self.policy.queue_order == "fifo":
            return (job.submitted, job.number)
        return (-job.spec.priority, job.submitted, job.number)

    def _push(self, t: float, event_class: int, kind: str, payload: Any) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (t, event_class, self._seq, kind, payload))

    def _log(
        self,
        kind: str,
        job: Job | None = None,
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

    def _arrive(self, job: Job) -> None:
        job.state = "pending"
        self.live[job.number] = job
        spec = job.spec
        self._pod_size_gpus[spec.gpus_per_pod] = (
            self._pod_size_gpus.get(spec.gpus_per_pod, 0) + spec.gpus
        )
        self._log("submitted", job)
        self._enqueue(job)

    def _enqueue(self, job: Job) -> None:
        job.reason = QUEUED
        self.pending[job.pool].add(job)
        self._new_arrivals.setdefault(job.pool, []).append(job)
        self._dirty = True

    def _complete(self, job: Job, token: int) -> None:
        if job.token != token or job.state != "running":
            return  # the job failed or was evicted since this completion was planned
        job.remaining = 0.0
        self._release(job)
        self._end(job, "completed")
        self._log("completed", job, job.pods[0][0] if job.pods else None)

    def _end(self, job: Job, state: str, reason: str | None = None) -> None:
        job.state = state
        job.ended = self._now
        job.end_reason = reason
        self.live.pop(job.number, None)
        self.ended_jobs.append(job)

    # -- GPUs and nodes --------------------------------------------------------------------------

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
        if state == DRAINED:
            for repair in self.repairs_on_drain.pop(n, ()):
                fixed = GpuRepaired(self._now + repair.after_s, repair.node, repair.gpu)
                self._push(fixed.at, FAULT, "fault", fixed)
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

    def _switch_profile(self, job: Job, profile: str) -> None:
        if job.state == "running":
            before = NOMINAL_UTIL[job.profile_at(self._now)]
            self.activity += (NOMINAL_UTIL[profile] - before) * job.gpus_bound
        job.profiles = (*job.profiles, (self._now, profile))

    # -- draining and evicting -------------------------------------------------------------------

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

    def _evict(self, job: Job, message: str) -> None:
        running = job.state == "running"
        if running:
            job.remaining = max(job.remaining - (self._now - job.run_since), 1.0)
            job.token += 1
        self._release(job)
        job.state = "pending"
        job.started = None
        job.partial_since = None
        job.pods = ()
        job.preemptions += 1
        self.preemptions += 1
        self._log("evicted", job, reason="Evicted", message=message)
        if not job.in_queue:
            self._enqueue(job)

    def _requeue(self, job: Job, reason: str) -> None:
        """Release a job's pods and queue it again, admitted whole from now on (a gang's release:
        a requeue with all-or-nothing admission, as Kueue's waitForPodsReady does)."""
        if job.state not in ("pending", "running"):
            return  # ended (or not arrived): nothing to release
        job.partial = False
        if job.pods or job.state == "running":
            self._evict(job, f"requeued: {reason}")

    # -- binding and releasing -------------------------------------------------------------------

    def _bind_pod(self, job: Job, n: int, scatter: bool) -> None:
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
        job.pods = (*job.pods, (n, chosen, gids))
        record = Allocation(job.number, gids, self._now)
        if job.state == "running":
            record.running_from = self._now
        self.active_allocations.setdefault(job.number, []).append(record)
        self.queues[job.queue].usage += size
        self.allocated_gpus += size
        if job.state != "running":
            self.partial_gpus += size

    def _release(self, job: Job) -> None:
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
        job.pods = ()
        self._freed_pools.add(job.pool)
        self._dirty = True
        for n in nodes:
            if self.node_draining[n] and not self._jobs_on_node(n):
                self._set_node_state(n, DRAINED)
                self._log(
                    "node_drained", node=n, reason="Drained", message=self.node_drain_reason[n]
                )

    def _start(self, job: Job) -> None:
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
        self._push(self._now + job.remaining, COMPLETION, "completion", (job, job.token))
        first_node = job.pods[0][0]
        self._log("started", job, first_node)

    def _fail(self, job: Job, reason: str, message: str) -> None:
        node = job.pods[0][0] if job.pods else None
        if job.state == "running":
            job.remaining = max(job.remaining - (self._now - job.run_since), 0.0)
            job.token += 1
        self._release(job)
        if job.in_queue:
            self.pending[job.pool].remove(job)
        self._end(job, "failed", reason)
        self._log("failed", job, node, reason, message)

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
            job.pods = (*job.pods, (n, tuple(gpus), gids))
            record = Allocation(job.number, gids, self._now)
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
