"""Replay of the Alibaba OpenB trace as in the FGD paper's experiment (ATC'23).

The workload is shuffled and then inflated (or thinned) until the GPUs it asks for reach
``arrive`` times the cluster's GPU capacity. Pods arrive one by one and never leave; each goes to
the node its placement policy scores best among the nodes that can hold it (CPU, memory, GPU model,
whole or shared GPUs), or fails. See docs/simulator.md for the procedure and its sources.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass

import numpy as np

from diagnosis.core.simulate.openb.frag import FragMeasure, PodShape, typical_pod_shapes
from diagnosis.core.simulate.openb.trace import MILLI_PER_GPU, NodeTable, PodTable

POLICIES = ("random", "bestfit", "packing", "spread", "fgd")
DEFAULT_ARRIVE = 1.3

# The paper's figures on openb_pod_list_default at arrive 1.3: medians of seeds 42..51 from
# hkust-adsl/kubernetes-scheduler-simulator, experiments/analysis/expected_results.
# Policy -> (GPU allocated %, fragmented GPU % of all GPUs).
PUBLISHED_DEFAULT_TRACE = {
    "random": (87.38, 12.50),
    "packing": (92.06, 7.89),
    "bestfit": (93.11, 6.82),
    "fgd": (95.40, 4.56),
}

# BestFit normalises free resources by the largest node the scheduler knows (128 CPUs, 8 GPUs).
LARGEST_NODE_CPU_MILLI = 128_000
LARGEST_NODE_GPU_MILLI = 8 * MILLI_PER_GPU
MAX_NODE_SCORE = 100


@dataclass(frozen=True)
class Pod:
    cpu_milli: int
    memory_mib: int
    num_gpu: int
    gpu_milli: int
    spec_id: int

    @property
    def is_shared(self) -> bool:
        return self.num_gpu == 1 and self.gpu_milli < MILLI_PER_GPU

    @property
    def total_gpu_milli(self) -> int:
        return self.num_gpu * self.gpu_milli


@dataclass(frozen=True)
class ReplayResult:
    policy: str
    seed: int
    arrive: float
    nodes: int
    gpus: int
    pods_in_trace: int
    pods_arrived: int
    pods_placed: int
    pods_failed: int
    arrived_gpu_pct: float
    gpu_alloc_pct: float
    frag_gpu_pct: float
    frag_of_idle_gpu_pct: float
    cpu_alloc_pct: float
    gpu_alloc_pct_at_arrive: float
    frag_gpu_pct_at_arrive: float
    typical_shapes: int

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def arrival_order(
    pods: PodTable,
    gpu_capacity_milli: int,
    arrive: float,
    rng: np.random.Generator,
    *,
    shuffle: bool = True,
) -> np.ndarray:
    """Indices into ``pods`` in arrival order, a pod index appearing again for each copy.

    The trace is taken in name order and shuffled (or, without ``shuffle``, by creation time).
    Copies of pods drawn uniformly from the trace are then appended while the GPUs asked for stay
    within ``arrive`` x capacity; the first draw that would pass it ends the inflation. A trace that
    already asks for more loses uniformly drawn pods until it fits; one that asks for no GPU at all
    is left as it is.
    """
    by_name = np.array(sorted(range(len(pods)), key=pods.names.__getitem__), dtype=np.int64)
    if shuffle:
        order = rng.permutation(by_name)
    elif pods.creation_time is not None:
        order = np.arange(len(pods))[np.lexsort((np.arange(len(pods)), pods.creation_time))]
    else:
        order = np.arange(len(pods))
    asked = pods.total_gpu_milli
    requested = int(asked.sum())
    target = arrive * gpu_capacity_milli
    if requested == 0:
        return order
    if requested > target:
        kept = list(order)
        while requested > target and kept:
            requested -= int(asked[kept.pop(int(rng.integers(len(kept))))])
        return np.array(kept, dtype=np.int64)
    copies: list[int] = []
    while True:
        drawn = int(by_name[rng.integers(len(pods))])
        if requested + asked[drawn] > target:
            break
        requested += int(asked[drawn])
        copies.append(drawn)
    return np.concatenate([order, np.array(copies, dtype=np.int64)])


class Cluster:
    """Free resources per node; GPUs are rows of free milli-GPU (absent GPUs hold 0)."""

    def __init__(self, nodes: NodeTable, frag: FragMeasure) -> None:
        width = max(int(nodes.gpu_count.max()), 1)
        self.gpu_count = nodes.gpu_count
        self.cpu_free = nodes.cpu_milli.copy()
        self.memory_free = nodes.memory_mib.copy()
        self.gpu_free = np.where(
            np.arange(width) < nodes.gpu_count[:, None], MILLI_PER_GPU, 0
        ).astype(np.int64)
        self.gpu_free_total = self.gpu_free.sum(axis=1)
        self.frag = frag
        self.fitting, self.small = frag.gpu_stats(self.gpu_free)
        self.node_frag = frag.node_frag(
            self.cpu_free, self.gpu_free_total, self.fitting, self.small, frag.node_access
        )

    def feasible_nodes(self, pod: Pod, model_allowed: np.ndarray) -> np.ndarray:
        ok = (self.cpu_free >= pod.cpu_milli) & (self.memory_free >= pod.memory_mib)
        if pod.num_gpu:
            ok &= model_allowed
            ok &= (self.gpu_free >= pod.gpu_milli).sum(axis=1) >= pod.num_gpu
        return np.flatnonzero(ok)

    def place(self, node: int, pod: Pod, gpus: np.ndarray) -> None:
        self.cpu_free[node] -= pod.cpu_milli
        self.memory_free[node] -= pod.memory_mib
        if pod.num_gpu:
            self.gpu_free[node, gpus] -= pod.gpu_milli
            self.gpu_free_total[node] -= pod.total_gpu_milli
            self.fitting[node], self.small[node] = self.frag.gpu_stats(self.gpu_free[node])
        self.node_frag[node] = self.frag.node_frag(
            self.cpu_free[node],
            self.gpu_free_total[node],
            self.fitting[node],
            self.small[node],
            self.frag.node_access[node],
        )


# --- GPU choice within the chosen node --------------------------------------------------------


def whole_gpus(free: np.ndarray, pod: Pod) -> np.ndarray:
    """The first ``num_gpu`` entirely free GPUs, in device order."""
    return np.flatnonzero(free == MILLI_PER_GPU)[: pod.num_gpu]


def tightest_gpu(free: np.ndarray, pod: Pod) -> np.ndarray:
    """For a shared pod, the GPU with the least free milli that still fits it."""
    fitting = np.where(free >= pod.gpu_milli, free, np.iinfo(np.int64).max)
    return np.array([int(np.argmin(fitting))])


def loosest_gpu(free: np.ndarray, pod: Pod) -> np.ndarray:
    """For a shared pod, the GPU with the most free milli."""
    return np.array([int(np.argmax(free))])


# --- Node scoring: one integer score per feasible node, higher is better ----------------------

Scorer = Callable[[Cluster, np.ndarray, Pod], np.ndarray]


def bestfit_scores(cluster: Cluster, nodes: np.ndarray, pod: Pod) -> np.ndarray:
    """(1 - 0.5 cpu_left/128 CPUs - 0.5 gpu_left/8 GPUs) x 100, truncated; left = after placing."""
    leftover = _weighted_leftover(cluster, nodes, pod)
    return np.trunc((1.0 - leftover) * MAX_NODE_SCORE).astype(np.int64)


def spread_scores(cluster: Cluster, nodes: np.ndarray, pod: Pod) -> np.ndarray:
    """The mirror of best fit: the node left emptiest wins."""
    return np.trunc(_weighted_leftover(cluster, nodes, pod) * MAX_NODE_SCORE).astype(np.int64)


def _weighted_leftover(cluster: Cluster, nodes: np.ndarray, pod: Pod) -> np.ndarray:
    cpu_left = (cluster.cpu_free[nodes] - pod.cpu_milli) / LARGEST_NODE_CPU_MILLI * 0.5
    gpu_left = (cluster.gpu_free_total[nodes] - pod.total_gpu_milli) / LARGEST_NODE_GPU_MILLI * 0.5
    return cpu_left + gpu_left


def packing_scores(cluster: Cluster, nodes: np.ndarray, pod: Pod) -> np.ndarray:
    """GpuPacking: prefer GPUs already in use, then partly used nodes, then idle nodes.

    Bands: a node whose GPUs are all free scores max(33 - free GPUs, free GPUs); a node that would
    have to open k free GPUs scores max(50 - k, 33); a pod fitting on partly used GPUs scores
    max(100 - (sum of their free tenths) // 10, 50). CPU-only pods score 0 everywhere.
    """
    if pod.num_gpu == 0:
        return np.zeros(len(nodes), dtype=np.int64)
    free = cluster.gpu_free[nodes]
    fully_free = (free == MILLI_PER_GPU).sum(axis=1)
    idle_node = fully_free == cluster.gpu_count[nodes]
    candidates = np.sort(np.where(free >= pod.gpu_milli, free, np.iinfo(np.int64).max), axis=1)
    chosen = candidates[:, : pod.num_gpu]
    opened = (chosen == MILLI_PER_GPU).sum(axis=1)
    tenths = (chosen * 100 // MILLI_PER_GPU).sum(axis=1)
    return np.where(
        idle_node,
        np.maximum(MAX_NODE_SCORE // 3 - fully_free, fully_free),
        np.where(
            opened > 0,
            np.maximum(MAX_NODE_SCORE // 2 - opened, MAX_NODE_SCORE // 3),
            np.maximum(MAX_NODE_SCORE - tenths // 10, MAX_NODE_SCORE // 2),
        ),
    )


def fgd_choice(cluster: Cluster, nodes: np.ndarray, pod: Pod) -> tuple[np.ndarray, np.ndarray]:
    """FGD: score = sigmoid(fragmentation decrease / 1000) x 100, truncated.

    Returns the score of each node and, for a shared pod, the GPU (first in device order among
    the best) that earns it; whole-GPU and CPU-only pods return -1 as GPU.
    """
    frag = cluster.frag
    before = cluster.node_frag[nodes]
    if not pod.is_shared:
        fitting = cluster.fitting[nodes] - pod.num_gpu * (pod.gpu_milli == MILLI_PER_GPU)
        after = frag.node_frag(
            cluster.cpu_free[nodes] - pod.cpu_milli,
            cluster.gpu_free_total[nodes] - pod.total_gpu_milli,
            fitting,
            cluster.small[nodes],
            frag.node_access[nodes],
        )
        return _fgd_score(before - after), np.full(len(nodes), -1)
    # Equal free milli on two GPUs of a node gives equal scores: evaluate each value once.
    free = cluster.gpu_free[nodes]
    first_equal = np.argmax(free[:, :, None] == free[:, None, :], axis=2)
    fits = free >= pod.gpu_milli
    pair, pair_gpu = np.nonzero(fits & (first_equal == np.arange(free.shape[1])))
    pair_node = nodes[pair]
    was = free[pair, pair_gpu][:, None]
    now = was - pod.gpu_milli
    thresholds = frag.thresholds
    fitting = cluster.fitting[pair_node] - (was >= thresholds) + (now >= thresholds)
    small = (
        cluster.small[pair_node]
        - np.where(was < thresholds, was, 0)
        + np.where(now < thresholds, now, 0)
    )
    after = frag.node_frag(
        cluster.cpu_free[pair_node] - pod.cpu_milli,
        cluster.gpu_free_total[pair_node] - pod.gpu_milli,
        fitting,
        small,
        frag.node_access[pair_node],
    )
    value_scores = np.full(free.shape, -1, dtype=np.int64)
    value_scores[pair, pair_gpu] = _fgd_score(before[pair] - after)
    scores = np.where(fits, np.take_along_axis(value_scores, first_equal, axis=1), -1)
    best_gpu = np.argmax(scores, axis=1)
    return scores[np.arange(len(nodes)), best_gpu], best_gpu


def _fgd_score(decrease: np.ndarray) -> np.ndarray:
    return np.trunc(MAX_NODE_SCORE / (1.0 + np.exp(-decrease / 1000.0))).astype(np.int64)


# --- The replay -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Placement:
    """The outcome of each arrival step, and the cluster as the last step left it."""

    node: np.ndarray
    """Node given to the pod at each step; -1 where the pod fitted nowhere."""
    gpus: tuple[tuple[int, ...], ...]
    """GPU indices (within the node) given at each step."""
    allocated_gpu_milli: np.ndarray
    """GPU milli allocated in the cluster after each step."""
    frag_gpu_milli: np.ndarray
    """The cluster's fragmentation (milli-GPU) after each step."""
    cluster: Cluster


def place_pods(
    nodes: NodeTable,
    pods: PodTable,
    order: np.ndarray,
    policy: str,
    rng: np.random.Generator,
    *,
    shapes: tuple[PodShape, ...] | None = None,
) -> Placement:
    """Place ``pods[order]`` one after the other under ``policy``; pods never leave.

    Fragmentation is measured against ``shapes`` (default: the typical shapes of ``pods``).
    """
    if policy not in POLICIES:
        raise ValueError(f"unknown policy {policy!r}; choose one of {', '.join(POLICIES)}")
    if shapes is None:
        shapes = typical_pod_shapes(pods)
    cluster = Cluster(nodes, FragMeasure.build(shapes, nodes.gpu_model))
    # Equal scores go to the node first in a random order fixed for the run.
    tie_rank = rng.permutation(len(nodes))
    specs = sorted(set(pods.gpu_spec))
    spec_index = {spec: i for i, spec in enumerate(specs)}
    model_allowed = np.array(
        [[bool(m) and (not spec or m in spec) for m in nodes.gpu_model] for spec in specs],
        dtype=bool,
    )
    pod_spec = np.array([spec_index[s] for s in pods.gpu_spec], dtype=np.int64)

    chosen_node = np.full(len(order), -1, dtype=np.int64)
    chosen_gpus: list[tuple[int, ...]] = []
    allocated_milli = np.zeros(len(order), dtype=np.int64)
    frag_milli = np.zeros(len(order))
    allocated = 0
    for step, index in enumerate(order):
        pod = Pod(
            int(pods.cpu_milli[index]),
            int(pods.memory_mib[index]),
            int(pods.num_gpu[index]),
            int(pods.gpu_milli[index]),
            int(pod_spec[index]),
        )
        candidates = cluster.feasible_nodes(pod, model_allowed[pod.spec_id])
        gpus: tuple[int, ...] = ()
        if len(candidates):
            node, gpu_array = _choose(policy, cluster, candidates, pod, tie_rank, rng)
            cluster.place(node, pod, gpu_array)
            chosen_node[step] = node
            gpus = tuple(int(g) for g in gpu_array)
            allocated += pod.total_gpu_milli
        chosen_gpus.append(gpus)
        allocated_milli[step] = allocated
        frag_milli[step] = cluster.node_frag.sum()
    return Placement(chosen_node, tuple(chosen_gpus), allocated_milli, frag_milli, cluster)


def replay_openb(
    nodes: NodeTable,
    pods: PodTable,
    policy: str,
    *,
    arrive: float = DEFAULT_ARRIVE,
    seed: int = 42,
    shuffle: bool = True,
) -> ReplayResult:
    """Replay ``pods`` on ``nodes`` under ``policy`` as the FGD paper does; deterministic for a
    seed. Figures are taken after the last arrival, and (``*_at_arrive``) as the paper reports
    them: averaged over the steps at which the GPUs requested so far round to ``arrive`` x 100 %
    of capacity."""
    if policy not in POLICIES:
        raise ValueError(f"unknown policy {policy!r}; choose one of {', '.join(POLICIES)}")
    if not arrive > 0:
        raise ValueError("arrive must be positive")
    rng = np.random.default_rng(seed)
    capacity = nodes.gpu_capacity_milli
    order = arrival_order(pods, capacity, arrive, rng, shuffle=shuffle)
    shapes = typical_pod_shapes(pods)
    placement = place_pods(nodes, pods, order, policy, rng, shapes=shapes)

    per_capacity_pct = 100.0 / capacity if capacity else 0.0
    arrived_pct = np.cumsum(pods.total_gpu_milli[order]) * per_capacity_pct
    alloc_pct = placement.allocated_gpu_milli * per_capacity_pct
    frag_pct = placement.frag_gpu_milli * per_capacity_pct
    window = _arrive_window(arrived_pct, round(arrive * 100))
    cluster = placement.cluster
    placed = int((placement.node >= 0).sum())
    idle_milli = int(cluster.gpu_free_total.sum())
    return ReplayResult(
        policy=policy,
        seed=seed,
        arrive=arrive,
        nodes=len(nodes),
        gpus=capacity // MILLI_PER_GPU,
        pods_in_trace=len(pods),
        pods_arrived=len(order),
        pods_placed=placed,
        pods_failed=len(order) - placed,
        arrived_gpu_pct=_pct(_last(arrived_pct)),
        gpu_alloc_pct=_pct(_last(alloc_pct)),
        frag_gpu_pct=_pct(_last(frag_pct)),
        frag_of_idle_gpu_pct=_pct(
            100.0 * _last(placement.frag_gpu_milli) / idle_milli if idle_milli else 0.0
        ),
        cpu_alloc_pct=_pct(100.0 * (1 - cluster.cpu_free.sum() / max(nodes.cpu_milli.sum(), 1))),
        gpu_alloc_pct_at_arrive=_pct(alloc_pct[window].mean() if len(window) else 0.0),
        frag_gpu_pct_at_arrive=_pct(frag_pct[window].mean() if len(window) else 0.0),
        typical_shapes=len(shapes),
    )


def _choose(
    policy: str,
    cluster: Cluster,
    candidates: np.ndarray,
    pod: Pod,
    tie_rank: np.ndarray,
    rng: np.random.Generator,
) -> tuple[int, np.ndarray]:
    if policy == "random":
        node = int(candidates[rng.integers(len(candidates))])
        free = cluster.gpu_free[node]
        if pod.is_shared:
            return node, np.array([rng.choice(np.flatnonzero(free >= pod.gpu_milli))])
        return node, whole_gpus(free, pod)
    if policy == "fgd":
        scores, best_gpu = fgd_choice(cluster, candidates, pod)
        pick = _best(scores, candidates, tie_rank)
        node = int(candidates[pick])
        if pod.is_shared:
            return node, np.array([best_gpu[pick]])
        return node, whole_gpus(cluster.gpu_free[node], pod)
    scorer, shared_gpu = _SCORED_POLICIES[policy]
    node = int(candidates[_best(scorer(cluster, candidates, pod), candidates, tie_rank)])
    free = cluster.gpu_free[node]
    return node, shared_gpu(free, pod) if pod.is_shared else whole_gpus(free, pod)


_SCORED_POLICIES: dict[str, tuple[Scorer, Callable[[np.ndarray, Pod], np.ndarray]]] = {
    "bestfit": (bestfit_scores, tightest_gpu),
    "packing": (packing_scores, tightest_gpu),
    "spread": (spread_scores, loosest_gpu),
}


def _best(scores: np.ndarray, candidates: np.ndarray, tie_rank: np.ndarray) -> int:
    """Position of the highest score; ties go to the lowest tie rank."""
    tied = np.flatnonzero(scores == scores.max())
    return int(tied[np.argmin(tie_rank[candidates[tied]])])


def _arrive_window(arrived_pct: np.ndarray, level: int) -> np.ndarray:
    """Steps whose arrived GPU share rounds to ``level`` percent (the paper's reporting point),
    widened to +-1 point when none does, and to the last step when still empty."""
    rounded = np.round(arrived_pct)
    window = np.flatnonzero(rounded == level)
    if not len(window):
        window = np.flatnonzero(np.abs(rounded - level) <= 1)
    if not len(window):
        window = np.arange(len(arrived_pct))[-1:]
    return window


def _last(values: np.ndarray) -> float:
    return float(values[-1]) if len(values) else 0.0


def _pct(value: float) -> float:
    return round(float(value), 2)
