"""Faults injected at chosen simulated times (``Simulator.inject``).

Each fault is a small frozen dataclass with the time ``at`` (simulated seconds since the
cluster's start) it happens.
"""

from __future__ import annotations

from dataclasses import dataclass

from diagnosis.core.simulate.jobs import PROFILES

# What an Xid does to the job and the GPU, after NVIDIA's Xid catalog
# (docs.nvidia.com/deploy/xid-errors; ../shared/data/xid/xid_catalog.csv, "recommended_action").
# GPU-fatal: the application dies and the GPU needs a reset, reboot or service before it can be
# used again (48 DBE, 61/62 PMU, 64 row-remap failure, 74 NVLink, 79 fallen off the bus,
# 95 uncontained ECC, 119/120 GSP). 94 (contained ECC) asks only to restart the application, but
# leaves a row remap pending that needs a GPU reset: the simulator takes the conservative reading
# and holds the GPU back too.
GPU_FATAL_XIDS = frozenset({48, 61, 62, 64, 74, 79, 94, 95, 119, 120})
# Application-fatal: the job fails, the GPU stays usable (13 graphics engine exception, 31 MMU
# fault, 43 channel reset, 45 preemptive removal).
APP_FATAL_XIDS = frozenset({13, 31, 43, 45})


def xid_consequence(code: int) -> str:
    """``gpu-fatal``, ``app-fatal`` or ``none`` (the Xid is only recorded)."""
    if code in GPU_FATAL_XIDS:
        return "gpu-fatal"
    if code in APP_FATAL_XIDS:
        return "app-fatal"
    return "none"


@dataclass(frozen=True)
class Xid:
    """GPU ``gpu`` of ``node`` reports Xid ``code``."""

    at: float
    node: str
    gpu: int
    code: int


@dataclass(frozen=True)
class NodeDown:
    """The node stops answering: its jobs fail and its GPUs stop reporting."""

    at: float
    node: str
    reason: str = "NodeNotReady"


@dataclass(frozen=True)
class NodeRepaired:
    """The node is back (``ready`` unless an operator drained it) with all its GPUs healthy."""

    at: float
    node: str


@dataclass(frozen=True)
class GpuRepaired:
    at: float
    node: str
    gpu: int


@dataclass(frozen=True)
class RepairAfterDrain:
    """From ``at`` on, the first time ``node`` turns ``drained`` a technician takes GPU ``gpu``
    out and puts it back repaired ``after_s`` later (a :class:`GpuRepaired` then): the node
    itself stays drained until an operator resumes it. Nothing happens while nobody drains it."""

    at: float
    node: str
    gpu: int
    after_s: float = 1800.0


@dataclass(frozen=True)
class ProfileSwitch:
    """A job's GPUs change behaviour, e.g. its input pipeline starts starving it."""

    at: float
    job: str
    profile: str

    def __post_init__(self) -> None:
        if self.profile not in PROFILES:
            raise ValueError(f"unknown profile {self.profile!r}")


@dataclass(frozen=True)
class Misplace:
    """The job's next placement ignores topology: each pod on a different node and its GPUs
    spread over NVLink domains and NUMA nodes (a scheduler without topology awareness)."""

    at: float
    job: str


@dataclass(frozen=True)
class DeadlockingGangs:
    """Two gangs submitted together without gang admission (pods bind one by one, in turn),
    each asking for ``pods`` pods of ``gpus_per_pod`` GPUs on ``pool``: when the pool cannot
    hold both, each grabs part of it and neither can ever start."""

    at: float
    pool: str
    pods: int
    gpus_per_pod: int = 8
    tenant: str = "research"
    queue: str | None = None
    ids: tuple[str, str] = ("gang-a", "gang-b")
    duration_s: float = 6 * 3600.0
    priority: int = 0


Fault = (
    Xid
    | NodeDown
    | NodeRepaired
    | GpuRepaired
    | RepairAfterDrain
    | ProfileSwitch
    | Misplace
    | DeadlockingGangs
)
