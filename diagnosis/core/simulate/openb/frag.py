"""The FGD fragmentation measure (Weng et al., ATC'23, "Beware of Fragmentation").

The workload's typical pod shapes m (CPU, per-GPU milli, GPU count, allowed models) carry a
popularity p_m. For a node n and shape m: when the node can host the pod (enough free CPU, a
model the pod accepts, and enough GPUs whose free milli-GPU is at least the pod's per-GPU milli),
only the node's free GPU slices too small for the pod are fragment; otherwise all of its free GPU
is. CPU-only shapes never use GPUs, so for them all free GPU counts. F_n = sum_m p_m F_n(m); the
cluster's fragmentation is the sum over nodes.

Shapes that differ only in CPU are evaluated together: for a group g of shapes sharing
(milli, GPU count, models),
    F_n = free_n - sum_g P_g(cpu_free_n) * hosts_g(n) * (free_n - small_g(n)),
where P_g(c) is the popularity of the group's shapes asking for at most c CPU, hosts_g(n) says
whether the node has the model and enough fitting GPUs, and small_g(n) is the free milli on GPUs
too small for the group.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from diagnosis.core.simulate.openb.trace import PodTable

TYPICAL_SHAPE_COVERAGE = 0.95


@dataclass(frozen=True)
class PodShape:
    cpu_milli: int
    gpu_milli: int
    num_gpu: int
    gpu_spec: tuple[str, ...]
    popularity: float


def typical_pod_shapes(
    pods: PodTable, coverage: float = TYPICAL_SHAPE_COVERAGE
) -> tuple[PodShape, ...]:
    """The most popular pod shapes that together cover ``coverage`` of the pods, renormalised.

    Ties in count are ordered by the larger shape first, so the cut is deterministic.
    """
    counts: dict[tuple[int, int, int, tuple[str, ...]], int] = {}
    for i in range(len(pods)):
        key = (
            int(pods.cpu_milli[i]),
            int(pods.gpu_milli[i]),
            int(pods.num_gpu[i]),
            pods.gpu_spec[i],
        )
        counts[key] = counts.get(key, 0) + 1
    ranked = sorted(counts.items(), key=lambda item: (item[1], item[0]), reverse=True)
    wanted = coverage * len(pods)
    chosen: list[tuple[tuple[int, int, int, tuple[str, ...]], int]] = []
    covered = 0
    for key, count in ranked:
        if covered >= wanted:
            break
        chosen.append((key, count))
        covered += count
    return tuple(
        PodShape(cpu, milli, num, spec, count / covered)
        for (cpu, milli, num, spec), count in chosen
    )


@dataclass(frozen=True)
class FragMeasure:
    """Typical shapes compiled against a cluster's GPU models, ready for vectorised evaluation.

    ``thresholds`` are the distinct per-GPU milli asked by GPU shapes; each group g points at one
    (``group_threshold``) and asks for ``group_num_gpu`` GPUs. ``node_access[n, g]`` says whether
    node n's model is one the group accepts. ``cum_share[k, g]`` is the popularity of the group's
    shapes asking for at most ``cpu_breaks[k - 1]`` CPU (``cum_share[0, g] == 0``).
    """

    thresholds: np.ndarray
    group_threshold: np.ndarray
    group_num_gpu: np.ndarray
    node_access: np.ndarray
    cpu_breaks: np.ndarray
    cum_share: np.ndarray

    @classmethod
    def build(cls, shapes: tuple[PodShape, ...], node_models: tuple[str, ...]) -> FragMeasure:
        gpu_shapes = [s for s in shapes if s.num_gpu > 0]
        groups = sorted({(s.gpu_milli, s.num_gpu, s.gpu_spec) for s in gpu_shapes})
        group_index = {g: i for i, g in enumerate(groups)}
        thresholds = np.array(sorted({g[0] for g in groups}), dtype=np.int64)
        cpu_breaks = np.array(sorted({s.cpu_milli for s in gpu_shapes}), dtype=np.int64)
        share = np.zeros((len(cpu_breaks) + 1, len(groups)))
        for s in gpu_shapes:
            column = int(np.searchsorted(cpu_breaks, s.cpu_milli)) + 1
            share[column, group_index[(s.gpu_milli, s.num_gpu, s.gpu_spec)]] += s.popularity
        access = np.array(
            [
                [bool(model) and (not spec or model in spec) for _, _, spec in groups]
                for model in node_models
            ],
            dtype=bool,
        ).reshape(len(node_models), len(groups))
        return cls(
            thresholds=thresholds,
            group_threshold=np.searchsorted(thresholds, [g[0] for g in groups]).astype(np.int64),
            group_num_gpu=np.array([g[1] for g in groups], dtype=np.int64),
            node_access=access,
            cpu_breaks=cpu_breaks,
            cum_share=np.cumsum(share, axis=0),
        )

    def gpu_stats(self, gpu_free: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """For rows of per-GPU free milli (nodes x GPUs, absent GPUs as 0): how many GPUs have at
        least each threshold free, and how much free milli sits on GPUs below each threshold."""
        free = gpu_free[..., None]
        below = free < self.thresholds
        fitting = (~below).sum(axis=-2)
        small = np.where(below, free, 0).sum(axis=-2)
        return fitting, small

    def node_frag(
        self,
        cpu_free: np.ndarray,
        gpu_free_total: np.ndarray,
        fitting: np.ndarray,
        small: np.ndarray,
        access: np.ndarray,
    ) -> np.ndarray:
        """F_n in milli-GPU for nodes described by their free CPU, free GPU milli, the outputs of
        :meth:`gpu_stats` and their rows of ``node_access`` (leading axes broadcast)."""
        share = self.cum_share[np.searchsorted(self.cpu_breaks, cpu_free, side="right")]
        hosts = (fitting[..., self.group_threshold] >= self.group_num_gpu) & access
        usable = gpu_free_total[..., None] - small[..., self.group_threshold]
        return gpu_free_total - (share * hosts * usable).sum(axis=-1)
