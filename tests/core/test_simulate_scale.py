"""The simulator at scale (issue #17): fair-share turns from a heap of queues, and a pass that
stops trying once nothing fits, schedule exactly as the scheduling pass before them did (a loop
over every queue per job handed out, every candidate tried), on seeded workloads with many queues
of uneven weights, all-or-nothing and partial gangs and a tight cluster (so most passes leave
jobs waiting)."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import replace

import numpy as np
import pytest

from diagnosis.core import snapshot as snapshot_format
from diagnosis.core.simulate import replay
from diagnosis.core.simulate.cluster import ClusterSpec, PoolSpec, QueueSpec
from diagnosis.core.simulate.jobs import (
    DATA_STARVED,
    HEALTHY,
    IDLE,
    INFERENCE,
    LOW_MFU,
    PARTIAL,
    JobSpec,
)
from diagnosis.core.simulate.policy import Policy
from diagnosis.core.simulate.scenarios import seed_scenario
from diagnosis.core.simulate.simulator import Simulator, _SlotCounter
from diagnosis.core.simulate.state import (
    QUEUE_CAPABILITY,
    UNSCHEDULABLE,
    Job,
    PendingQueue,
    SettledFlags,
)

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


# -- rebuilding a simulator from a snapshot, without a pandas frame per node, job or pod ---------


@pytest.fixture(scope="module")
def showcase_snapshot() -> snapshot_format.ClusterSnapshot:
    """The seed scenario after two hours: gangs (some partly bound), MIG-less nodes with NVLink
    domains and NUMA nodes, jobs of every metric profile."""
    sim = seed_scenario(0).build()
    return snapshot_format.load(sim.snapshot(2 * 3600.0))


def test_pods_are_read_per_job_and_pod_as_a_groupby_reads_them(showcase_snapshot) -> None:
    allocations = showcase_snapshot.allocations.sort_values(["job", "pod", "order"], kind="stable")
    expected: dict[str, list[tuple[str, list[int]]]] = {}
    for (job, _pod), group in allocations.groupby(["job", "pod"], sort=False):
        expected.setdefault(job, []).append((group["node"].iloc[0], group["index"].tolist()))

    assert len(expected) > 50
    assert replay._allocations_by_job(showcase_snapshot) == expected


def test_node_topology_is_read_as_a_groupby_reads_it(showcase_snapshot) -> None:
    gpus = showcase_snapshot.gpus
    by_node = dict(list(gpus.groupby("node", sort=False)))
    spec = replay.cluster_of(showcase_snapshot)

    nodes = [node for pool in spec.pools for node in pool.nodes]
    assert len(nodes) == len(showcase_snapshot.nodes)
    for node in nodes:
        group = by_node[node.name]
        assert list(node.numa) == group["numa"].tolist()
        assert sorted(i for d in node.nvlink_domains for i in d) == sorted(group["index"])


def test_profiles_are_inferred_per_job_as_row_by_row(showcase_snapshot) -> None:
    snap = showcase_snapshot
    stats = ["util_mean", "util_p10", "util_p90", "tensor_active_mean"]
    joined = snap.allocations.merge(snap.gpus[[*snapshot_format.GPU_KEY, *stats]], how="left")
    expected = {}
    for job_id, row in joined.groupby("job", sort=False)[stats].mean().iterrows():
        util, spread = row["util_mean"], row["util_p90"] - row["util_p10"]
        if snap.jobs.loc[job_id, "kind"] == "inference":
            expected[job_id] = INFERENCE
        elif np.isnan(util):
            expected[job_id] = HEALTHY
        elif util < 0.05:
            expected[job_id] = IDLE
        elif util < 0.6 and spread >= 0.5:
            expected[job_id] = DATA_STARVED
        elif util >= 0.6 and row["tensor_active_mean"] < 0.25:
            expected[job_id] = LOW_MFU
        else:
            expected[job_id] = HEALTHY

    assert {IDLE, DATA_STARVED, LOW_MFU, INFERENCE} <= set(expected.values())
    assert replay.infer_profiles(snap) == expected


# -- a restored backlog, the pending queue's bookkeeping, the collector's pause -----------------


def backlog_snapshot() -> snapshot_format.ClusterSnapshot:
    """The workload's two days of arrivals squeezed into two hours, as a snapshot then: some
    1,200 jobs pending (partial gangs among them), so that full passes have hundreds of
    candidates."""
    spec, jobs = workload(0)
    sim = Simulator(spec, POLICIES["fair-share by weight"], 0)
    sim.submit(replace(job, arrival_s=job.arrival_s / 24) for job in jobs)
    sim.run_until(2 * 3600.0)
    return snapshot_format.load(sim.snapshot())


def replay_events(snap: snapshot_format.ClusterSnapshot, simulator: type[Simulator], monkeypatch):
    seen = []
    with monkeypatch.context() as patched:
        patched.setattr(replay, "Simulator", simulator)
        summaries = replay.replay(snap, None, 3 * 3600.0, (0,), observe=seen.append)
    jobs = [(j.spec.id, j.state, j.reason, j.failed_scheduling_reported) for j in seen[0].jobs]
    return seen[0].events, jobs, summaries[0].as_dict()


def test_a_restored_backlog_schedules_exactly_as_before(monkeypatch) -> None:
    snap = backlog_snapshot()
    assert (snap.jobs["state"] == "pending").sum() > 1000

    events, jobs, summary = replay_events(snap, Simulator, monkeypatch)
    assert replay_events(snap, BeforeIssue17, monkeypatch) == (events, jobs, summary)
    assert sum(e[1] == "started" for e in events) > 300


def queued_job(number: int, key: tuple, flags: SettledFlags) -> Job:
    spec = JobSpec(f"j{number}", 0.0, 60.0, pods=1 + number % 3, gpus_per_pod=1 + number % 8)
    job = Job(number, spec, pool=0, queue=number % 5, partial=number % 7 == 0, flags=flags)
    job.key = key
    return job


def test_the_queue_stays_sorted_with_its_rows_through_merges_inserts_and_removals() -> None:
    rng = np.random.default_rng(3)
    flags = SettledFlags()
    queue = PendingQueue()
    model: list[Job] = []
    number = 0
    for step in range(300):
        batch = 200 if step == 0 else int(rng.choice([0, 1, 2, PendingQueue.MERGE_FROM]))
        for _ in range(batch):
            job = queued_job(number, (int(rng.integers(0, 3)), float(rng.random()), number), flags)
            queue.add(job)
            model.append(job)
            number += 1
        for _ in range(int(rng.integers(0, 4))):
            if model:
                job = model.pop(int(rng.integers(len(model))))
                queue.remove(job)
                assert not job.in_queue
        model.sort(key=lambda j: j.key)
        assert queue.jobs == model
        rows = queue.rows(np.arange(len(model)))
        expected = [
            (j.spec.gpus_per_pod, 1 if j.partial else j.spec.pods, j.partial, j.number, j.queue)
            for j in model
        ]
        assert [tuple(column) for column in rows.T.tolist()] == expected
        assert queue.pod_gpus.tolist() == [j.spec.gpus_per_pod for j in model]


def test_a_job_counts_as_settled_only_while_reported_and_unschedulable() -> None:
    flags = SettledFlags()
    job = queued_job(70, (0,), flags)

    job.reason = UNSCHEDULABLE
    assert not flags.array[70]  # not reported yet
    job.failed_scheduling_reported = True
    job.reason = UNSCHEDULABLE
    assert flags.array[70]
    job.reason = QUEUE_CAPABILITY
    assert not flags.array[70]
