"""Derived facts several rules (and the GPU-hour accounting) share, computed once per snapshot.

Everything here is vectorised over the snapshot's frames; each property is computed on first use
and cached, so a rule pays only for what it reads.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import pandas as pd

from diagnosis.core.snapshot import GPU_KEY, ClusterSnapshot

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


# Thermal design power (the default board power limit) per GPU, watts, matched like the peak
# table on the model name with hyphens read as spaces (longest key first). A GPU's own
# ``power_limit_w.max`` (DCGM_FI_DEV_POWER_MGMT_LIMIT) wins over this table where reported.
TDP_WATTS: dict[str, float] = {
    "H100 PCIE": 350.0,
    "H100 NVL": 400.0,
    "H100": 700.0,
    "H200 NVL": 600.0,
    "H200": 700.0,
    "H800": 700.0,
    "H20": 500.0,
    "B200": 1000.0,
    "B100": 700.0,
    "GB200": 1200.0,
    "A100 PCIE": 300.0,
    "A100": 400.0,
    "A800": 400.0,
    "A30": 165.0,
    "A10": 150.0,
    "L40S": 350.0,
    "L40": 300.0,
    "L4": 72.0,
    "V100": 300.0,
    "T4": 70.0,
}


def tdp_watts(model: str | None, table: dict[str, float] | None = None) -> float:
    """Thermal design power of a GPU model such as ``A100-SXM4-80GB``; NaN if unknown."""
    if not model:
        return float("nan")
    table = table or TDP_WATTS
    name = model.upper().replace("NVIDIA ", "").replace("-", " ").replace("_", " ")
    for key in sorted(table, key=len, reverse=True):
        if key.upper() in name:
            return table[key]
    return float("nan")


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


def _per_model(models: pd.Series, of: Callable[[str], float]) -> pd.Series:
    """``of(model)`` of each GPU's model (NaN for none), computed once per distinct model:
    ``models.map({m: of(m)})`` without mapping 10^5 Python objects one by one."""
    codes, distinct = pd.factorize(models.to_numpy(dtype=object))
    values = np.array([of(model) for model in distinct.tolist()] + [np.nan], dtype="float64")
    return pd.Series(values[codes], index=models.index, name=models.name)


def take(values: np.ndarray, positions: np.ndarray, missing: object) -> np.ndarray:
    """``values[p]`` for each position ``p`` (``missing`` where ``p`` is -1): a lookup by
    :meth:`pandas.Index.get_indexer` positions, without ``Series.map`` inferring the result's
    dtype from 10^5 Python objects (issue #35)."""
    return np.append(values, [missing])[positions]


def lookup(table: pd.Series, keys: np.ndarray | pd.Series, missing: object) -> np.ndarray:
    """``table[key]`` for each key, ``missing`` for a key not in its (unique) index: what
    ``pd.Series(keys).map(table)`` gives before its NaN are filled, as a numpy array."""
    values = table.to_numpy()
    if values.dtype.kind not in "biufcmM":
        values = table.to_numpy(dtype=object)
    return take(values, table.index.get_indexer(keys), missing)


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
        gpus["node_state"] = lookup(snap.nodes["state"], gpus["node"], np.nan)
        gpus["job"] = self._first_holders()  # a shared GPU: its first holder
        gpus["usable"] = (gpus["node_state"] == "ready").to_numpy() & (
            gpus["health"] == "ok"
        ).to_numpy()
        gpus["free"] = gpus["usable"].to_numpy() & gpus["job"].isna().to_numpy()
        return gpus

    @cached_property
    def allocation_gpu_position(self) -> np.ndarray | None:
        """Per allocation row: the position in ``snapshot.gpus`` of the GPU unit (node, index,
        MIG instance) it binds, -1 for one the snapshot does not list; None when GPU units
        repeat in ``snapshot.gpus`` (a join may then match a row several times)."""
        gpus, alloc = self.snapshot.gpus, self.snapshot.allocations
        nodes = np.concatenate(
            [gpus["node"].to_numpy(dtype=object), alloc["node"].to_numpy(dtype=object)]
        )
        node, _ = pd.factorize(nodes)
        index = np.concatenate([gpus["index"].to_numpy(), alloc["index"].to_numpy()])
        instance = np.concatenate(
            [gpus["mig_instance"].to_numpy(), alloc["mig_instance"].to_numpy()]
        )
        if not len(node):
            return np.zeros(0, dtype=np.int64)
        if (node < 0).any():
            return None
        index = index.astype(np.int64) - int(index.min())
        instance = instance.astype(np.int64) - int(instance.min())
        spans = (int(node.max()) + 1, int(index.max()) + 1, int(instance.max()) + 1)
        if spans[0] * spans[1] * spans[2] >= 1 << 62:
            return None
        keys = (node.astype(np.int64) * spans[1] + index) * spans[2] + instance
        units = pd.Index(keys[: len(gpus)])
        if not units.is_unique:
            return None
        return units.get_indexer(keys[len(gpus) :])

    def allocations_with(self, rows: np.ndarray | None, gpus: pd.DataFrame) -> pd.DataFrame:
        """``allocations[rows].merge(gpus, on=GPU_KEY, how="left")`` for ``gpus`` aligned with
        ``snapshot.gpus`` (its rows, in order, with the GPU_KEY columns), taken by
        :attr:`allocation_gpu_position` instead of joined on three keys; the merge itself
        where that cannot give the same frame. ``rows``: a boolean mask (None: every row)."""
        alloc = self.snapshot.allocations
        position = self.allocation_gpu_position
        if rows is not None:
            alloc = alloc[rows]
            position = None if position is None else position[rows]
        extra = [c for c in gpus.columns if c not in GPU_KEY]
        if position is None or (position < 0).any() or set(extra) & set(alloc.columns):
            return alloc.merge(gpus, on=GPU_KEY, how="left")
        right = gpus[extra].iloc[position].reset_index(drop=True)
        return pd.concat([alloc.reset_index(drop=True), right], axis=1)

    @cached_property
    def holder_position(self) -> np.ndarray:
        """Per GPU (aligned with :attr:`gpu_state`): the position in ``snapshot.jobs`` of the
        job holding it, -1 for a GPU no job of the jobs frame holds."""
        return self.snapshot.jobs.index.get_indexer(self.gpu_state["job"].to_numpy(dtype=object))

    def _first_holders(self) -> np.ndarray:
        """Per GPU: the job of its first allocation row (NaN when none)."""
        alloc = self.snapshot.allocations
        position = self.allocation_gpu_position
        if position is None:
            holder = alloc[~alloc[GPU_KEY].duplicated().to_numpy()].set_index(GPU_KEY)["job"]
            keys = pd.MultiIndex.from_arrays([self.snapshot.gpus[c] for c in GPU_KEY])
            return holder.reindex(keys).to_numpy()
        listed = np.flatnonzero(position >= 0)
        units, first = np.unique(position[listed], return_index=True)
        holders = np.full(len(self.snapshot.gpus), np.nan, dtype=object)
        holders[units] = alloc["job"].to_numpy(dtype=object)[listed[first]]
        return holders

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
    def pending_unallocated_rows(self) -> np.ndarray:
        """Positions in ``snapshot.jobs`` of the pending jobs with no pod bound."""
        jobs = self.snapshot.jobs
        return np.flatnonzero(
            (jobs["state"] == "pending").to_numpy() & (jobs["bound_pods"] == 0).to_numpy()
        )

    @cached_property
    def pending_unallocated(self) -> pd.DataFrame:
        return self.snapshot.jobs.iloc[self.pending_unallocated_rows]

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
        joined = self.allocations_with(None, snap.gpus[[*GPU_KEY, *columns]])
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

    @cached_property
    def power_limit_per_gpu(self) -> pd.Series:
        """Each GPU's power limit in watts (aligned with ``snapshot.gpus``): its reported
        ``power_limit_w.max`` where present, else its model's TDP (:data:`TDP_WATTS`; the
        GPU's own model, which is its node's unless the node has several); NaN when neither is
        known."""
        snap = self.snapshot
        by_model = _per_model(snap.gpus["gpu_model"], tdp_watts)
        reported = snap.gpus["power_limit_w_max"].astype("float64")
        return reported.where(reported > 0, by_model)

    def peak_tflops_per_gpu(self, table: dict[str, float] | None = None) -> pd.Series:
        """Each GPU's peak dense BF16 TFLOP/s (aligned with ``snapshot.gpus``): its own model's
        (its node's unless the node has several, docs/snapshot.md); NaN when unknown."""
        return _per_model(self.snapshot.gpus["gpu_model"], lambda model: peak_tflops(model, table))

    # -- placement: requests, fragmentation, gangs -------------------------------------------------
    #
    # A job's *placement scope* is the set of nodes it may use: the nodes of its pool, or every
    # node when its pool is null. Scopes are labelled by the pool name; a null pool is labelled by
    # the cluster's only pool when there is exactly one, else by None ("the whole cluster").

    @cached_property
    def job_requests(self) -> pd.Series:
        """GPUs each job asks for in total: ``pods * gpus_per_pod``."""
        jobs = self.snapshot.jobs
        return (jobs["pods"] * jobs["gpus_per_pod"]).astype(np.int64)

    @cached_property
    def job_held_gpus(self) -> pd.Series:
        """GPUs in each job's allocation (0 for jobs without one), indexed by job id."""
        held = self.snapshot.allocations.groupby("job", sort=False).size()
        return held.reindex(self.snapshot.jobs.index, fill_value=0).astype(np.int64)

    @cached_property
    def queue_held_gpus(self) -> pd.Series:
        """GPUs currently allocated to each queue's jobs (any job state), indexed by queue."""
        queues = self.snapshot.jobs["queue"]
        held = self.job_held_gpus
        return held.groupby(queues.to_numpy(), sort=False).sum()

    def placement_scope(self, pools: pd.Series | np.ndarray) -> np.ndarray:
        """The scope label of each job pool value (see the comment above): the pool itself, or
        for a null pool the cluster's only pool, or None when the cluster has several."""
        values = np.asarray(pools, dtype=object)
        node_pools = pd.unique(self.snapshot.nodes["pool"].to_numpy())
        only = node_pools[0] if len(node_pools) == 1 else None
        missing = pd.isna(values)
        out = values.copy()
        out[missing] = only
        return out

    def scope_free(self, pools: pd.Series | np.ndarray) -> np.ndarray:
        """Free GPUs over the nodes each job may use (every node for a null pool)."""
        values = np.asarray(pools, dtype=object)
        by_pool = self.pool_free
        position = by_pool.index.get_indexer(values)
        free = np.append(by_pool.to_numpy(dtype=np.int64), 0)  # position -1: unknown pool
        out = free[position]
        out[pd.isna(values)] = int(self.free_per_node.sum())
        return out

    @cached_property
    def pending_placement(self) -> pd.DataFrame:
        """Every pending job with no allocation, with its placement verdict on free GPUs.

        Columns: the job's ``pool``, ``queue``, ``tenant``, ``pods``, ``gpus_per_pod``,
        ``priority``, ``submitted``, plus ``request`` (GPUs), ``wait_s``, ``scope`` (see
        :meth:`placement_scope`), ``scope_free`` (free GPUs it may use), ``pod_slots``,
        ``placeable``, ``capability_ok`` and ``fragmentation_blocked``.

        *capability_ok*: the job's queue has no ``capability_gpus``, or the GPUs the queue's jobs
        hold now plus this job's request stay within it (``held + request <= capability``); a job
        in a queue the snapshot does not list has no capability.

        *fragmentation_blocked*: asks for at least one GPU, is not placeable, yet
        ``scope_free >= request`` and ``capability_ok`` — the free GPUs would be enough if they
        were not scattered across nodes.
        """
        snap = self.snapshot
        pending = self.pending_unallocated
        columns = ["pool", "queue", "tenant", "pods", "gpus_per_pod", "priority", "submitted"]
        out = pending[columns].copy()
        rows = self.pending_unallocated_rows
        out["request"] = self.job_requests.to_numpy()[rows]
        out["wait_s"] = self.waits_s.to_numpy()[rows]
        out["scope"] = self.placement_scope(out["pool"])
        out["scope_free"] = self.scope_free(out["pool"])
        slots = self.pod_slots(pending)
        out["pod_slots"] = slots
        out["placeable"] = slots >= out["pods"].to_numpy()
        queue = out["queue"].to_numpy(dtype=object)
        capability = lookup(snap.queues["capability_gpus"], queue, np.nan).astype(float)
        held = lookup(self.queue_held_gpus, queue, 0).astype(float)
        out["capability_ok"] = np.isnan(capability) | (
            held + out["request"].to_numpy() <= capability
        )
        out["fragmentation_blocked"] = (
            (out["request"].to_numpy() > 0)
            & ~out["placeable"].to_numpy()
            & (out["scope_free"].to_numpy() >= out["request"].to_numpy())
            & out["capability_ok"].to_numpy()
        )
        return out

    @cached_property
    def fragmentation_blocked(self) -> pd.DataFrame:
        """The rows of :attr:`pending_placement` that are fragmentation-blocked (any wait)."""
        placement = self.pending_placement
        return placement[placement["fragmentation_blocked"].to_numpy()]

    @cached_property
    def partial_gang_placement(self) -> pd.DataFrame:
        """:attr:`partial_gangs` with ``scope``, ``scope_free``, ``missing_slots`` (pod slots
        of its size on free GPUs) and ``can_complete`` (its missing pods are placeable)."""
        partial = self.partial_gangs.copy()
        partial["scope"] = self.placement_scope(partial["pool"])
        partial["scope_free"] = self.scope_free(partial["pool"])
        slots = self.pod_slots(partial)
        partial["missing_slots"] = slots
        partial["can_complete"] = slots >= partial["missing_pods"].to_numpy()
        return partial

    def deadlock_sets(self, min_hold_s: float) -> tuple[tuple[str, ...], ...]:
        """The gang deadlocks among partial gangs held at least ``min_hold_s`` (docs/rules.md).

        Per pool (a null pool is its own group, placed on every node), the candidates are the
        partial gangs held >= ``min_hold_s`` whose missing pods are not placeable on free GPUs.
        Whether every member of a set D would be placeable on free GPUs plus the GPUs held by
        the other members of D is monotone in D, so the largest such set is found by starting
        from all candidates and dropping, round by round, every member that would not fit
        (per node: ``free(n) + held by the others of D on n``), until nothing changes.

        That set is then split so that unrelated deadlocks in one pool are reported apart:
        gangs holding GPUs on a common node start in one part; a part in which some member
        would not fit with the GPUs of its own part is merged with the parts holding GPUs on
        the nodes where that member would find room for a pod, until every part is a
        deadlock on its own. (Merging ends at the largest set at worst, which is one.) Parts
        of >= 2 gangs are reported.

        Returns the sets as sorted tuples of job ids, in sorted order. Cached per threshold.
        """
        cache = self.__dict__.setdefault("_deadlock_sets", {})
        key = float(min_hold_s)
        if key not in cache:
            cache[key] = self._find_deadlocks(key)
        return cache[key]

    def deadlocked_jobs(self, min_hold_s: float) -> frozenset[str]:
        return frozenset(job for group in self.deadlock_sets(min_hold_s) for job in group)

    def _find_deadlocks(self, min_hold_s: float) -> tuple[tuple[str, ...], ...]:
        partial = self.partial_gang_placement
        candidates = partial[
            (partial["hold_s"].to_numpy() >= min_hold_s) & ~partial["can_complete"].to_numpy()
        ]
        if len(candidates) < 2:
            return ()
        nodes = self.snapshot.nodes
        node_pos = pd.Series(np.arange(len(nodes)), index=nodes.index)
        node_pool = nodes["pool"].to_numpy()
        free = self.free_per_node.reindex(nodes.index, fill_value=0).to_numpy()
        alloc = self.snapshot.allocations
        alloc = alloc[alloc["job"].isin(candidates.index)]
        holdings = alloc.groupby(["job", "node"], sort=True).size().rename("gpus").reset_index()
        holdings["pos"] = holdings["node"].map(node_pos).to_numpy()
        found: list[tuple[str, ...]] = []
        pool_keys = candidates["pool"].astype(object).where(candidates["pool"].notna(), None)
        for pool, group in candidates.groupby(pool_keys.to_numpy(), dropna=False, sort=False):
            scope = np.ones(len(nodes), bool) if pd.isna(pool) else node_pool == pool
            members = group.index.to_numpy()
            held = holdings[holdings["job"].isin(members)]
            held = held[scope[held["pos"].to_numpy()]]
            found.extend(_deadlocks_in_scope(group, held, free, scope))
        return tuple(sorted(found))


def _deadlocks_in_scope(
    group: pd.DataFrame, held: pd.DataFrame, free: np.ndarray, scope: np.ndarray
) -> list[tuple[str, ...]]:
    """The deadlock sets among one pool's candidates (see :meth:`SnapshotFacts.deadlock_sets`).

    ``held`` has one row per (candidate, node of the scope) with the GPUs it holds there.
    """
    ids = group.index.to_numpy()
    holdings = _Holdings(
        size=group["gpus_per_pod"].to_numpy().astype(np.int64),
        missing=group["missing_pods"].to_numpy().astype(np.int64),
        member=held["job"].map({job: i for i, job in enumerate(ids)}).to_numpy().astype(np.int64),
        pos=held["pos"].to_numpy().astype(np.int64),
        gpus=held["gpus"].to_numpy().astype(np.int64),
        free=np.where(scope, free, 0),
        scope=scope,
    )
    # The largest set: drop whoever would not fit with the others' GPUs until nobody drops.
    alive = np.ones(len(ids), bool)
    while True:
        fits = alive & holdings.fits(alive)
        if alive.sum() < 2:
            return []
        if (fits == alive).all():
            break
        alive = fits
    # Split it: start from the gangs that hold GPUs on a common node, and merge a part that is
    # not a deadlock on its own with the parts holding GPUs on nodes its members could use.
    parts = _Parts(len(ids))
    for same_node in holdings.holders_by_node(alive):
        parts.join(same_node)
    while True:
        merged = False
        for part in parts.of(alive):
            mask = np.zeros(len(ids), bool)
            mask[part] = True
            stuck = mask & ~holdings.fits(mask)
            if stuck.any():
                parts.join([part[0], *holdings.helpers(np.flatnonzero(stuck), alive)])
                merged = True
                break
        if not merged:
            break
    found = [tuple(sorted(str(ids[i]) for i in part)) for part in parts.of(alive)]
    return [part for part in found if len(part) >= 2]


@dataclass(frozen=True)
class _Holdings:
    """Partial gangs of one scope: pod ``size`` and ``missing`` pods per member, and what they
    hold (``member``, node ``pos``, ``gpus`` per row); ``free`` GPUs per node (0 off scope)."""

    size: np.ndarray
    missing: np.ndarray
    member: np.ndarray
    pos: np.ndarray
    gpus: np.ndarray
    free: np.ndarray
    scope: np.ndarray

    def available(self, mask: np.ndarray) -> np.ndarray:
        """Per node: free GPUs plus the GPUs held by the members in ``mask``."""
        rows = mask[self.member]
        available = self.free.copy()
        np.add.at(available, self.pos[rows], self.gpus[rows])
        return available

    def fits(self, mask: np.ndarray) -> np.ndarray:
        """Whether each member's missing pods would be placeable on the free GPUs plus the
        GPUs held by the *other* members in ``mask``."""
        available = self.available(mask)
        in_scope = available[self.scope]
        slots = np.zeros(len(self.size), dtype=np.int64)
        for s in np.unique(self.size):
            if s > 0:
                slots[self.size == s] = np.floor_divide(in_scope, s).sum()
        # A member in the mask cannot count its own GPUs: take them back out, node by node.
        rows = mask[self.member]
        m, pos, gpus = self.member[rows], self.pos[rows], self.gpus[rows]
        s = np.maximum(self.size[m], 1)
        loss = np.floor_divide(available[pos], s) - np.floor_divide(available[pos] - gpus, s)
        np.subtract.at(slots, m, loss)
        return (slots >= self.missing) | (self.size <= 0)

    def holders_by_node(self, mask: np.ndarray) -> list[list[int]]:
        rows = mask[self.member]
        by_node: dict[int, list[int]] = {}
        for m, pos in zip(self.member[rows].tolist(), self.pos[rows].tolist(), strict=True):
            by_node.setdefault(pos, []).append(m)
        return list(by_node.values())

    def helpers(self, members: np.ndarray, mask: np.ndarray) -> list[int]:
        """The members in ``mask`` holding GPUs on a node where one of ``members`` would find
        room for a pod with the GPUs of the others in ``mask``."""
        available = self.available(mask)
        rows = mask[self.member]
        m, pos, gpus = self.member[rows], self.pos[rows], self.gpus[rows]
        found: set[int] = set()
        for needy in members.tolist():
            own = np.zeros(len(available), dtype=np.int64)
            mine = m == needy
            own[pos[mine]] = gpus[mine]
            room = (available - own)[pos] >= self.size[needy]
            found.update(m[room & ~mine].tolist())
        return sorted(found)


class _Parts:
    """Union-find over member numbers."""

    def __init__(self, count: int) -> None:
        self.parent = list(range(count))

    def root(self, i: int) -> int:
        while self.parent[i] != i:
            self.parent[i] = self.parent[self.parent[i]]
            i = self.parent[i]
        return i

    def join(self, members: list[int]) -> None:
        for other in members[1:]:
            self.parent[self.root(other)] = self.root(members[0])

    def of(self, mask: np.ndarray) -> list[list[int]]:
        parts: dict[int, list[int]] = {}
        for i in np.flatnonzero(mask).tolist():
            parts.setdefault(self.root(i), []).append(i)
        return list(parts.values())
