"""Ready-made clusters, workloads and faults.

- :func:`seed_scenario` -- the built-in demo: 128 nodes x 8 A100-SXM4-80GB under ``spread``, a
  512-GPU pre-training job, 100 eight-GPU tuning jobs, a 16-GPU inference service, a steady
  stream of small research jobs, and faults that make every diagnosis rule fire within the first
  simulated hours.
- :func:`rule_showcase_scenario` -- a 216-GPU cluster built so that at ``snapshot_at`` (5 h)
  every one of the nine rules fires at once; the tests use it.
- :func:`small_scenario` -- a few nodes and a few dozen jobs for fast tests.
- :func:`week_scenario` -- a week of a 1,024-GPU cluster with 10,000 jobs, for the benchmark.

Each returns a :class:`Scenario`; ``scenario.build()`` gives a ready :class:`Simulator`.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from diagnosis.core.simulate.cluster import A100_SXM4_TOPOLOGY, ClusterSpec, PoolSpec, QueueSpec
from diagnosis.core.simulate.faults import (
    DeadlockingGangs,
    Fault,
    ProfileSwitch,
    RepairAfterDrain,
    Xid,
)
from diagnosis.core.simulate.jobs import (
    DATA_STARVED,
    HOT,
    HUNG,
    IDLE,
    LOW_MFU,
    PARTIAL,
    POWER_CAPPED,
    WAITING,
    JobSpec,
)
from diagnosis.core.simulate.policy import Policy
from diagnosis.core.simulate.simulator import Simulator

HOUR = 3600.0
DAY = 24 * HOUR


@dataclass(frozen=True)
class Scenario:
    name: str
    spec: ClusterSpec
    policy: Policy
    jobs: tuple[JobSpec, ...]
    faults: tuple[Fault, ...] = ()
    seed: int = 0
    snapshot_at: float | None = None
    notes: dict[str, str] = field(default_factory=dict)

    def build(self, policy: Policy | None = None, seed: int | None = None) -> Simulator:
        """A simulator with the scenario's jobs submitted and faults injected, at time 0."""
        sim = Simulator(self.spec, policy or self.policy, self.seed if seed is None else seed)
        sim.submit(self.jobs)
        sim.inject(self.faults)
        return sim

    def without_faults(self) -> Scenario:
        """The same cluster and jobs with no fault injected (for fair policy comparisons)."""
        return replace(self, faults=())

    def with_placement(self, placement: str) -> Scenario:
        pools = {pool.name: placement for pool in self.spec.pools}
        return replace(self, policy=replace(self.policy, placement=pools))


def _small_job_stream(
    rng: np.random.Generator,
    *,
    prefix: str,
    start: float,
    end: float,
    mean_gap_s: float,
    sizes: tuple[int, ...],
    size_weights: tuple[float, ...],
    median_s: float,
    sigma: float,
    tenant: str,
    pool: str | None = None,
    kind: str = "training",
    max_s: float | None = None,
) -> list[JobSpec]:
    """Poisson arrivals of single-pod jobs with lognormal durations."""
    jobs = []
    t = start
    weights = np.asarray(size_weights, dtype=np.float64) / sum(size_weights)
    while True:
        t += float(rng.exponential(mean_gap_s))
        if t >= end:
            return jobs
        duration = float(rng.lognormal(np.log(median_s), sigma))
        if max_s is not None:
            duration = min(duration, max_s)
        jobs.append(
            JobSpec(
                f"{prefix}-{len(jobs):04d}",
                arrival_s=round(t, 3),
                duration_s=max(round(duration, 3), 60.0),
                gpus_per_pod=int(rng.choice(sizes, p=weights)),
                tenant=tenant,
                pool=pool,
                kind=kind,
            )
        )


# ----------------------------------------------------------------------------------------------
# The purpose-built rule showcase


SHOWCASE_AT = 5 * HOUR


def rule_showcase_scenario(seed: int = 0) -> Scenario:
    """Every rule fires in the snapshot at ``snapshot_at`` (5 h).

    ``a100`` (16 nodes, spread): a one-GPU "squatter" on every node and a stream of small jobs
    keep an 8-GPU job pending although ~90 GPUs are free (fragmentation) and overtake it for
    hours (starvation); an Xid 79 hits squatter-00's GPU 5 min before the snapshot.
    ``train`` (5 nodes, spread): a TP-8 job split into two 4-GPU pods lands on two nodes
    (topology-misplacement), then an idle, a data-starved and a low-MFU job.
    ``gang`` (4 nodes): two 3-pod gangs bound pod by pod take two nodes each (gang-deadlock).
    ``hold`` (2 nodes): a partial gang holds one node while the other is busy (gang-partial-hold).
    ``lab`` (5 nodes, hidden waste): a 2 x 8 gang stuck in a collective (hung-collective), a
    job idle before loading anything in queue ``lab``, whose 8 guaranteed GPUs it leaves idle
    while a pretrain job waits for the pool (idle-allocation, idle-quota), a job on hot GPUs
    (thermal-throttling) and one at its power cap (power-throttling); and an Xid 94 (contained
    ECC error) leaves a row remap pending on a100-001's GPU 0 (ecc-row-remap). The notebook
    ``idle-nb`` holds its memory (idle-held). Jobs are not preempted in the simulator, so
    ``preemption-thrash`` has no scenario (see NOT_SIMULATED).
    """
    rng = np.random.default_rng(seed)
    topology = A100_SXM4_TOPOLOGY
    spec = ClusterSpec(
        pools=(
            PoolSpec.uniform("a100", 16, **topology),
            PoolSpec.uniform("train", 5, **topology),
            PoolSpec.uniform("gang", 4, **topology),
            PoolSpec.uniform("hold", 2, **topology),
            PoolSpec.uniform("lab", 5, **topology),
        ),
        queues=(
            QueueSpec("pretrain", weight=4, deserved_gpus=96),
            QueueSpec("research", weight=2, deserved_gpus=96),
            QueueSpec("serving", weight=1, deserved_gpus=24),
            QueueSpec("lab", weight=1, deserved_gpus=8),
        ),
        name="showcase",
    )
    jobs: list[JobSpec] = [
        JobSpec(f"squatter-{i:02d}", i, DAY, gpus_per_pod=1, tenant="research", pool="a100")
        for i in range(16)
    ]
    jobs.append(JobSpec("wide-8", 60, 4 * HOUR, gpus_per_pod=8, tenant="pretrain", pool="a100"))
    jobs += _small_job_stream(
        rng,
        prefix="small",
        start=120,
        end=SHOWCASE_AT,
        mean_gap_s=300,
        sizes=(1, 2),
        size_weights=(3, 1),
        median_s=1800,
        sigma=0.5,
        tenant="research",
        pool="a100",
    )
    jobs += [
        JobSpec("tp-split", 0, DAY, pods=2, gpus_per_pod=4, tp=8, tenant="pretrain", pool="train"),
        JobSpec(
            "idle-nb",
            1,
            DAY,
            gpus_per_pod=8,
            tenant="research",
            pool="train",
            profile=IDLE,
            kind="notebook",
        ),
        JobSpec(
            "starved-input",
            2,
            DAY,
            gpus_per_pod=8,
            tenant="research",
            pool="train",
            profile=DATA_STARVED,
        ),
        JobSpec(
            "low-mfu", 3, DAY, gpus_per_pod=8, tenant="pretrain", pool="train", profile=LOW_MFU
        ),
        JobSpec(
            "hold-busy", 0, DAY, gpus_per_pod=8, tenant="serving", pool="hold", kind="inference"
        ),
        JobSpec(
            "hold-partial",
            60,
            DAY,
            pods=2,
            gpus_per_pod=8,
            tenant="research",
            pool="hold",
            admission=PARTIAL,
        ),
    ]
    lab = {"pool": "lab", "gpus_per_pod": 8, "tenant": "research"}
    jobs += [
        JobSpec("allreduce-hung", 4, DAY, pods=2, profile=HUNG, **lab),
        JobSpec("lab-wait", 5, DAY, queue="lab", profile=WAITING, kind="batch", **lab),
        JobSpec("hot-train", 6, DAY, profile=HOT, **lab),
        JobSpec("capped-train", 7, DAY, profile=POWER_CAPPED, **lab),
        JobSpec("lab-next", 60, DAY, gpus_per_pod=4, tenant="pretrain", pool="lab"),
    ]
    faults: tuple[Fault, ...] = (
        DeadlockingGangs(600, "gang", pods=3, tenant="research", duration_s=DAY),
        Xid(SHOWCASE_AT - 300, "a100-000", 0, 79),
        Xid(SHOWCASE_AT - 600, "a100-001", 0, 94),
    )
    return Scenario(
        "rule-showcase",
        spec,
        Policy(default_placement="spread"),
        tuple(jobs),
        faults,
        seed=seed,
        snapshot_at=SHOWCASE_AT,
        notes={
            "fragmentation": "pool:a100 (wide-8 blocked by one squatter per node)",
            "starvation": "job:wide-8 (cause: size)",
            "gang-deadlock": "jobs:gang-a+gang-b",
            "gang-partial-hold": "job:hold-partial",
            "idle-allocation": "job:lab-wait",
            "idle-held": "job:idle-nb",
            "hung-collective": "job:allreduce-hung",
            "idle-quota": "queue:lab",
            "thermal-throttling": "gpu:lab-003/0",
            "power-throttling": "gpu:lab-004/0",
            "ecc-row-remap": "gpu:a100-001/0",
            "data-starvation": "job:starved-input",
            "low-mfu": "job:low-mfu",
            "topology-misplacement": "job:tp-split",
            "xid": "gpu:a100-000/0",
        },
    )


# Rules no scenario can show, and why (tests skip them with this reason).
NOT_SIMULATED: dict[str, str] = {
    "preemption-thrash": "the simulator preempts no job (it evicts only when a node drains)",
}
# Rules the seed (demo) scenario leaves to the showcase: faults it does not inject, so that the
# demo's schedule stays the one its figures describe.
SEED_LEAVES_OUT: dict[str, str] = {
    **NOT_SIMULATED,
    "thermal-throttling": "no hot GPUs in the demo (rule-showcase: hot-train)",
    "power-throttling": "no power-capped GPUs in the demo (rule-showcase: capped-train)",
    "ecc-row-remap": "no memory Xid in the demo (rule-showcase: Xid 94 on a100-001)",
    "idle-quota": "no queue with a guarantee idles in the demo (rule-showcase: queue lab)",
}


# ----------------------------------------------------------------------------------------------
# Small


def small_scenario(seed: int = 0) -> Scenario:
    """4 nodes x 8 GPUs, two queues, ~40 jobs over 6 hours; for fast tests."""
    rng = np.random.default_rng(seed)
    spec = ClusterSpec(
        pools=(PoolSpec.uniform("a100", 4, **A100_SXM4_TOPOLOGY),),
        queues=(
            QueueSpec("team-a", weight=2, deserved_gpus=20),
            QueueSpec("team-b", weight=1, deserved_gpus=12),
        ),
        name="small",
    )
    jobs = [
        JobSpec("train-16", 0, 4 * HOUR, pods=2, gpus_per_pod=8, tp=8, tenant="team-a"),
    ]
    # one stream per queue, drawn in this order: (prefix, mean gap, sizes, weights, median)
    for prefix, mean_gap_s, sizes, size_weights, median_s in (
        ("a", 900, (1, 2, 4), (2, 2, 1), 1800),
        ("b", 1200, (1, 4, 8), (1, 2, 1), 2400),
    ):
        jobs += _small_job_stream(
            rng,
            prefix=prefix,
            start=0,
            end=6 * HOUR,
            mean_gap_s=mean_gap_s,
            sizes=sizes,
            size_weights=size_weights,
            median_s=median_s,
            sigma=0.6,
            tenant=f"team-{prefix}",
        )
    return Scenario("small", spec, Policy(), tuple(jobs), seed=seed, snapshot_at=3 * HOUR)


# ----------------------------------------------------------------------------------------------
# The demo (seed) scenario


SEED_QUEUES = (
    QueueSpec("pretrain", tenant="pretrain", weight=4, deserved_gpus=512),
    QueueSpec("hpo", tenant="hpo", weight=2, deserved_gpus=256),
    QueueSpec("serving", tenant="serving", weight=1, deserved_gpus=64),
    QueueSpec("research", tenant="research", weight=1, deserved_gpus=192),
)


SEED_REPAIR_S = 1800.0  # from the drain of gpu-100 to its GPU 3 healthy again


def seed_scenario(seed: int = 0, *, hours: float = 7 * 24) -> Scenario:
    """The demo cluster (docs/architecture.md#command-line): 128 nodes x 8 A100-SXM4-80GB in pool
    ``a100`` under ``spread``, with the faults listed in ``notes`` (rule -> when and where it
    fires).

    Workload: job ``pretrain-a`` (64 pods x 8 GPUs, gang, TP 8, 7 days); ``hpo-000``..``hpo-099``
    (8 GPUs, about an hour each, submitted over the first half hour); ``serve-c`` (2 x 8 GPUs,
    inference); a steady stream of 1-4 GPU research jobs (one every 2 minutes on average, 10 min
    to 3 h) and a few 8-16 GPU research jobs, for ``hours`` hours.
    """
    rng = np.random.default_rng(seed)
    spec = ClusterSpec(
        pools=(PoolSpec.uniform("a100", 128, node_prefix="gpu", **A100_SXM4_TOPOLOGY),),
        queues=SEED_QUEUES,
        name="demo",
    )
    end = hours * HOUR
    jobs: list[JobSpec] = [
        JobSpec(
            "pretrain-a",
            0,
            7 * DAY,
            pods=64,
            gpus_per_pod=8,
            tp=8,
            tenant="pretrain",
            priority=100,
            name="llm-pretrain",
        ),
        JobSpec(
            "serve-c",
            0,
            30 * DAY,
            pods=2,
            gpus_per_pod=8,
            tenant="serving",
            kind="inference",
            priority=50,
            gang=False,
            name="chat-inference",
        ),
        # Fault jobs, early, while the nodes are still empty.
        JobSpec(
            "research-idle",
            30,
            12 * HOUR,
            gpus_per_pod=4,
            tenant="research",
            kind="notebook",
            profile=IDLE,
            name="forgotten-notebook",
        ),
        JobSpec(
            "research-lowmfu",
            40,
            2 * DAY,
            gpus_per_pod=8,
            tenant="research",
            profile=LOW_MFU,
            name="moe-small-batch",
        ),
        JobSpec(
            "research-loader",
            50,
            10 * HOUR,
            gpus_per_pod=8,
            tenant="research",
            name="vision-pretrain",
        ),
        JobSpec(
            "research-tp",
            60,
            2 * DAY,
            pods=2,
            gpus_per_pod=4,
            tp=8,
            tenant="research",
            name="tp8-finetune",
        ),
    ]
    for i in range(100):
        jobs.append(
            JobSpec(
                f"hpo-{i:03d}",
                round(120 + 18.0 * i, 3),
                round(float(rng.lognormal(np.log(HOUR), 0.25)), 3),
                gpus_per_pod=8,
                tenant="hpo",
                kind="tuning",
                priority=10,
                name=f"sweep-lr-{i:03d}",
            )
        )
    jobs.append(
        JobSpec(
            "research-big",
            20 * 60,
            8 * HOUR,
            pods=4,
            gpus_per_pod=8,
            tenant="research",
            name="ablation-32gpu",
        )
    )
    jobs += _small_job_stream(
        rng,
        prefix="research",
        start=0,
        end=end,
        mean_gap_s=120,
        sizes=(1, 2, 4),
        size_weights=(5, 3, 2),
        median_s=45 * 60,
        sigma=0.8,
        tenant="research",
        max_s=6 * HOUR,
    )
    jobs += _small_job_stream(
        rng,
        prefix="research-node",
        start=3 * HOUR,
        end=end,
        mean_gap_s=1800,
        sizes=(8,),
        size_weights=(1,),
        median_s=2 * HOUR,
        sigma=0.5,
        tenant="research",
        max_s=8 * HOUR,
    )
    faults: tuple[Fault, ...] = (
        ProfileSwitch(10 * 60, "research-loader", DATA_STARVED),
        ProfileSwitch(HOUR, "research-tp", HUNG),
        ProfileSwitch(3.5 * HOUR, "research-lowmfu", WAITING),
        DeadlockingGangs(
            50 * 60,
            "a100",
            pods=40,
            tenant="research",
            ids=("sweep-gang-a", "sweep-gang-b"),
            duration_s=12 * HOUR,
        ),
        Xid(2 * HOUR, "gpu-100", 3, 79),
        # recovery: once someone drains gpu-100 its GPU 3 is reseated, healthy 30 min later
        RepairAfterDrain(2 * HOUR, "gpu-100", 3, after_s=SEED_REPAIR_S),
        Xid(2 * HOUR + 600, "gpu-090", 1, 13),
    )
    return Scenario(
        "seed",
        spec,
        Policy(queue_order="priority", default_placement="spread"),
        tuple(sorted(jobs, key=lambda j: (j.arrival_s, j.id))),
        faults,
        seed=seed,
        snapshot_at=5 * HOUR,
        notes={
            "idle-held": "research-idle, a notebook (4 GPUs, util ~0.01, memory held) from 0:30",
            "idle-allocation": "research-lowmfu stalls at 3:30 with its memory freed, from 3:45",
            "hung-collective": "research-tp (8 GPUs on 2 nodes) hangs in a collective at 1:00",
            "low-mfu": "research-lowmfu (tensor ~0.1) from 0:15 to 3:30",
            "data-starvation": "research-loader turns data-starved at 0:10, fires from 0:25",
            "topology-misplacement": "research-tp (TP 8 over two 4-GPU pods) spread on 2 nodes",
            "fragmentation": "hpo and 8-GPU research jobs blocked by small jobs under spread",
            "gang-deadlock": "sweep-gang-a + sweep-gang-b (40 x 8 GPUs each, bound pod by pod)",
            "gang-partial-hold": "sweep-gang-a/-b while growing (1:45-2:30), before the deadlock",
            "starvation": "research-big (4 x 8 GPUs) overtaken by small jobs from 0:20",
            "xid": "Xid 79 on gpu-100 GPU 3 at 2:00, Xid 13 on gpu-090 GPU 1 at 2:10",
            "recovery": "gpu-100 GPU 3 is repaired 30 min after gpu-100 is drained",
        },
    )


# ----------------------------------------------------------------------------------------------
# Benchmark week


WEEK_SIZES = (1, 2, 4, 8, 16, 32, 64)
WEEK_SIZE_WEIGHTS = (0.40, 0.15, 0.15, 0.20, 0.05, 0.03, 0.02)


def week_scenario(
    gpus: int = 1024, jobs: int = 10000, seed: int = 0, *, load: float = 0.8
) -> Scenario:
    """A week of ``gpus`` GPUs (8 per node, one pool) and ``jobs`` jobs arriving uniformly over
    the week, sized for ``load`` offered load (GPU-hours asked / GPU-hours of the week): 1-64 GPU
    requests (multi-node ones as gangs of 8-GPU pods), lognormal durations, four tenants,
    fair-share order, binpack."""
    rng = np.random.default_rng(seed)
    nodes = max(gpus // 8, 1)
    spec = ClusterSpec(
        pools=(PoolSpec.uniform("a100", nodes, **A100_SXM4_TOPOLOGY),),
        queues=tuple(
            replace(q, deserved_gpus=q.deserved_gpus * nodes * 8 / 1024) for q in SEED_QUEUES
        ),
        name="week",
    )
    week = 7 * DAY
    sizes = rng.choice(WEEK_SIZES, size=jobs, p=np.asarray(WEEK_SIZE_WEIGHTS))
    mean_gpus = float(np.dot(WEEK_SIZES, WEEK_SIZE_WEIGHTS))
    target_busy = load * nodes * 8
    # Offered load = arrival rate x mean GPUs x mean duration.
    mean_duration = target_busy / (jobs / week) / mean_gpus
    sigma = 1.0
    median = mean_duration / np.exp(sigma**2 / 2)
    durations = np.clip(rng.lognormal(np.log(median), sigma, size=jobs), 120.0, 2 * DAY)
    arrivals = np.sort(rng.uniform(0.0, week, size=jobs))
    tenants = rng.choice(
        ["pretrain", "hpo", "serving", "research"], size=jobs, p=[0.1, 0.3, 0.1, 0.5]
    )
    specs = []
    for i in range(jobs):
        size = int(sizes[i])
        pods, per_pod = (size // 8, 8) if size > 8 else (1, size)
        specs.append(
            JobSpec(
                f"job-{i:05d}",
                round(float(arrivals[i]), 3),
                round(float(durations[i]), 3),
                pods=pods,
                gpus_per_pod=per_pod,
                tenant=str(tenants[i]),
                kind="inference" if tenants[i] == "serving" else "training",
            )
        )
    return Scenario(
        "week",
        spec,
        Policy(queue_order="fair-share", default_placement="binpack"),
        tuple(specs),
        seed=seed,
    )
