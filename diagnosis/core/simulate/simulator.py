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

The state and its records are in :mod:`~diagnosis.core.simulate.state`, what one event does to
them in :mod:`~diagnosis.core.simulate.transitions`; this module holds the event loop, the
changes and the scheduling pass.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterable
from operator import itemgetter
from typing import Any

import numpy as np

from diagnosis.core.simulate.document import build_document
from diagnosis.core.simulate.faults import (
    DeadlockingGangs,
    Fault,
    GpuRepaired,
    Misplace,
    NodeDown,
    NodeRepaired,
    ProfileSwitch,
    RepairAfterDrain,
    Xid,
)
from diagnosis.core.simulate.jobs import PARTIAL, JobSpec
from diagnosis.core.simulate.placement import NO_NODE, choose_node, pod_slots
from diagnosis.core.simulate.policy import (
    Change,
    DrainNode,
    RequeueJob,
    ResumeNode,
    SetPlacement,
    SetQueueWeight,
    check_placement,
)
from diagnosis.core.simulate.state import (
    CHANGE,
    DOWN,
    DRAINED,
    FAULT,
    PARTIALLY_BOUND,
    QUEUE_CAPABILITY,
    READY,
    TICK,
    UNSCHEDULABLE,
    Job,
    Queue,
)
from diagnosis.core.simulate.summary import Summary, summarize
from diagnosis.core.simulate.transitions import StateTransitions


class _SlotCounter:
    """Pod slots per pod size on a pool's free GPUs, counted once per size until forgotten
    (after a placement); ``messages`` caches unschedulable messages the same way."""

    def __init__(self, free: np.ndarray) -> None:
        self.free = free
        self.counts: dict[int, int] = {}
        self.messages: dict[tuple[int, int], str] = {}

    def of(self, size: int) -> int:
        count = self.counts.get(size)
        if count is None:
            count = self.counts[size] = pod_slots(self.free, size)
        return count

    def for_each(self, sizes: np.ndarray) -> np.ndarray:
        if not len(sizes):
            return np.zeros(0, dtype=np.int64)
        present = np.bincount(sizes)
        table = np.zeros(len(present), dtype=np.int64)
        for size in np.flatnonzero(present).tolist():
            table[size] = self.of(size)
        return table[sizes]

    def forget(self) -> None:
        self.counts.clear()
        self.messages.clear()


class _InOrder:
    """Candidates in turn in the order given: ranks 0, 1, ... of ``count``."""

    def __init__(self, count: int) -> None:
        self.count = count
        self.next = 0

    def __iter__(self) -> _InOrder:
        return self

    def __next__(self) -> int:
        rank = self.next
        if rank >= self.count:
            raise StopIteration
        self.next = rank + 1
        return rank

    def rest(self) -> np.ndarray:
        """The ranks not handed out yet, in turn."""
        rest = np.arange(self.next, self.count, dtype=np.int64)
        self.next = self.count
        return rest


class _FairShareTurns:
    """Candidates in turn from the queue whose usage / weight (or / deserved) is lowest now
    (ties: the lower queue number), inside a queue in the given order; handed out as ranks into
    the candidates, whose queue numbers ``queue_of`` gives.

    The queues waiting are a heap keyed by ``(share, queue)`` as of when each was pushed. A
    queue's usage only grows during a pass (the pass binds; releases happen in events between
    passes), so a stored key is never above the queue's share now: a popped queue whose share
    has not moved since is the lowest, and one whose share grew is pushed back with its new
    key. Each candidate handed out costs O(log queues), not a look at every queue, and
    grouping the candidates by queue is one stable sort in numpy, not a Python step per
    candidate (issue #17).
    """

    def __init__(self, queue_of: np.ndarray, queues: list[Queue], basis: str) -> None:
        if len(queue_of) == 1:  # most passes follow one arrival
            self.order = np.zeros(1, dtype=np.int64)
            numbers, starts = [int(queue_of[0])], [0]
        else:
            # by queue, each in the given order; 16-bit keys sort by radix, in linear time
            keys = queue_of.astype(np.uint16) if len(queues) <= 1 << 16 else queue_of
            self.order = np.argsort(keys, kind="stable")
            grouped = queue_of[self.order]
            starts = [0, *(np.flatnonzero(grouped[1:] != grouped[:-1]) + 1).tolist()]
            numbers = grouped[starts].tolist()
        self.next = dict(zip(numbers, starts, strict=True))
        self.end = dict(zip(numbers, [*starts[1:], len(queue_of)], strict=True))
        self.queues = queues
        self.basis = basis
        self.heap = [(queues[q].share(basis), q) for q in numbers]
        heapq.heapify(self.heap)

    def __iter__(self) -> _FairShareTurns:
        return self

    def __next__(self) -> int:
        heap, queues, basis = self.heap, self.queues, self.basis
        while heap:
            stored, q = heap[0]
            share = queues[q].share(basis)
            if share != stored:
                heapq.heapreplace(heap, (share, q))
                continue
            at = self.next[q]
            self.next[q] = at + 1
            if at + 1 == self.end[q]:
                heapq.heappop(heap)
            return int(self.order[at])
        raise StopIteration

    def rest(self) -> np.ndarray:
        """The ranks not handed out yet, in the turns they would get while no share moves: each
        queue's in a row, queues by ``(share, queue)``."""
        turns = sorted((self.queues[q].share(self.basis), q) for _, q in self.heap)
        self.heap = []
        if not turns:
            return np.zeros(0, dtype=np.int64)
        return np.concatenate([self.order[self.next[q] : self.end[q]] for _, q in turns])


class _Candidates:
    """The jobs at positions ``at`` of a pool's queue as a pass began (the queue changes as jobs
    start), by rank: all taken at once in C when few are, else looked up one by one in a copy
    of the queue's list -- a full pass over a large backlog looks at few of its candidates."""

    __slots__ = ("at", "jobs")

    TAKEN_UP_TO = 64

    def __init__(self, jobs: list[Job], at: np.ndarray) -> None:
        self.at: np.ndarray | None = None
        if len(at) == 1:
            self.jobs: list[Job] | tuple[Job, ...] = (jobs[int(at[0])],)
        elif len(at) <= self.TAKEN_UP_TO:
            self.jobs = itemgetter(*at.tolist())(jobs)
        else:
            self.jobs, self.at = list(jobs), at

    def __getitem__(self, rank: int) -> Job:
        return self.jobs[rank] if self.at is None else self.jobs[int(self.at[rank])]

    def partial_gangs(self, queued_partial: np.ndarray) -> list[Job]:
        """The candidates that are partial gangs, in order (a job queued as one may have been
        requeued whole since: its flag is read)."""
        ranks = np.flatnonzero(queued_partial).tolist()
        return [job for job in map(self.__getitem__, ranks) if job.partial]


class Simulator(StateTransitions):
    """A simulated cluster. Submit jobs, inject faults, apply changes, advance time, read it."""

    # -- public API ------------------------------------------------------------------------------

    def submit(self, jobs: JobSpec | Iterable[JobSpec]) -> None:
        """Queue jobs for arrival at their ``arrival_s`` (now, when that is past)."""
        for spec in [jobs] if isinstance(jobs, JobSpec) else jobs:
            self._register(spec)

    def inject(self, fault: Fault | Iterable[Fault]) -> None:
        """Schedule faults at their time ``at`` (now, when that is past)."""
        for one in [fault] if not isinstance(fault, Iterable) else fault:
            self._push(max(one.at, self._now), FAULT, "fault", one)

    def apply(self, change: Change | Iterable[Change]) -> None:
        """Apply changes from the next scheduling pass on (the next event batch, or now)."""
        for one in [change] if not isinstance(change, Iterable) else change:
            self.validate_change(one)
            self._pending_changes.append(one)
        self._push(self._now, CHANGE, "change", None)

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
                    self._push(math.ceil(moment / tick_s - 1e-9) * tick_s, TICK, "tick", None)
                    self._tick_scheduled = True
        self._advance(t)

    def step(self, dt: float) -> None:
        self.run_until(self._now + dt)

    def run(self) -> None:
        """Run until no event is left (careful with long-running jobs)."""
        while self._heap:
            self.run_until(self._heap[0][0])

    def snapshot(self, at: float | None = None, *, window_s: int | None = None) -> dict[str, Any]:
        """A ``gpuobs.snapshot/v1`` document at ``at`` (run there first) or now; its events are
        those since the previous snapshot (the first: since the window's start)."""
        if at is not None:
            self.run_until(at)
        return build_document(self, window_s or self.policy.window_s)

    def summary(self) -> Summary:
        """Utilisation, waits, fragmentation and job counts since the start (see summary.py)."""
        return summarize(self)

    # -- faults ----------------------------------------------------------------------------------

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
        elif isinstance(fault, RepairAfterDrain):
            n = self._node(fault.node)
            self.repairs_on_drain.setdefault(n, []).append(fault)
            if self.node_state[n] == DRAINED:
                self._set_node_state(n, DRAINED)  # drained already: the repair starts now
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
        elif isinstance(change, RequeueJob):
            self._job(change.job)
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
            elif isinstance(change, RequeueJob):
                self._requeue(self._job(change.job), change.reason)
            elif isinstance(change, ResumeNode):
                n = self._node(change.node)
                self.node_cordoned_by_operator[n] = False
                self.node_drain_reason[n] = None
                if self.node_state[n] != DOWN:
                    self._set_node_state(n, READY)

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

    def _schedule_pool(self, p: int, full: bool, new: list[Job]) -> None:
        queue = self.pending[p]
        lo, hi = self.pool_slices[p]
        free = self.sched_free[lo:hi]
        backfill = self.policy.backfill
        self.blocker[p] = None
        slots = _SlotCounter(free)
        # The candidates as positions in the queue (in its order), then as jobs and the rows of
        # the queue's arrays they need: numpy work and one copy in C, no Python step per
        # candidate -- a full pass of a large backlog mostly finds that nothing fits.
        if full and backfill:
            at = np.flatnonzero(queue.pods_needed <= slots.for_each(queue.pod_gpus))
        elif full:
            at = np.arange(len(queue))
        else:
            at = queue.positions([j for j in new if j.in_queue])
        if not len(at):
            return
        candidates = _Candidates(queue.jobs, at)
        sizes, _, queued_partial, numbers, queue_of = queue.rows(at)
        queued_partial = queued_partial != 0  # a superset of the partial gangs (see _none_fit)
        turns: _InOrder | _FairShareTurns
        if self.policy.queue_order == "fair-share":
            turns = _FairShareTurns(queue_of, self.queues, self.policy.fair_share_basis)
        else:
            turns = _InOrder(len(at))
        # Once the pool's fullest free node is below every candidate's pod size, no candidate
        # fits any more (each needs a pod at least) and the rest of the pass only records why
        # they wait (a fast path).
        smallest_pod = int(sizes.min())
        partial_done = False
        for rank in turns:
            job = candidates[rank]
            if not job.in_queue:
                continue
            if job.partial:
                if partial_done:
                    continue
                partial_done = True
                waiting = self._bind_partial_gangs(p, candidates.partial_gangs(queued_partial))
                slots.forget()
                if waiting is not None and not backfill:
                    self.blocker[p] = waiting
                    break
                if backfill and int(free.max(initial=0)) < smallest_pod:
                    self._none_fit(
                        p, turns, candidates, queued_partial, numbers, free, partial_done
                    )
                    return
                continue
            if slots.of(job.spec.gpus_per_pod) < job.spec.members_needed:
                outcome: str | None = UNSCHEDULABLE
            else:
                outcome = self._place(job, p, free, lo)
            if outcome is None:
                slots.forget()
                if backfill and int(free.max(initial=0)) < smallest_pod:
                    self._none_fit(
                        p, turns, candidates, queued_partial, numbers, free, partial_done
                    )
                    return
                continue
            self._unschedulable(job, outcome, free, slots.messages)
            if outcome == UNSCHEDULABLE and not backfill:
                self.blocker[p] = job
                break

    def _none_fit(
        self,
        p: int,
        turns: _InOrder | _FairShareTurns,
        candidates: _Candidates,
        queued_partial: np.ndarray,
        numbers: np.ndarray,
        free: np.ndarray,
        partial_done: bool,
    ) -> None:
        """The rest of a backfill pass in which no candidate fits any more: exactly what the
        pass would do to each (it waits, unschedulable; the first partial gang's turn still
        tries the partial gangs), in the same order -- with no placement, no queue's share
        moves, so the fair-share turns are each queue's jobs in a row.

        A job that is no partial gang (none queued as one is), still queued and settled (see
        :class:`~diagnosis.core.simulate.state.SettledFlags`) would only be set unschedulable
        again, which it is: only the others are looked at, found with numpy (issue #17)."""
        rest = turns.rest()
        rest = rest[queued_partial[rest] | ~self.settled.array[numbers[rest]]]
        messages: dict[tuple[int, int], str] = {}  # no placement from here on: free stays
        for rank in rest.tolist():
            job = candidates[rank]
            if not job.in_queue:
                continue
            if job.partial:
                if not partial_done:
                    partial_done = True
                    self._bind_partial_gangs(p, candidates.partial_gangs(queued_partial))
                continue
            if job.failed_scheduling_reported:
                job.reason = UNSCHEDULABLE  # what _unschedulable does to a job reported before
            else:
                self._unschedulable(job, UNSCHEDULABLE, free, messages)

    def _place(self, job: Job, p: int, free: np.ndarray, lo: int) -> str | None:
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

    def _bind_partial_gangs(self, p: int, jobs: list[Job]) -> Job | None:
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

    def _unschedulable(
        self,
        job: Job,
        reason: str,
        free: np.ndarray,
        messages: dict[tuple[int, int], str] | None = None,
    ) -> None:
        """Set the job's pending reason, and log its failed scheduling the first time.
        ``messages``: a cache of the unschedulable message per pod size and pods needed, while
        ``free`` stays as it is (until a placement)."""
        reported = job.failed_scheduling_reported
        job.failed_scheduling_reported = True  # first, so that the reason settles the job
        job.reason = reason
        if reported:
            return
        spec = job.spec
        if reason == QUEUE_CAPABILITY:
            queue = self.queues[job.queue]
            message = (
                f"queue {queue.name} would exceed its capability of {queue.capability_gpus:g} GPUs"
            )
        else:
            shape = (spec.gpus_per_pod, spec.members_needed)
            cached = messages.get(shape) if messages is not None else None
            message = cached or self._unschedulable_message(free, *shape)
            if messages is not None and cached is None:
                messages[shape] = message
        self._log("failed_scheduling", job, None, reason, message)

    @staticmethod
    def _unschedulable_message(free: np.ndarray, size: int, needed: int) -> str:
        short = int((free < size).sum())
        if short == len(free):
            return f"0/{len(free)} nodes are available: {short} Insufficient nvidia.com/gpu."
        fitting = len(free) - short
        return f"{needed} pods of {size} GPUs do not fit on the free GPUs of {fitting} nodes"

    def _placement_message(self, job: Job) -> str:
        nodes = sorted({self.node_names[n] for n, _, _ in job.pods})
        shown = ", ".join(nodes[:4]) + (f" and {len(nodes) - 4} more" if len(nodes) > 4 else "")
        return f"{len(job.pods)} pods bound to {shown}"
