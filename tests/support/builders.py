"""Snapshot builders for tests: a cluster, its jobs and their metrics in a few lines.

    snap = (
        SnapshotBuilder()
        .pool("a100", nodes=4, gpus=8)
        .job("j1", gpus_per_pod=8, node="a100-000", util=0.9)
        .job("j2", state="pending", pods=2, gpus_per_pod=8, waited="2h")
        .build()
    )

Times are relative to ``as_of`` (default 2026-11-29T08:00:00Z): ``waited="2h"`` means submitted
two hours before ``as_of``; ``ran="45m"`` means started 45 minutes before it. Everything goes
through :func:`diagnosis.core.snapshot.load`, so a builder never makes a snapshot the loader
rejects. (Rows in the database that a test sets up directly: tests/support/records.py.)
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

from diagnosis.core import snapshot as snapshot_format
from diagnosis.edge.sim import runtime as sim_runtime

# The built-in rules (diagnosis/core/rules/builtin/), as tests expect the registry to hold them.
BUILTIN_RULE_IDS = (
    "fragmentation",
    "starvation",
    "gang-deadlock",
    "gang-partial-hold",
    "idle-allocation",
    "data-starvation",
    "low-mfu",
    "topology-misplacement",
    "xid",
    "hung-collective",
    "idle-held",
    "thermal-throttling",
    "power-throttling",
    "ecc-row-remap",
    "idle-quota",
    "preemption-thrash",
)

AS_OF = datetime(2026, 11, 29, 8, 0, 0, tzinfo=UTC)
# Metrics whose one statistic is ``max`` (the rest take ``mean`` unless said otherwise).
_MAX_STAT_METRICS = frozenset({"temp_c", "power_limit_w", "max_sm_clock_mhz"})
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def seconds(duration: str | float | int) -> float:
    """``"90s"``, ``"15m"``, ``"4h"``, ``"2d"`` or a number of seconds."""
    if isinstance(duration, int | float):
        return float(duration)
    match = re.fullmatch(r"\s*([\d.]+)\s*([smhd])\s*", duration)
    if not match:
        raise ValueError(f"bad duration {duration!r}")
    return float(match.group(1)) * _UNITS[match.group(2)]


def rfc3339(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class SnapshotBuilder:
    def __init__(self, *, as_of: datetime = AS_OF, window_s: int = 900, cluster: str = "test"):
        self.as_of = as_of
        self.doc: dict[str, Any] = {
            "format": snapshot_format.FORMAT,
            "cluster": cluster,
            "as_of": rfc3339(as_of),
            "window_s": window_s,
            "scheduler": {"kind": "sim", "placement": {}},
            "nodes": [],
            "gpus": [],
            "queues": [],
            "jobs": [],
            "events": [],
        }
        self._gpu_entries: dict[tuple[str, int], dict[str, Any]] = {}
        self._next_free: dict[str, int] = {}

    # -- time ------------------------------------------------------------------------------------

    def ago(self, duration: str | float | int) -> str:
        return rfc3339(self.as_of - timedelta(seconds=seconds(duration)))

    # -- inventory -------------------------------------------------------------------------------

    def node(
        self,
        name: str,
        *,
        pool: str = "a100",
        gpus: int = 8,
        gpu_model: str = "A100-SXM4-80GB",
        state: str = "ready",
        cpu_util: float | None = None,
        nvlink_domains: list[list[int]] | None = None,
        numa: list[int | None] | None = None,
        clique: str | None = None,
    ) -> SnapshotBuilder:
        """``clique``: every GPU of the node reports that multi-node NVLink clique id."""
        node: dict[str, Any] = {
            "name": name,
            "pool": pool,
            "gpu_model": gpu_model,
            "gpus": gpus,
            "state": state,
        }
        if cpu_util is not None:
            node["cpu_util"] = cpu_util
        topology: dict[str, Any] = {}
        if nvlink_domains is not None:
            topology["nvlink_domains"] = nvlink_domains
        if numa is not None:
            topology["numa"] = numa
        if topology:
            node["topology"] = topology
        self.doc["nodes"].append(node)
        self._next_free[name] = 0
        if clique is not None:
            for index in range(gpus):
                self.gpu(name, index, nvlink_clique=clique)
        return self

    def pool(
        self, pool: str, *, nodes: int, gpus: int = 8, nvlink: bool = True, **node_fields: Any
    ) -> SnapshotBuilder:
        """``nodes`` nodes named ``<pool>-000``... with one NVLink domain each (if ``nvlink``)."""
        for i in range(nodes):
            domains = [list(range(gpus))] if nvlink and gpus else None
            self.node(
                f"{pool}-{i:03d}", pool=pool, gpus=gpus, nvlink_domains=domains, **node_fields
            )
        return self

    def queue(self, name: str, *, tenant: str | None = None, **fields: Any) -> SnapshotBuilder:
        self.doc["queues"].append({"name": name, "tenant": tenant or name, **fields})
        return self

    def placement(self, pool: str, policy: str) -> SnapshotBuilder:
        self.doc["scheduler"]["placement"][pool] = policy
        return self

    # -- metrics ---------------------------------------------------------------------------------

    def gpu(self, node: str, index: int, **metrics: Any) -> SnapshotBuilder:
        """Set metrics of one GPU: ``util=0.9`` (mean, and p10/p90 equal to it unless given as
        ``util_p10``/``util_p90``), ``tensor_active=0.4``, ``fb_used_frac=0.7``, ``health=...``,
        ``xid=[(79, "5m")]`` (code, how long before as_of); the hardware-health fields
        ``power_w=250``, ``dram_active=0.01``, ``power_limit_w=400`` and ``max_sm_clock_mhz=1410``
        (as ``max``), ``sm_clock_mhz=1100``, ``throttle_thermal=0.3`` / ``throttle_power=0.3``
        (as ``frac``), ``row_remap={"pending": 1, "failure": 0, "uncorrectable": 2}``."""
        entry = self._gpu_entries.get((node, index))
        if entry is None:
            entry = {"node": node, "index": index}
            self._gpu_entries[(node, index)] = entry
            self.doc["gpus"].append(entry)
        self._set_metrics(entry, metrics)
        return self

    def _set_metrics(self, entry: dict[str, Any], metrics: dict[str, Any]) -> None:
        for key, value in metrics.items():
            if key in ("health", "uuid", "nvlink_clique", "index_guessed", "gpu_model"):
                entry[key] = value
            elif key == "xid":
                entry["xid"] = [{"code": c, "time": self.ago(t)} for c, t in value]
            elif key in ("util_p10", "util_p90"):
                entry.setdefault("util", {})[key.split("_")[1]] = value
            elif key == "util":
                stats = entry.setdefault("util", {})
                stats["mean"] = value
                stats.setdefault("p10", value)
                stats.setdefault("p90", value)
            elif key in _MAX_STAT_METRICS:
                entry[key] = {"max": value}
            elif key in ("throttle_thermal", "throttle_power"):
                entry[key] = {"frac": value}
            elif key == "row_remap":
                entry["row_remap"] = dict(value)
            else:
                entry[key] = {"mean": value}

    def mig(
        self,
        node: str,
        index: int,
        instance: int,
        *,
        profile: str = "1g.10gb",
        uuid: str | None = None,
        parent_uuid: str | None = None,
        compute_fraction: float | None = None,
        **metrics: Any,
    ) -> SnapshotBuilder:
        """One MIG instance (``GPU_I_ID`` ``instance``) of GPU ``node``/``index``, with its own
        metrics (as :meth:`gpu`); its UUID defaults to ``MIG-<node>-<index>-<instance>``."""
        mig: dict[str, Any] = {"profile": profile, "instance": instance}
        if parent_uuid is not None:
            mig["parent_uuid"] = parent_uuid
        if compute_fraction is not None:
            mig["compute_fraction"] = compute_fraction
        entry = {
            "node": node,
            "index": index,
            "uuid": uuid or f"MIG-{node}-{index}-{instance}",
            "mig": mig,
        }
        self.doc["gpus"].append(entry)
        self._set_metrics(entry, metrics)
        return self

    # -- jobs ------------------------------------------------------------------------------------

    def job(
        self,
        job_id: str,
        *,
        state: str = "running",
        pods: int = 1,
        gpus_per_pod: int = 8,
        pool: str | None = "a100",
        tenant: str = "team-a",
        queue: str | None = None,
        kind: str = "training",
        priority: int = 0,
        waited: str | float = "1h",
        ran: str | float | None = None,
        gang: bool | None = None,
        min_member: int | None = None,
        allocation: list[tuple[str, list[int]]] | None = None,
        node: str | None = None,
        nodes: list[str] | None = None,
        bound: int | None = None,
        partial_since: str | float | None = None,
        tp: int | None = None,
        tflops: float | None = None,
        started: str | float | None = None,
        ended: str | float | None = None,
        uuids: list[list[str]] | None = None,
        share: float | None = None,
        **gpu_metrics: Any,
    ) -> SnapshotBuilder:
        """Add a job. A running job without an explicit ``allocation`` is bound on ``node`` (or
        ``nodes``, one pod each, cycling) to the lowest GPU indexes not yet taken there. ``bound``
        pods of a pending gang are bound the same way. ``gpu_metrics`` are applied to every GPU
        of the allocation (see :meth:`gpu`). ``started`` / ``ended`` (how long before ``as_of``)
        set those times for a job in any state, e.g. a completed job that overtook another.
        ``uuids`` (per pod) names the exact devices (MIG instances); ``share`` the fraction of
        each device every pod holds (time-sliced / fractional GPUs)."""
        gang = pods > 1 if gang is None else gang
        job: dict[str, Any] = {
            "id": job_id,
            "name": job_id,
            "tenant": tenant,
            "queue": queue or tenant,
            "pool": pool,
            "kind": kind,
            "priority": priority,
            "state": state,
            "submitted": self.ago(waited),
            "pods": pods,
            "gpus_per_pod": gpus_per_pod,
            "gang": gang,
            "min_member": min_member if min_member is not None else pods,
        }
        if state == "running":
            job["started"] = self.ago(ran if ran is not None else waited)
        if started is not None:
            job["started"] = self.ago(started)
        if ended is not None:
            job["ended"] = self.ago(ended)
        if partial_since is not None:
            job["partial_since"] = self.ago(partial_since)
        if tp is not None:
            job["parallelism"] = {"tp": tp}
        if tflops is not None:
            job["achieved_tflops_per_gpu"] = tflops
        if allocation is None:
            to_bind = bound if bound is not None else (pods if state == "running" else 0)
            targets = nodes or ([node] if node else [])
            if to_bind and not targets:
                raise ValueError(f"job {job_id}: say on which node(s) to bind it")
            allocation = [
                (targets[p % len(targets)], self._take(targets[p % len(targets)], gpus_per_pod))
                for p in range(to_bind)
            ]
        job["allocation"] = [{"node": n, "gpus": list(g)} for n, g in allocation]
        for p, pod in enumerate(job["allocation"]):
            if uuids is not None:
                pod["uuids"] = list(uuids[p])
            if share is not None:
                pod["share"] = share
        for n, indexes in allocation:
            for index in indexes:
                if gpu_metrics:
                    self.gpu(n, index, **gpu_metrics)
        self.doc["jobs"].append(job)
        return self

    def _take(self, node: str, count: int) -> list[int]:
        start = self._next_free[node]
        self._next_free[node] = start + count
        return list(range(start, start + count))

    def event(self, kind: str, *, ago: str | float = "1m", **fields: Any) -> SnapshotBuilder:
        self.doc["events"].append({"time": self.ago(ago), "kind": kind, **fields})
        return self

    # -- output ----------------------------------------------------------------------------------

    def document(self) -> dict[str, Any]:
        return copy.deepcopy(self.doc)

    def build(self) -> snapshot_format.ClusterSnapshot:
        return snapshot_format.load(self.document())


# A simulator adapter's scheduler_config: the small scenario, stepping 15 minutes a read from the
# builders' default as_of.
SIM_STEP_CONFIG: dict[str, Any] = {
    "scenario": "small",
    "seed": 1,
    "clock": "step",
    "step_s": 900,
    "started_at": "2026-11-29T08:00:00Z",
}


@contextmanager
def fresh_simulator(cluster: str) -> Iterator[None]:
    """No simulated cluster named ``cluster`` in this process when the block starts or ends."""
    sim_runtime.forget(cluster)
    try:
        yield
    finally:
        sim_runtime.forget(cluster)
