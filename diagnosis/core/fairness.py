"""Tenant fairness maths (docs/fairness.md): the manager's report, as a pure core.

Two halves, both free of Django and I/O (docs/fairness.md has the definitions with examples):

**One cycle** (:func:`cycle_rollup`). From a snapshot and its GPU-hour accounting, the figures of
each tenant and each pool over the interval the cycle stands for (GPU-seconds): allocated, used
(util-weighted), demanded, the tenant's demand-aware fair GPU-seconds, its entitlement, the
accounting buckets, MFU-weighted productive GPU-seconds, starving jobs and preemptions. The
fair share is water-filled per cycle, because what a tenant could have been given depends on
what the others asked for *at that time*: capacity nobody asked for in the night cannot be
handed to a tenant that asked only in the day.

**One period** (:func:`fairness_report`). From the sums of those rollups over the period, the
waits of the jobs that started in it or still wait at its end, and the starvation findings of
the period:

- entitlement ``e_t`` = time-averaged share of ``deserved_gpus`` (weights when no deserved is
  set for some tenant with demand);
- usage ``u_t`` = allocated GPU-seconds ÷ usable GPU-seconds (usable: ready node, healthy GPU);
- fair share ``f_t`` = fair GPU-seconds ÷ usable GPU-seconds, where each cycle's fair GPUs come
  from max-min water-filling of the usable GPUs over tenants, weighted by entitlement, each
  capped at its demand (:func:`water_fill`); ``sum f_t <= 1``;
- ratio ``r_t = u_t / f_t`` (None when ``f_t`` is 0);
- Jain's index ``(sum r)^2 / (n sum r^2)`` over tenants with demand (:func:`jain_index`);
- DRF dominant share where CPU and memory are known (:func:`dominant_shares`);
- waits p50/p95 by job size class (:data:`SIZE_CLASSES`, :func:`wait_stats`), of the jobs
  that started and those still waiting at the period's end (their wait so far);
- efficiency: util and MFU of its GPU-seconds, idle GPU-hours held.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from diagnosis.core.accounting import HELD_BUCKETS, NO_TENANT, Breakdown
from diagnosis.core.numbers import json_number as json_number  # re-exported
from diagnosis.core.queue_hierarchy import TreeNode, fairness_tree, fill_queues
from diagnosis.core.queue_hierarchy import job_queue_names as job_queue_names  # re-exported
from diagnosis.core.queue_hierarchy import queue_tree as queue_tree  # re-exported
from diagnosis.core.rules.facts import SnapshotFacts
from diagnosis.core.water_fill import tree_water_fill as tree_water_fill  # re-exported
from diagnosis.core.water_fill import water_fill

if TYPE_CHECKING:
    from diagnosis.core.accounting import Accounting
    from diagnosis.core.rules.base import Finding
    from diagnosis.core.snapshot import ClusterSnapshot

_EPS = 1e-9

# Job size classes by the GPUs a job asks for in total (pods × gpus_per_pod); jobs that ask for
# no GPU are in no class.
SIZE_CLASSES: tuple[str, ...] = ("1", "2-8", "9-64", ">64")
WAIT_PERCENTILES = (50, 95)


def size_class(gpus: int) -> str | None:
    """The size class of a job asking for ``gpus`` GPUs in total (None for 0)."""
    if gpus <= 0:
        return None
    if gpus == 1:
        return "1"
    if gpus <= 8:
        return "2-8"
    if gpus <= 64:
        return "9-64"
    return ">64"


def snapshot_tree(snapshot: ClusterSnapshot) -> tuple[TreeNode, ...]:
    """The hierarchy of the snapshot's queues with each node's share at that moment (what the
    fairness report shows under its tenants); empty when the scheduler reports no hierarchy."""
    if not queue_tree(snapshot.scheduler)[0]:
        return ()
    from_facts = SnapshotFacts(snapshot)
    tenant_of = job_tenants(snapshot)
    usable = float(from_facts.gpu_state["usable"].sum())
    fill = fill_queues(
        snapshot,
        job_demand_gpus(snapshot, from_facts),
        from_facts.job_held_gpus,
        tenant_of,
        usable,
    )
    if fill is None:
        return ()
    listed = snapshot.queues["tenant"].to_dict()
    tenants = {str(k): None if pd.isna(v) else str(v) for k, v in listed.items()}
    return fairness_tree(fill, tenants)


# -- indices -------------------------------------------------------------------------------------


def jain_index(values: Iterable[float | None]) -> float | None:
    """Jain's fairness index ``(sum x)^2 / (n * sum x^2)`` of the known values: 1 when all are
    equal, 1/n when one has everything; None when there is no value or all are 0."""
    xs = np.asarray([v for v in values if v is not None and math.isfinite(v)], dtype=float)
    if len(xs) == 0 or not np.any(xs > 0):
        return None
    xs = xs / np.max(np.abs(xs))  # the index does not depend on scale; this keeps x^2 finite
    return float(np.sum(xs)) ** 2 / (len(xs) * float(np.sum(xs * xs)))


@dataclass(frozen=True)
class DominantShare:
    share: float
    resource: str


def dominant_shares(
    usage: Mapping[str, Mapping[str, float]], capacity: Mapping[str, float]
) -> dict[str, DominantShare]:
    """Dominant Resource Fairness: each tenant's largest share of any resource it uses
    (``usage[tenant][resource] / capacity[resource]``), over the resources with a capacity.
    Ties go to the resource named first in ``capacity``."""
    out: dict[str, DominantShare] = {}
    for tenant, used in usage.items():
        best = DominantShare(0.0, next(iter(capacity), ""))
        for resource, total in capacity.items():
            if total > 0 and resource in used and used[resource] / total > best.share + _EPS:
                best = DominantShare(float(used[resource]) / total, resource)
        out[tenant] = best
    return out


@dataclass(frozen=True)
class WaitStats:
    """``jobs`` counted: those that started in the period (start - submission) and those still
    waiting at its end (their wait so far, ``waiting`` of them): a tenant whose jobs never start
    must not show the best waits (docs/fairness.md "Waits")."""

    jobs: int
    p50_s: float | None
    p95_s: float | None
    waiting: int = 0

    @property
    def started(self) -> int:
        return self.jobs - self.waiting

    def as_dict(self) -> dict[str, Any]:
        return {
            "jobs": self.jobs,
            "jobs_started": self.started,
            "jobs_waiting": self.waiting,
            "p50_s": json_number(self.p50_s),
            "p95_s": json_number(self.p95_s),
        }


def percentiles(values: Sequence[float] | np.ndarray) -> tuple[float | None, float | None]:
    """p50 and p95 by linear interpolation between the closest ranks (numpy's default)."""
    array = np.asarray(values, dtype=float)
    if len(array) == 0:
        return None, None
    p50, p95 = np.percentile(array, WAIT_PERCENTILES)
    return float(p50), float(p95)


def wait_stats(
    gpus: Sequence[int] | np.ndarray,
    waits_s: Sequence[float] | np.ndarray,
    waiting: Sequence[bool] | np.ndarray | None = None,
):
    """Wait statistics: overall and per size class.

    ``gpus[i]`` is what job i asked for in total, ``waits_s[i]`` how long it waited (start -
    submission, or its wait so far where ``waiting[i]``: it had not started by the period's
    end). Returns ``(overall, {class: WaitStats})`` with every class present.
    """
    gpus = np.asarray(gpus, dtype=np.int64)
    waits = np.asarray(waits_s, dtype=float)
    still = np.zeros(len(waits), dtype=bool) if waiting is None else np.asarray(waiting, bool)
    classes = _size_class_codes(gpus)

    def stats(chosen: np.ndarray) -> WaitStats:
        return WaitStats(int(chosen.sum()), *percentiles(waits[chosen]), int(still[chosen].sum()))

    by_class = {name: stats(classes == code) for code, name in enumerate(SIZE_CLASSES)}
    return stats(classes >= 0), by_class


def _size_class_codes(gpus: np.ndarray) -> np.ndarray:
    """Index into SIZE_CLASSES per job (-1: asks for no GPU)."""
    return np.select([gpus <= 0, gpus == 1, gpus <= 8, gpus <= 64], [-1, 0, 1, 2], default=3)


# -- one cycle -----------------------------------------------------------------------------------


@dataclass
class HeldFigures:
    """GPU-seconds of one scope in one interval (the columns tenant and pool rollups share)."""

    allocated_gpu_s: float = 0.0
    demanded_gpu_s: float = 0.0
    used_gpu_s: float = 0.0  # sum of util.mean over GPUs with a reading, × seconds
    util_known_gpu_s: float = 0.0  # GPUs with a util reading × seconds
    unavailable_gpu_s: float = 0.0
    partial_gang_gpu_s: float = 0.0
    hung_gpu_s: float = 0.0
    idle_gpu_s: float = 0.0
    data_starved_gpu_s: float = 0.0
    busy_gpu_s: float = 0.0
    productive_gpu_s: float = 0.0  # MFU-weighted allocated-busy GPU-seconds, where known
    mfu_known_gpu_s: float = 0.0  # allocated-busy GPU-seconds whose MFU is known
    starving_job_s: float = 0.0  # jobs with a starvation finding this cycle × seconds
    preemptions: int = 0  # preemptions its jobs suffered since the previous cycle

    def held_figures(self) -> dict[str, Any]:
        """The shared columns only (those of :class:`HeldFigures`)."""
        return {f.name: getattr(self, f.name) for f in fields(HeldFigures)}


@dataclass
class TenantCycle(HeldFigures):
    tenant: str = NO_TENANT
    listed: bool = False  # one of its queues is in the snapshot
    entitlement: float = 0.0  # share of the entitlement of all tenants, 0..1
    fair_gpu_s: float = 0.0


@dataclass
class PoolCycle(HeldFigures):
    pool: str = ""  # "" = the whole cluster
    gpu_s: float = 0.0
    free_fragmented_gpu_s: float = 0.0
    free_demand_gpu_s: float = 0.0
    free_no_demand_gpu_s: float = 0.0


@dataclass(frozen=True)
class CycleRollup:
    interval_s: float
    entitlement_basis: str  # "deserved" or "weight"
    usable_gpus: int
    tenants: Mapping[str, TenantCycle]
    pools: Mapping[str, PoolCycle]  # "" is the whole cluster


# accounting bucket -> the rollup column holding its GPU-seconds
BUCKET_COLUMNS: dict[str, str] = {
    "unavailable": "unavailable_gpu_s",
    "held-by-partial-gang": "partial_gang_gpu_s",
    "allocated-hung": "hung_gpu_s",
    "allocated-idle": "idle_gpu_s",
    "allocated-data-starved": "data_starved_gpu_s",
    "allocated-busy": "busy_gpu_s",
    "free-fragmented": "free_fragmented_gpu_s",
    "free-demand": "free_demand_gpu_s",
    "free-no-demand": "free_no_demand_gpu_s",
}


def _fill_from_breakdown(target: HeldFigures, breakdown: Breakdown, seconds: float) -> None:
    target.allocated_gpu_s = breakdown.allocated_gpus * seconds
    target.used_gpu_s = breakdown.util_sum * seconds
    target.util_known_gpu_s = breakdown.util_gpus * seconds
    target.productive_gpu_s = breakdown.productive_gpus * seconds
    target.mfu_known_gpu_s = breakdown.mfu_known_gpus * seconds
    for bucket, column in BUCKET_COLUMNS.items():
        if hasattr(target, column):
            setattr(target, column, breakdown.buckets.get(bucket, 0) * seconds)


def job_tenants(snapshot: ClusterSnapshot) -> pd.Series:
    """Each job's tenant as the accounting has it: its own, else its queue's, else
    ``(no tenant)``; indexed by job id."""
    jobs = snapshot.jobs
    tenant = jobs["tenant"].astype(object)
    tenant = tenant.where(tenant.notna(), jobs["queue"].map(snapshot.queues["tenant"]))
    return tenant.astype(object).where(tenant.notna(), NO_TENANT)


def job_demand_gpus(snapshot: ClusterSnapshot, facts: SnapshotFacts) -> pd.Series:
    """GPUs each job demands now: what its running or pending job holds plus what a pending job
    still asks for (0 for ended jobs); indexed by job id."""
    jobs = snapshot.jobs
    held = facts.job_held_gpus.reindex(jobs.index, fill_value=0).to_numpy()
    request = facts.job_requests.reindex(jobs.index, fill_value=0).to_numpy()
    state = jobs["state"].to_numpy(dtype=object)
    live = (state == "running") | (state == "pending")
    asked = np.where(state == "pending", np.maximum(request - held, 0), 0)
    return pd.Series(np.where(live, held + asked, 0), index=jobs.index, dtype=np.int64)


def tenant_entitlements(
    snapshot: ClusterSnapshot, demand: Mapping[str, float]
) -> tuple[str, dict[str, float]]:
    """``(basis, entitlement per tenant)``: the sum of its queues' ``deserved_gpus`` when every
    tenant with demand has some (basis ``deserved``), else the sum of its queues' weights (basis
    ``weight``; a tenant with demand but no listed queue counts weight 1, as a scheduler's
    default queue). Covers every listed tenant and every tenant with demand."""
    queues = snapshot.queues
    deserved = queues.groupby("tenant", sort=True)["deserved_gpus"].sum(min_count=1)
    weights = queues.groupby("tenant", sort=True)["weight"].sum()
    names = sorted(set(queues["tenant"].astype(str)) | {t for t, d in demand.items() if d > 0})
    wanting = [t for t in names if demand.get(t, 0) > 0]
    has_deserved = {t for t in names if t in deserved.index and deserved[t] > 0}
    basis = "deserved" if all(t in has_deserved for t in (wanting or names)) and names else "weight"
    if basis == "deserved":
        return basis, {t: float(deserved[t]) if t in has_deserved else 0.0 for t in names}
    return basis, {t: float(weights[t]) if t in weights.index else 1.0 for t in names}


def cycle_rollup(
    snapshot: ClusterSnapshot,
    accounting: Accounting,
    facts: SnapshotFacts,
    findings: Iterable[Finding],
    *,
    interval_s: float,
    preemptions: Mapping[str, int] | None = None,
) -> CycleRollup:
    """Per-tenant and per-pool figures of one cycle over ``interval_s`` seconds.

    ``preemptions``: job id -> preemptions it suffered since the previous cycle (the job records
    know; a job seen for the first time brings its whole count).
    """
    seconds = float(interval_s)
    jobs = snapshot.jobs
    tenant_of = job_tenants(snapshot)
    demand_gpus = job_demand_gpus(snapshot, facts)
    demand_by_tenant = demand_gpus.groupby(tenant_of.to_numpy(), sort=True).sum()
    demand = {str(t): float(v) for t, v in demand_by_tenant.items()}

    basis, entitled = tenant_entitlements(snapshot, demand)
    usable = int(facts.gpu_state["usable"].sum())
    through_tree = fill_queues(snapshot, demand_gpus, facts.job_held_gpus, tenant_of, usable)
    if through_tree is not None:  # Volcano/KAI parent queues, Kueue cohorts: down the tree
        fair = through_tree.tenant_fair()
    else:
        fair = water_fill(usable, entitled, demand)
    total_entitlement = sum(entitled.values())
    listed = set(snapshot.queues["tenant"].astype(str))

    starving = pd.Index(
        [f.subject[4:] for f in findings if f.rule == "starvation" and f.subject[:4] == "job:"]
    ).intersection(jobs.index)
    preempted = pd.Series(preemptions or {}, dtype=np.int64)
    preempted = preempted[preempted.index.isin(jobs.index) & (preempted > 0)]
    job_pool = jobs["pool"].astype(object)

    tenants: dict[str, TenantCycle] = {}
    names = sorted(set(entitled) | set(demand) | {t for t in accounting.tenants if t is not None})
    for name in names:
        row = TenantCycle(tenant=name, listed=name in listed)
        breakdown = accounting.tenants.get(name)
        if breakdown is not None:
            _fill_from_breakdown(row, breakdown, seconds)
        row.demanded_gpu_s = demand.get(name, 0.0) * seconds
        row.fair_gpu_s = fair.get(name, 0.0) * seconds
        if total_entitlement > 0:
            row.entitlement = entitled.get(name, 0.0) / total_entitlement
        tenants[name] = row
    for name, count in _count_by(tenant_of, starving).items():
        tenants[str(name)].starving_job_s += count * seconds
    for name, count in _count_by(tenant_of, preempted.index, preempted).items():
        tenants[str(name)].preemptions += int(count)

    pools: dict[str, PoolCycle] = {"": PoolCycle(pool="")}
    _fill_from_breakdown(pools[""], accounting.cluster, seconds)
    pools[""].gpu_s = accounting.cluster.gpus * seconds
    for pool, breakdown in accounting.pools.items():
        row = PoolCycle(pool=str(pool), gpu_s=breakdown.gpus * seconds)
        _fill_from_breakdown(row, breakdown, seconds)
        pools[str(pool)] = row
    pool_demand = demand_gpus.groupby(job_pool.fillna("").to_numpy(), sort=True).sum()
    for pool, value in pool_demand.items():
        if pool in pools and pool != "":
            pools[pool].demanded_gpu_s = float(value) * seconds
    pools[""].demanded_gpu_s = float(demand_gpus.sum()) * seconds
    pools[""].starving_job_s = len(starving) * seconds
    pools[""].preemptions = int(preempted.sum())
    for pool, count in _count_by(job_pool, starving).items():
        if pool in pools and pool != "":
            pools[pool].starving_job_s = count * seconds
    for pool, count in _count_by(job_pool, preempted.index, preempted).items():
        if pool in pools and pool != "":
            pools[pool].preemptions = int(count)
    return CycleRollup(
        interval_s=seconds,
        entitlement_basis=basis,
        usable_gpus=usable,
        tenants=tenants,
        pools=pools,
    )


def _count_by(
    label: pd.Series, jobs: pd.Index, weights: pd.Series | None = None
) -> dict[Any, float]:
    """How many of ``jobs`` (or the sum of their ``weights``) each ``label`` value has; jobs
    whose label is missing are left out."""
    if len(jobs) == 0:
        return {}
    labels = label.reindex(jobs).to_numpy(dtype=object)
    values = np.ones(len(jobs)) if weights is None else weights.reindex(jobs).to_numpy(float)
    keep = pd.notna(labels)
    return pd.Series(values[keep]).groupby(labels[keep]).sum().to_dict()


# -- one period ----------------------------------------------------------------------------------

# The rollup columns a period sums per tenant (TenantCycle's numbers, entitlement × seconds).
TENANT_SUMS: tuple[str, ...] = (
    *(f.name for f in fields(HeldFigures)),
    "fair_gpu_s",
    "entitlement_s",
)
CLUSTER_SUMS: tuple[str, ...] = (
    *(f.name for f in fields(HeldFigures)),
    "gpu_s",
    "free_fragmented_gpu_s",
    "free_demand_gpu_s",
    "free_no_demand_gpu_s",
    "interval_s",
)
# The held buckets of a tenant, in docs/accounting.md bucket order.
TENANT_BUCKETS: tuple[str, ...] = HELD_BUCKETS


@dataclass(frozen=True)
class TenantRow:
    """One tenant's line of the report. Shares are fractions of the period's usable
    GPU-seconds; GPU-hours are hours of one GPU."""

    tenant: str
    entitlement: float
    fair_share: float | None
    usage: float | None
    ratio: float | None
    demand_gpu_hours: float
    demand_share: float | None
    allocated_gpu_hours: float
    fair_gpu_hours: float
    wait: WaitStats
    waits: Mapping[str, WaitStats]
    starvation_findings: int
    starving_job_hours: float
    preemptions: int
    util: float | None
    mfu: float | None
    mfu_weighted_gpu_hours: float  # busy GPU-hours x MFU (the "productive" of docs/accounting.md)
    held_idle_gpu_hours: float  # allocated-idle + held by partial gangs
    buckets: Mapping[str, float]  # TENANT_BUCKETS -> GPU-hours
    dominant_share: float | None = None
    dominant_resource: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "tenant": self.tenant,
            "entitlement": json_number(self.entitlement),
            "fair_share": json_number(self.fair_share),
            "usage": json_number(self.usage),
            "ratio": json_number(self.ratio),
            "demand": json_number(self.demand_gpu_hours),
            "demand_share": json_number(self.demand_share),
            "allocated_gpu_hours": json_number(self.allocated_gpu_hours),
            "fair_gpu_hours": json_number(self.fair_gpu_hours),
            "jobs_started": self.wait.started,
            "jobs_waiting": self.wait.waiting,
            "wait_p50_s": json_number(self.wait.p50_s),
            "wait_p95_s": json_number(self.wait.p95_s),
            "waits": {name: stats.as_dict() for name, stats in self.waits.items()},
            "starvation_findings": self.starvation_findings,
            "starving_job_hours": json_number(self.starving_job_hours),
            "preemptions": self.preemptions,
            "util": json_number(self.util),
            "mfu": json_number(self.mfu),
            "mfu_weighted_gpu_hours": json_number(self.mfu_weighted_gpu_hours),
            "held_idle_gpu_hours": json_number(self.held_idle_gpu_hours),
            "gpu_hours": {name: json_number(v) for name, v in self.buckets.items()},
            "dominant_share": json_number(self.dominant_share),
            "dominant_resource": self.dominant_resource,
        }


@dataclass(frozen=True)
class FairnessReport:
    covered_s: float
    capacity_gpu_hours: float
    usable_gpu_hours: float
    jain_index: float | None
    tenants: tuple[TenantRow, ...]
    waits: Mapping[str, WaitStats] = field(default_factory=dict)  # of the rows' jobs together
    wait: WaitStats = WaitStats(0, None, None)

    def tenant(self, name: str) -> TenantRow:
        return next(row for row in self.tenants if row.tenant == name)


def _ratio(numerator: float, denominator: float) -> float | None:
    return numerator / denominator if denominator > _EPS else None


def fairness_report(
    tenant_sums: Mapping[str, Mapping[str, float]],
    cluster_sums: Mapping[str, float],
    *,
    waits: Mapping[str, tuple[Sequence[Any], ...]] | None = None,
    starvation_findings: Mapping[str, int] | None = None,
    resources: Mapping[str, Mapping[str, float]] | None = None,
    resource_capacity: Mapping[str, float] | None = None,
    visible: Collection[str] | None = None,
) -> FairnessReport:
    """The report of one period from its sums.

    ``tenant_sums[t]`` sums :data:`TENANT_SUMS` over the period's rollups; ``cluster_sums`` sums
    :data:`CLUSTER_SUMS` of the whole-cluster rollups. ``waits[t]`` = (GPUs asked, wait seconds,
    still waiting; optional, all started without it) of its jobs that started in the period or
    were still waiting at its end (:func:`wait_stats`); ``starvation_findings[t]`` its distinct
    starvation findings active in it. ``resources``/``resource_capacity``: resource-seconds used
    per tenant and available (``gpu``, ``cpu``, ``memory``); the dominant share is reported only
    when a resource besides GPUs is known.
    """
    waits = waits or {}
    starvation_findings = starvation_findings or {}
    covered = float(cluster_sums.get("interval_s") or 0.0)
    capacity = float(cluster_sums.get("gpu_s") or 0.0)
    usable = capacity - float(cluster_sums.get("unavailable_gpu_s") or 0.0)
    drf = {}
    if resources and resource_capacity and set(resource_capacity) - {"gpu"}:
        drf = dominant_shares(resources, resource_capacity)
    rows = []
    all_gpus: list[np.ndarray] = []
    all_waits: list[np.ndarray] = []
    all_waiting: list[np.ndarray] = []
    for name in sorted(tenant_sums):
        sums = tenant_sums[name]
        allocated = float(sums.get("allocated_gpu_s") or 0.0)
        fair = float(sums.get("fair_gpu_s") or 0.0)
        demanded = float(sums.get("demanded_gpu_s") or 0.0)
        gpus, seconds, *flags = waits.get(name, ((), ()))
        waiting = np.asarray(flags[0] if flags else np.zeros(len(seconds)), dtype=bool)
        all_gpus.append(np.asarray(gpus, dtype=np.int64))
        all_waits.append(np.asarray(seconds, dtype=float))
        all_waiting.append(waiting)
        overall, by_class = wait_stats(gpus, seconds, waiting)
        dominant = drf.get(name)
        rows.append(
            TenantRow(
                tenant=name,
                entitlement=float(sums.get("entitlement_s") or 0.0) / covered if covered else 0.0,
                fair_share=_ratio(fair, usable),
                usage=_ratio(allocated, usable),
                ratio=_ratio(allocated, fair),
                demand_gpu_hours=demanded / 3600,
                demand_share=_ratio(demanded, usable),
                allocated_gpu_hours=allocated / 3600,
                fair_gpu_hours=fair / 3600,
                wait=overall,
                waits=by_class,
                starvation_findings=int(starvation_findings.get(name, 0)),
                starving_job_hours=float(sums.get("starving_job_s") or 0) / 3600,
                preemptions=int(sums.get("preemptions") or 0),
                util=_ratio(
                    float(sums.get("used_gpu_s") or 0), float(sums.get("util_known_gpu_s") or 0)
                ),
                mfu=_ratio(
                    float(sums.get("productive_gpu_s") or 0),
                    float(sums.get("mfu_known_gpu_s") or 0),
                ),
                mfu_weighted_gpu_hours=float(sums.get("productive_gpu_s") or 0) / 3600,
                held_idle_gpu_hours=(
                    float(sums.get("idle_gpu_s") or 0) + float(sums.get("partial_gang_gpu_s") or 0)
                )
                / 3600,
                buckets={
                    bucket: float(sums.get(BUCKET_COLUMNS[bucket]) or 0) / 3600
                    for bucket in TENANT_BUCKETS
                },
                dominant_share=dominant.share if dominant else None,
                dominant_resource=dominant.resource if dominant else None,
            )
        )
    with_demand = [r.ratio for r in rows if r.demand_gpu_hours > 0 and r.ratio is not None]
    shown = [i for i, r in enumerate(rows) if visible is None or r.tenant in visible]
    rows = [rows[i] for i in shown]
    gpus_all = np.concatenate([all_gpus[i] for i in shown] or [np.zeros(0, dtype=np.int64)])
    waits_all = np.concatenate([all_waits[i] for i in shown] or [np.zeros(0)])
    waiting_all = np.concatenate([all_waiting[i] for i in shown] or [np.zeros(0, dtype=bool)])
    overall, by_class = wait_stats(gpus_all, waits_all, waiting_all)
    return FairnessReport(
        covered_s=covered,
        capacity_gpu_hours=capacity / 3600,
        usable_gpu_hours=usable / 3600,
        jain_index=jain_index(with_demand),
        tenants=tuple(rows),
        waits=by_class,
        wait=overall,
    )


def finding_tenant(finding: Finding, tenant_of_job: Mapping[str, Any] | pd.Series) -> str | None:
    """The one tenant a finding concerns, or None when it concerns none or several.

    ``tenant:<t>`` is t's; ``job:<id>`` is its job's tenant; ``jobs:<a>+<b>`` is the tenant of
    its jobs when they all have the same one; ``gpu:`` (an Xid) is the tenant of the jobs on the
    GPU when there is exactly one. ``pool:``, ``node:`` and ``cluster:`` findings concern every
    tenant of the place and belong to none. Jobs of no tenant belong to none.
    """
    subject = finding.subject
    kind, _, rest = subject.partition(":")
    if kind == "tenant":
        return rest or None
    if kind == "job":
        names = {tenant_of_job.get(rest)}
    elif kind == "jobs":
        names = {tenant_of_job.get(job_id) for job_id in rest.split("+")}
    elif kind == "gpu":
        listed = [j for j in finding.evidence.get("jobs") or () if isinstance(j, Mapping)]
        names = {tenant_of_job.get(j.get("id")) or j.get("tenant") for j in listed}
    else:
        return None
    if len(names) != 1:
        return None
    return _tenant_name(names.pop())


def _tenant_name(name: Any) -> str | None:
    return str(name) if isinstance(name, str) and name and name != NO_TENANT else None


def finding_tenants(
    findings: Iterable[Finding], tenant_of_job: Mapping[str, Any]
) -> list[str | None]:
    """:func:`finding_tenant` of each finding, a ``job:`` one's read here at once (most of a big
    cluster's: ~93,000 of ~103,000 at 131,072 GPUs, #35)."""
    of_job = tenant_of_job.get
    tenants: list[str | None] = []
    for finding in findings:
        kind, _, rest = finding.subject.partition(":")
        if kind == "job":
            tenants.append(_tenant_name(of_job(rest)))
        else:
            tenants.append(finding_tenant(finding, tenant_of_job))
    return tenants
