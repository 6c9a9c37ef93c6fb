"""Derived facts several rules (and the GPU-hour accounting) share, computed once per snapshot.

Everything here is vectorised over the snapshot's frames; each property is computed on first use
and cached, so a rule pays only for what it reads.
"""

from __future__ import annotations

from functools import cached_property

import numpy as np
import pandas as pd

from diagnosis.snapshot import ClusterSnapshot

# Peak dense BF16 TFLOP/s per GPU, matched on the model name (longest key first).
PEAK_BF16_TFLOPS: dict[str, float] = {
    "H100 PCIE": 756.0,
    "H100 NVL": 835.0,
    "H100": 989.0,
    "H200": 989.0,
    "H800": 989.0,
    "H20": 148.0,
    "B200": 2250.0,
    "B100": 1750.0,
    "GB200": 2500.0,
    "A100": 312.0,
    "A800": 312.0,
    "A30": 165.0,
    "A10": 125.0,
    "L40S": 362.0,
    "L40": 181.0,
    "L4": 121.0,
    "V100": 125.0,
    "T4": 65.0,
}


def peak_tflops(model: str | None, table: dict[str, float] | None = None) -> float:
    """Peak dense BF16 TFLOP/s for a GPU model name such as ``A100-SXM4-80GB``; NaN if unknown."""
    if not model:
        return float("nan")
    table = table or PEAK_BF16_TFLOPS
    name = model.upper().replace("NVIDIA ", "")
    for key in sorted(table, key=len, reverse=True):
        if key.upper() in name:
            return table[key]
    return float("nan")


class SnapshotFacts:
    def __init__(self, snapshot: ClusterSnapshot) -> None:
        self.snapshot = snapshot

    # -- GPUs and who holds them ---------------------------------------------------------------

    @cached_property
    def gpu_state(self) -> pd.DataFrame:
        """One row per GPU: the snapshot's GPU columns plus ``node_state``, ``job`` (holder or
        None), ``usable`` (node ready and GPU healthy) and ``free`` (usable and held by no job)."""
        snap = self.snapshot
        gpus = snap.gpus.copy()
        gpus["node_state"] = gpus["node"].map(snap.nodes["state"]).to_numpy()
        holder = snap.allocations.set_index(["node", "index"])["job"]
        keys = pd.MultiIndex.from_arrays([gpus["node"], gpus["index"]])
        gpus["job"] = holder.reindex(keys).to_numpy()
        gpus["usable"] = (gpus["node_state"] == "ready").to_numpy() & (
            gpus["health"] == "ok"
        ).to_numpy()
        gpus["free"] = gpus["usable"].to_numpy() & gpus["job"].isna().to_numpy()
        return gpus

    @cached_property
    def free_per_node(self) -> pd.Series:
        """free(n) for every node (0 for nodes not ready), indexed by node name."""
        free = self.gpu_state.groupby("node", sort=False)["free"].sum()
        return free.reindex(self.snapshot.nodes.index, fill_value=0).astype(np.int64)

    # -- jobs ----------------------------------------------------------------------------------

    @cached_property
    def waits_s(self) -> pd.Series:
        """``as_of - submitted`` in seconds per job."""
        jobs = self.snapshot.jobs
        return (self.snapshot.as_of - jobs["submitted"]).dt.total_seconds()

    @cached_property
    def pending_unallocated(self) -> pd.DataFrame:
        jobs = self.snapshot.jobs
        return jobs[(jobs["state"] == "pending") & (jobs["bound_pods"] == 0)]

    @cached_property
    def partial_gangs(self) -> pd.DataFrame:
        """Pending gang jobs with ``0 < bound pods < min_member``, with ``held_since``,
        ``hold_s``, ``held_gpus`` and ``missing_pods`` (``min_member - bound``)."""
        jobs = self.snapshot.jobs
        mask = (
            (jobs["state"] == "pending")
            & jobs["gang"]
            & (jobs["bound_pods"] > 0)
            & (jobs["bound_pods"] < jobs["min_member"])
        )
        partial = jobs[mask].copy()
        partial["held_since"] = partial["partial_since"].fillna(partial["submitted"])
        partial["hold_s"] = (self.snapshot.as_of - partial["held_since"]).dt.total_seconds()
        held = self.snapshot.allocations.groupby("job").size()
        partial["held_gpus"] = held.reindex(partial.index, fill_value=0).to_numpy()
        partial["missing_pods"] = partial["min_member"] - partial["bound_pods"]
        return partial

    @cached_property
    def job_gpu_stats(self) -> pd.DataFrame:
        """Per job with an allocation: mean of its GPUs' window statistics (``util_mean``,
        ``util_p10``, ``util_p90``, ``util_spread`` = mean(p90 - p10), ``fb_used_frac_mean``,
        ``tensor_active_mean``, ``pcie_rx_Bps_mean``), ``gpus``, ``nodes`` (distinct), and
        ``host_cpu_max`` (max ``cpu_util`` of its nodes). NaN statistics are skipped in means."""
        snap = self.snapshot
        columns = [
            "util_mean",
            "util_p10",
            "util_p90",
            "fb_used_frac_mean",
            "tensor_active_mean",
            "pcie_rx_Bps_mean",
        ]
        joined = snap.allocations.merge(
            snap.gpus[["node", "index", *columns]], on=["node", "index"], how="left"
        )
        joined["util_spread"] = joined["util_p90"] - joined["util_p10"]
        joined["host_cpu"] = joined["node"].map(snap.nodes["cpu_util"]).to_numpy()
        grouped = joined.groupby("job", sort=False)
        stats = grouped[[*columns, "util_spread"]].mean()
        stats["gpus"] = grouped.size()
        stats["nodes"] = grouped["node"].nunique()
        stats["host_cpu_max"] = grouped["host_cpu"].max()
        return stats

    # -- placeability ----------------------------------------------------------------------------

    def pod_slots(self, jobs: pd.DataFrame, free_per_node: pd.Series | None = None) -> np.ndarray:
        """For each job row: ``sum over nodes of its pool of floor(free(n) / gpus_per_pod)``
        (every node when the job's pool is null). Jobs asking 0 GPUs per pod get +inf.

        Computed once per distinct (pool, gpus_per_pod), never per job × node.
        """
        free = self.free_per_node if free_per_node is None else free_per_node
        nodes = self.snapshot.nodes
        node_free = free.reindex(nodes.index, fill_value=0).to_numpy()
        node_pool = nodes["pool"].to_numpy()
        pools = jobs["pool"].to_numpy()
        sizes = jobs["gpus_per_pod"].to_numpy()
        result = np.full(len(jobs), np.inf)
        keys = pd.DataFrame({"pool": pools, "size": sizes})
        for (pool, size), rows in keys.groupby(["pool", "size"], dropna=False).indices.items():
            if size <= 0:
                continue
            in_pool = node_free if pd.isna(pool) else node_free[node_pool == pool]
            result[rows] = np.floor_divide(in_pool, size).sum()
        return result

    def placeable(self, jobs: pd.DataFrame, pods_needed: pd.Series | None = None) -> np.ndarray:
        """Whether each job's pods (or ``pods_needed``) fit on the free GPUs of its pool."""
        needed = jobs["pods"] if pods_needed is None else pods_needed
        return self.pod_slots(jobs) >= needed.to_numpy()

    @cached_property
    def pool_free(self) -> pd.Series:
        """Free GPUs per pool."""
        return self.free_per_node.groupby(self.snapshot.nodes["pool"]).sum()

    @cached_property
    def pool_capacity(self) -> pd.Series:
        """GPUs per pool (every GPU, usable or not)."""
        return self.snapshot.nodes.groupby("pool")["gpus"].sum()

    def peak_tflops_per_node(self, table: dict[str, float] | None = None) -> pd.Series:
        models = self.snapshot.nodes["gpu_model"]
        return models.map(lambda m: peak_tflops(m, table)).astype("float64")
