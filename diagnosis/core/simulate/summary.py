"""What a simulation run amounts to: utilisation both ways, waits, fragmentation, job counts.

Utilisation is reported the two ways docs/accounting.md gives, time-averaged since the
start: **allocation** (GPU-seconds held by jobs, partial gangs included, over GPU-seconds of
capacity) and **activity** (GPU-seconds weighted by the profile's mean utilisation). Waits are
``first start - submitted``; a job still pending counts with its wait so far (a lower bound), so
a policy cannot look good by never starting a job.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from diagnosis.core.simulate.jobs import SIZE_CLASSES, size_class
from diagnosis.core.simulate.state import ClusterState


@dataclass(frozen=True)
class WaitStats:
    jobs: int
    started: int
    p50_s: float | None
    p95_s: float | None
    max_s: float | None


@dataclass(frozen=True)
class Summary:
    seed: int
    start: str
    end: str
    duration_s: float
    gpus: int
    allocation_util: float
    running_util: float
    activity_util: float
    partial_hold_share: float
    unavailable_share: float
    waits_by_tenant: dict[str, WaitStats]
    waits_by_size: dict[str, WaitStats]
    fragmentation_mean_gpus: float
    fragmentation_max_gpus: int
    fragmentation_share_of_free: float
    jobs: dict[str, int]
    preemptions: int
    placement: dict[str, str]
    fragmentation_series: tuple[tuple[float, int, int], ...] = field(repr=False, default=())

    def as_dict(self, *, series: bool = False) -> dict[str, Any]:
        """Plain JSON-ready values; the fragmentation series only with ``series``."""
        out = asdict(self)
        if not series:
            out.pop("fragmentation_series")
        else:
            out["fragmentation_series"] = [list(row) for row in self.fragmentation_series]
        return out


def summarize(sim: ClusterState) -> Summary:
    elapsed = sim.now
    capacity_s = sim.total_gpus * elapsed
    seconds = sim.gpu_seconds

    def share(value: float) -> float:
        return round(value / capacity_s, 4) if capacity_s > 0 else 0.0

    arrived = [job for job in sim.jobs if job.state != "waiting"]
    waits = np.array(
        [
            (job.first_started if job.first_started is not None else sim.now) - job.submitted
            for job in arrived
        ],
        dtype=np.float64,
    )
    started = np.array([job.first_started is not None for job in arrived], dtype=bool)
    tenants = np.array([job.spec.tenant for job in arrived], dtype=object)
    sizes = np.array([size_class(job.spec.gpus) for job in arrived], dtype=object)

    samples = np.array(sim.fragmentation_samples, dtype=np.float64).reshape(-1, 3)
    fragmented = samples[:, 1]
    free = samples[:, 2]
    counts = {
        state: sum(1 for job in arrived if job.state == state)
        for state in ("pending", "running", "completed", "failed")
    }
    return Summary(
        seed=sim.seed,
        start=sim.spec.start.isoformat().replace("+00:00", "Z"),
        end=sim.now_time.isoformat().replace("+00:00", "Z"),
        duration_s=round(elapsed, 3),
        gpus=sim.total_gpus,
        allocation_util=share(seconds["allocated"]),
        running_util=share(seconds["allocated"] - seconds["partial"]),
        activity_util=share(seconds["activity"]),
        partial_hold_share=share(seconds["partial"]),
        unavailable_share=share(seconds["unusable"]),
        waits_by_tenant={
            tenant: _wait_stats(waits[tenants == tenant], started[tenants == tenant])
            for tenant in sorted(set(tenants.tolist()))
        },
        waits_by_size={
            size: _wait_stats(waits[sizes == size], started[sizes == size]) for size in SIZE_CLASSES
        },
        fragmentation_mean_gpus=round(float(fragmented.mean()), 2) if len(samples) else 0.0,
        fragmentation_max_gpus=int(fragmented.max()) if len(samples) else 0,
        fragmentation_share_of_free=round(float(fragmented.sum() / free.sum()), 4)
        if free.sum() > 0
        else 0.0,
        jobs={"submitted": len(arrived), "started": int(started.sum()), **counts},
        preemptions=sim.preemptions,
        placement=dict(sim.placement),
        fragmentation_series=tuple((t, int(f), int(g)) for t, f, g in sim.fragmentation_samples),
    )


def _wait_stats(waits: np.ndarray, started: np.ndarray) -> WaitStats:
    if not len(waits):
        return WaitStats(0, 0, None, None, None)
    return WaitStats(
        jobs=len(waits),
        started=int(started.sum()),
        p50_s=round(float(np.quantile(waits, 0.5)), 1),
        p95_s=round(float(np.quantile(waits, 0.95)), 1),
        max_s=round(float(waits.max()), 1),
    )
