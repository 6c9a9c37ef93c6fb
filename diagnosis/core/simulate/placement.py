"""Where a pod goes: the node (by the pool's placement policy) and the GPUs inside it.

Node choice is vectorised over the free-GPU counts of a pool's nodes. GPU choice inside a node
depends only on the node's topology, which GPUs are free and the pod size, so it is computed once
per such combination and cached.
"""

from __future__ import annotations

from functools import lru_cache
from itertools import combinations
from math import comb

import numpy as np

NO_NODE = -1
# Above this many candidate GPU sets a node's GPUs are chosen greedily instead of by search.
MAX_GPU_SETS_SEARCHED = 4096


def choose_node(
    placement: str,
    free: np.ndarray,
    capacity: np.ndarray,
    gpus: int,
    rng: np.random.Generator,
    exclude: np.ndarray | None = None,
) -> int:
    """Index (into ``free``) of the node a pod of ``gpus`` GPUs goes to, or ``NO_NODE``.

    ``free`` holds the schedulable free GPUs of each node of the pool, ``capacity`` its GPUs.
    Ties go to the first node in pool order (``random`` draws uniformly among the fitting).
    """
    if not len(free):
        return NO_NODE
    if placement == "spread" and exclude is None and capacity.min() == capacity.max():
        # Nodes of one size: the largest free share is the most free GPUs (first such node),
        # and it fits unless none does -- one pass over the ints, no shares computed.
        best = int(free.argmax())
        return best if free[best] >= gpus else NO_NODE
    fits = free >= gpus
    if exclude is not None:
        fits &= ~exclude
    if placement == "spread":
        share = np.where(fits, free / np.maximum(capacity, 1), -1.0)
        best = int(np.argmax(share))
        return best if share[best] >= 0 else NO_NODE
    if placement == "binpack":
        left = np.where(fits, free, np.iinfo(np.int64).max)
        best = int(np.argmin(left))
        return best if fits[best] else NO_NODE
    if placement == "packing":
        partly_used = np.flatnonzero(fits & (free < capacity))
        if len(partly_used):
            return int(partly_used[0])
        fitting = np.flatnonzero(fits)
        return int(fitting[0]) if len(fitting) else NO_NODE
    if placement == "random":
        fitting = np.flatnonzero(fits)
        return int(fitting[rng.integers(len(fitting))]) if len(fitting) else NO_NODE
    raise ValueError(f"unknown placement {placement!r}")


def pod_slots(free: np.ndarray, gpus: int) -> int:
    """How many pods of ``gpus`` GPUs fit on nodes with ``free`` (>= 0) GPUs each: from how
    many nodes have each count free (one pass, no integer division per node)."""
    if not len(free):
        return 0
    counts = np.bincount(free).tolist()
    return sum(nodes * (f // gpus) for f, nodes in enumerate(counts) if nodes)


@lru_cache(maxsize=65536)
def choose_gpus(
    domain_of_gpu: tuple[int, ...],
    numa_of_gpu: tuple[int, ...],
    free_mask: int,
    count: int,
    scatter: bool = False,
) -> tuple[int, ...]:
    """The ``count`` GPUs of a node a pod gets, among those set in ``free_mask`` (bit i = GPU i).

    Topology-aware (the default): the set spanning the fewest NVLink domains, then the fewest
    NUMA nodes, then leaving the largest free domain and NUMA node whole (best fit), then the
    lowest indexes. ``scatter`` models a topology-unaware scheduler gone wrong: the set spanning
    the most domains and NUMA nodes.
    """
    free = [g for g in range(len(domain_of_gpu)) if free_mask >> g & 1]
    if count > len(free):
        raise ValueError(f"{count} GPUs asked, {len(free)} free")
    if comb(len(free), count) > MAX_GPU_SETS_SEARCHED:
        return _greedy_gpus(domain_of_gpu, numa_of_gpu, free, count, scatter)
    best_key: tuple | None = None
    best: tuple[int, ...] = ()
    for chosen in combinations(free, count):
        domains = len({domain_of_gpu[g] for g in chosen})
        numas = len({numa_of_gpu[g] for g in chosen})
        if scatter:
            key: tuple = (-domains, -numas, chosen)
        else:
            left = [g for g in free if g not in chosen]
            key = (
                domains,
                numas,
                -_largest_group(domain_of_gpu, left),
                -_largest_group(numa_of_gpu, left),
                chosen,
            )
        if best_key is None or key < best_key:
            best_key, best = key, chosen
    return best


def _largest_group(group_of_gpu: tuple[int, ...], gpus: list[int]) -> int:
    counts: dict[int, int] = {}
    for g in gpus:
        counts[group_of_gpu[g]] = counts.get(group_of_gpu[g], 0) + 1
    return max(counts.values(), default=0)


def _greedy_gpus(
    domain_of_gpu: tuple[int, ...],
    numa_of_gpu: tuple[int, ...],
    free: list[int],
    count: int,
    scatter: bool,
) -> tuple[int, ...]:
    """For big nodes: fill from the fullest (domain, NUMA) groups first, or round-robin over
    them when scattering."""
    groups: dict[tuple[int, int], list[int]] = {}
    for g in free:
        groups.setdefault((domain_of_gpu[g], numa_of_gpu[g]), []).append(g)
    ordered = sorted(groups.values(), key=lambda group: (-len(group), group[0]))
    if scatter:
        picked: list[int] = []
        while len(picked) < count:
            for group in ordered:
                if group and len(picked) < count:
                    picked.append(group.pop(0))
        return tuple(sorted(picked))
    flat = [g for group in ordered for g in group]
    return tuple(sorted(flat[:count]))
