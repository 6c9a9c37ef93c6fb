"""Scheduling policy and the changes an operator (or an approved recommendation) can make.

A :class:`Policy` is the scheduler's configuration when a simulation starts. Changes
(:func:`set_placement`, :func:`set_queue_weight`, :func:`drain_node`, :func:`resume_node`) are
applied to a running simulator with ``Simulator.apply`` and take effect from its next
scheduling pass.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from diagnosis.core.simulate.jobs import ADMISSIONS, ALL_OR_NOTHING

# Node choice for each pod:
#   random   any node that fits
#   spread   the least allocated node (largest free share) first
#   binpack  best fit: the node with the fewest free GPUs that still fits
#   packing  partly used nodes first (in node order), then empty nodes
PLACEMENTS = ("random", "spread", "binpack", "packing")

# Order of the pending queue:
#   fifo        by submission time
#   priority    by priority (high first), then submission time
#   fair-share  next from the queue with the lowest usage / weight (or usage / deserved GPUs),
#               inside a queue by priority then submission time
QUEUE_ORDERS = ("fifo", "priority", "fair-share")
FAIR_SHARE_BASES = ("weight", "deserved")


@dataclass(frozen=True)
class Policy:
    """The scheduler's settings.

    ``placement`` maps a pool to its placement (others use ``default_placement``).
    ``backfill``: a job that fits may start ahead of a blocked one; without it the first job
    that does not fit blocks every later job of its pool. ``tick_s``: 0 runs a scheduling pass
    after every batch of simultaneous events; > 0 runs passes at most on multiples of it.
    ``window_s`` is the statistics window of snapshots; ended jobs stay in snapshots for
    ``retention_s`` (longer when a pending job could have been overtaken by them).
    """

    queue_order: str = "fifo"
    gang_admission: str = ALL_OR_NOTHING
    placement: Mapping[str, str] = field(default_factory=dict)
    default_placement: str = "spread"
    backfill: bool = True
    fair_share_basis: str = "weight"
    tick_s: float = 0.0
    window_s: int = 900
    retention_s: float = 3600.0

    def __post_init__(self) -> None:
        if self.queue_order not in QUEUE_ORDERS:
            raise ValueError(f"unknown queue order {self.queue_order!r}; one of {QUEUE_ORDERS}")
        if self.gang_admission not in ADMISSIONS:
            raise ValueError(f"unknown gang admission {self.gang_admission!r}; one of {ADMISSIONS}")
        for name in (self.default_placement, *self.placement.values()):
            check_placement(name)
        if self.fair_share_basis not in FAIR_SHARE_BASES:
            raise ValueError(f"unknown fair-share basis {self.fair_share_basis!r}")
        if self.tick_s < 0 or self.window_s <= 0 or self.retention_s < 0:
            raise ValueError("tick_s and retention_s must be >= 0, window_s > 0")

    def placement_of(self, pool: str) -> str:
        return self.placement.get(pool, self.default_placement)

    def with_placement(self, pool: str, placement: str) -> Policy:
        return replace(self, placement={**self.placement, pool: check_placement(placement)})


def check_placement(name: str) -> str:
    if name not in PLACEMENTS:
        raise ValueError(f"unknown placement {name!r}; one of {', '.join(PLACEMENTS)}")
    return name


# ----------------------------------------------------------------------------------------------
# Changes


@dataclass(frozen=True)
class SetPlacement:
    pool: str
    placement: str

    def __post_init__(self) -> None:
        check_placement(self.placement)


@dataclass(frozen=True)
class SetQueueWeight:
    queue: str
    weight: float

    def __post_init__(self) -> None:
        if not self.weight > 0:
            raise ValueError("a queue weight must be positive")


@dataclass(frozen=True)
class DrainNode:
    """Cordon a node and, with ``evict`` (the default, like ``kubectl drain``), evict its jobs
    back to the queue (their work so far is kept, as from a checkpoint). Without ``evict`` (like
    Slurm's ``State=DRAIN``) running jobs finish and the node turns ``drained`` when empty."""

    node: str
    reason: str = "drained by operator"
    evict: bool = True


@dataclass(frozen=True)
class ResumeNode:
    node: str


@dataclass(frozen=True)
class RequeueJob:
    """Release a job's pods and put it back in its queue (a partial gang's release: Kueue's
    eviction and requeue, Slurm's ``scontrol requeue``); from then on it is admitted whole."""

    job: str
    reason: str = "requeued by operator"


Change = SetPlacement | SetQueueWeight | DrainNode | ResumeNode | RequeueJob


def set_placement(pool: str, placement: str) -> SetPlacement:
    return SetPlacement(pool, placement)


def set_queue_weight(queue: str, weight: float) -> SetQueueWeight:
    return SetQueueWeight(queue, weight)


def drain_node(node: str, reason: str = "drained by operator", *, evict: bool = True) -> DrainNode:
    return DrainNode(node, reason, evict)


def resume_node(node: str) -> ResumeNode:
    return ResumeNode(node)
