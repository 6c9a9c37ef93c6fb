"""The simulator at scale: fair-share ordering by a heap of queues gives exactly the order of
the former loop over every queue per job handed out (issue #17), on a seeded workload with many
queues of uneven weights, gangs and a tight cluster (so most passes leave jobs waiting)."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from dataclasses import replace

import numpy as np
import pytest

from diagnosis.core.simulate.cluster import ClusterSpec, PoolSpec, QueueSpec
from diagnosis.core.simulate.jobs import JobSpec
from diagnosis.core.simulate.policy import Policy
from diagnosis.core.simulate.simulator import Simulator
from diagnosis.core.simulate.state import Job

QUEUES = 24
HORIZON_S = 2 * 86400.0


class LoopOverQueues(Simulator):
    """The ordering before issue #17, kept here as the reference: for every job handed out,
    the queue with the lowest ``(share, number)`` among all queues still waiting."""

    def _fair_share_order(self, jobs: list[Job]) -> Iterator[Job]:
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
    about 130% offered load: 1-8 GPU pods and 2-4 pod gangs."""
    rng = np.random.default_rng(seed)
    queues = tuple(
        QueueSpec(f"q{i:02d}", weight=float(rng.integers(1, 6)), deserved_gpus=float(8 + i))
        for i in range(QUEUES)
    )
    spec = ClusterSpec(pools=(PoolSpec.uniform("a100", 32),), queues=queues, name="scale")
    jobs = []
    for i, arrival in enumerate(np.sort(rng.uniform(0, HORIZON_S, size=1500))):
        gang = rng.random() < 0.15
        jobs.append(
            JobSpec(
                f"job-{i:05d}",
                round(float(arrival), 3),
                round(float(rng.lognormal(np.log(2400), 1.0)), 3),
                pods=int(rng.integers(2, 5)) if gang else 1,
                gpus_per_pod=8 if gang else int(rng.choice([1, 2, 4, 8])),
                tenant=f"q{int(rng.integers(0, QUEUES)):02d}",
                priority=int(rng.integers(0, 3)),
            )
        )
    return spec, jobs


def run(simulator: type[Simulator], basis: str, seed: int) -> Simulator:
    spec, jobs = workload(seed)
    policy = Policy(queue_order="fair-share", default_placement="binpack")
    sim = simulator(spec, replace(policy, fair_share_basis=basis), seed)
    sim.submit(jobs)
    sim.run_until(HORIZON_S)
    return sim


@pytest.mark.parametrize(("basis", "seed"), [("weight", 3), ("deserved", 7)])
def test_heap_fair_share_order_matches_the_loop_over_every_queue(basis: str, seed: int) -> None:
    reference = run(LoopOverQueues, basis, seed)
    heap = run(Simulator, basis, seed)

    started = [(e[0], e[2]) for e in reference.events if e[1] == "started"]
    assert len(started) > 500  # the workload really schedules (and queues) many jobs
    assert heap.events == reference.events  # every start, bind and wait, in the same order
    assert heap.summary().as_dict() == reference.summary().as_dict()
