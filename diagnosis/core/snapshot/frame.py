"""The :class:`ClusterSnapshot` frame: its fixed columns, the per-GPU metric statistics the core
reads, and times as the frames hold them (UTC :class:`pandas.Timestamp`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from diagnosis.core import vocabulary

# Per-GPU window statistics: metric -> statistics the core reads. Other statistics found in a
# document are kept too (as ``<metric>_<stat>`` columns) and dumped back.
GPU_METRICS: dict[str, tuple[str, ...]] = {
    "util": ("mean", "p10", "p90"),
    "tensor_active": ("mean",),
    "fb_used_frac": ("mean",),
    "power_w": ("mean",),
    "temp_c": ("max",),
    "pcie_rx_Bps": ("mean",),
    "nvlink_Bps": ("mean",),
    # Optional hardware-health statistics (issue 20; absent: NaN, and the rules reading them
    # say "not judged"). docs/snapshot.md, "Hidden-waste fields", says where each comes from.
    "dram_active": ("mean",),
    "power_limit_w": ("max",),
    "sm_clock_mhz": ("mean",),
    "max_sm_clock_mhz": ("max",),
    "throttle_thermal": ("frac",),
    "throttle_power": ("frac",),
    "row_remap": ("pending", "failure", "uncorrectable"),
}
FRACTION_METRICS = frozenset(
    {"util", "tensor_active", "fb_used_frac", "dram_active", "throttle_thermal", "throttle_power"}
)

NODE_COLUMNS = ["pool", "gpu_model", "gpus", "state", "cpu_util"]
GPU_BASE_COLUMNS = [
    "node",
    "index",
    "mig_instance",
    "pool",
    "uuid",
    "health",
    "reported",
    "nvlink_domain",
    "numa",
    "nvlink_clique",
    "mig_profile",
    "mig_parent_uuid",
    "capacity",
    "index_guessed",
    "gpu_model",
]
# The key of one allocatable GPU unit: a whole GPU (``mig_instance`` -1) or one MIG instance of
# it (``mig_instance`` = its GPU_I_ID). Joins between allocations and GPUs use all three.
GPU_KEY = ["node", "index", "mig_instance"]
WHOLE_GPU = -1
# Compute slices of a MIG-capable GPU (A100, A30 has 4; H100, H200, B200 have 7): a profile
# ``<n>g.<mem>`` holds n of them unless the document gives ``compute_fraction``.
MIG_COMPUTE_SLICES = 7
JOB_COLUMNS = [
    "name",
    "tenant",
    "queue",
    "pool",
    "kind",
    "priority",
    "state",
    "submitted",
    "started",
    "ended",
    "pods",
    "gpus_per_pod",
    "gang",
    "min_member",
    "tp",
    "achieved_tflops_per_gpu",
    "pending_reason",
    "partial_since",
    "preemptions",
    "bound_pods",
]
# ``guessed``: the adapter guessed which GPUs of the node the pod holds (``gpus_guessed``)
ALLOCATION_COLUMNS = ["job", "pod", "order", "node", "index", "mig_instance", "share", "guessed"]
QUEUE_COLUMNS = ["tenant", "weight", "deserved_gpus", "capability_gpus"]
EVENT_COLUMNS = ["time", "kind", "job", "node", "reason", "message"]
XID_COLUMNS = ["node", "index", "code", "time"]


@dataclass(frozen=True, eq=False)
class ClusterSnapshot:
    cluster: str
    as_of: pd.Timestamp
    window_s: int
    scheduler: Mapping[str, Any]
    nodes: pd.DataFrame
    gpus: pd.DataFrame
    xids: pd.DataFrame
    jobs: pd.DataFrame
    allocations: pd.DataFrame
    queues: pd.DataFrame
    events: pd.DataFrame
    extra: Mapping[str, Any] = field(default_factory=dict)

    @property
    def window_start(self) -> pd.Timestamp:
        return self.as_of - pd.Timedelta(seconds=self.window_s)

    @property
    def total_gpus(self) -> int:
        """Allocatable GPU units (whole GPUs and MIG instances): the rows of ``gpus``."""
        return len(self.gpus)

    def placement(self, pool: str) -> str | None:
        """The scheduler's GPU placement policy for a pool, when the adapter reported one."""
        placement = self.scheduler.get("placement") or {}
        return placement.get(pool)

    def gang_advice(self) -> str | None:
        """The admission setting that keeps the scheduler from holding part of a gang, as its
        adapter declares it (``scheduler.gang_advice.setting``); None when the snapshot has
        none (an older one, or a scheduler that declares none)."""
        advice = self.scheduler.get("gang_advice") or {}
        return advice.get("setting") or None


def parse_time(value: Any) -> pd.Timestamp | None:
    """An RFC 3339 timestamp with a zone designator (:func:`vocabulary.parse_time`), as a UTC
    :class:`pandas.Timestamp`; None when unparsable."""
    moment = vocabulary.parse_time(value)
    return None if moment is None else pd.Timestamp(moment)


def format_time(value: Any) -> str | None:
    """A time the frames hold (a Timestamp, an aware datetime or RFC 3339 text) as
    :func:`vocabulary.format_time` writes it; None for a missing one (None or NaT)."""
    if value is None or pd.isna(value):
        return None
    return vocabulary.format_time(pd.Timestamp(value).tz_convert("UTC"))
