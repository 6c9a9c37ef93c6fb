"""The simulator at scale (issue #17): fair-share turns from a heap of queues, and a pass that
stops trying once nothing fits, schedule exactly as the scheduling pass before them did (a loop
over every queue per job handed out, every candidate tried), on seeded workloads with many queues
of uneven weights, all-or-nothing and partial gangs and a tight cluster (so most passes leave
jobs waiting)."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator

import numpy as np
import pytest

from diagnosis.core.simulate.cluster import ClusterSpec, PoolSpec, QueueSpec
from diagnosis.core.simulate.jobs import PARTIAL, JobSpec
from diagnosis.core.simulate.policy import Policy
from diagnosis.core.simulate.simulator import Simulator, _SlotCounter
from diagnosis.core.simulate.state import UNSCHEDULABLE, Job

QUEUES = 24
HORIZON_S = 2 * 86400.0
BATCH_S = 600.0


class BeforeIssue17(Simulator):
    """The scheduling pass before issue #17, kept here as the reference: every candidate is
    tried, and for every job handed out the fair-share order looks at every queue waiting."""

    def _schedule_pool(self, p: int, full: bool, new: list[Job]) -> None:
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
        ordered: Iterable[Job] = candidates
        if self.policy.queue_order == "fair-share":
            ordered = self._loop_over_queues(candidates)
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

    def _loop_over_queues(self, jobs: list[Job]) -> Iterator[Job]:
        by_queue: dict[int, deque[Job]] = {}
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


def workload(seed: int) -> tuple[ClusterSpec, list[JobSpec]]:
    """32 nodes x 8 GPUs, 24 queues (weights 1..5, equal ones tie), 1,500 jobs over two days at
    about 130% offered load, arriving in batches every 10 minutes: 1-8 GPU pods and 2-4 pod
    gangs, a third of them admitted pod by pod."""
    rng = np.random.default_rng(seed)
    queues = tuple(
        QueueSpec(f"q{i:02d}", weight=float(rng.integers(1, 6)), deserved_gpus=float(8 + i))
        for i in range(QUEUES)
    )
    spec = ClusterSpec(pools=(PoolSpec.uniform("a100", 32),), queues=queues, name="scale")
    jobs = []
    for i, arrival in enumerate(np.sort(rng.uniform(0, HORIZON_S, size=1500))):
        gang = rng.random() < 0.15
        partial = gang and rng.random() < 0.33
        jobs.append(
            JobSpec(
                f"job-{i:05d}",
                float(arrival // BATCH_S * BATCH_S),  # jobs arrive in batches
                round(float(rng.lognormal(np.log(2400), 1.0)), 3),
                pods=int(rng.integers(2, 5)) if gang else 1,
                gpus_per_pod=8 if gang else int(rng.choice([1, 2, 4, 8])),
                tenant=f"q{int(rng.integers(0, QUEUES)):02d}",
                priority=int(rng.integers(0, 3)),
                admission=PARTIAL if partial else None,
            )
        )
    return spec, jobs


def run(simulator: type[Simulator], policy: Policy, seed: int) -> Simulator:
    spec, jobs = workload(seed)
    sim = simulator(spec, policy, seed)
    sim.submit(jobs)
    sim.run_until(HORIZON_S)
    return sim


POLICIES = {
    "fair-share by weight": Policy(queue_order="fair-share", default_placement="binpack"),
    "fair-share by deserved": Policy(queue_order="fair-share", fair_share_basis="deserved"),
    "priority": Policy(queue_order="priority", default_placement="binpack"),
}


@pytest.mark.parametrize(("policy", "seed"), [(name, i) for i, name in enumerate(POLICIES)])
def test_the_pass_schedules_exactly_as_before(policy: str, seed: int) -> None:
    reference = run(BeforeIssue17, POLICIES[policy], seed)
    heap = run(Simulator, POLICIES[policy], seed)

    started = [(e[0], e[2]) for e in reference.events if e[1] == "started"]
    assert len(started) > 500  # the workload really schedules (and queues) many jobs
    assert heap.events == reference.events  # every start, bind and wait, in the same order
    assert heap.summary().as_dict() == reference.summary().as_dict()
