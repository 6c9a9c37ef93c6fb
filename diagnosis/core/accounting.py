"""GPU-hour accounting: where every GPU of a snapshot went (docs/accounting.md).

Every GPU lands in exactly one bucket, checked in this order:

``unavailable``             its node is not ``ready`` or the GPU is ``unhealthy`` (held or not)
``held-by-partial-gang``    held by a pending gang with ``0 < bound pods < min_member``
``allocated-hung``          held by a job with a ``hung-collective`` finding (util reads busy,
                            nothing computes: a hung NCCL collective)
``allocated-idle``          held by a job whose GPUs' mean ``util.mean`` < 0.05 (up to float
                            rounding; however long it has run)
``allocated-data-starved``  held by a job with a ``data-starvation`` finding
``allocated-busy``          held by any other job — including a job with no util reading at
                            all: no reading is not evidence of idleness (``activity_coverage``
                            says how much of the cluster had a reading)
``free-fragmented``         free, in a pool with fragmentation-blocked jobs (any wait), up to
                            their total request
``free-demand``             free while pending jobs that are placeable now exist in the pool
                            (scheduler lag), up to their demand: the request of placeable
                            pending jobs with no allocation plus the missing GPUs of partial
                            gangs whose missing pods fit on free GPUs
``free-no-demand``          every other free GPU

Pending jobs with a null pool may use every node: their demand is counted after each pool's own
demand, filling what is left in pool-name order. Within a pool the free GPUs on the emptiest
nodes (fewest free GPUs: the fragments) are labelled fragmented first; the counts per pool do not
depend on that choice, only which GPU carries which label.

A snapshot is one moment: a GPU's bucket is taken to hold for the whole window, so GPU-hours are
``GPUs × window_s / 3600``. Utilization is reported both ways:

- ``allocation_utilization`` = GPUs held by any job ÷ GPUs (every GPU, usable or not);
- ``activity_utilization`` = mean ``util.mean`` over the GPUs that have a reading (NaN readings
  are left out, not counted as 0), with ``activity_coverage`` = GPUs with a reading ÷ GPUs;
- ``productive_gpus`` = the sum over ``allocated-busy`` GPUs of their MFU where known:
  ``achieved_tflops_per_gpu / peak(model)`` when the job reports it and the model's peak is
  known, else the GPU's ``tensor_active.mean`` (a proxy), clipped to 0..1; GPUs with neither
  add nothing and are counted out of ``mfu_coverage`` (busy GPUs with a known MFU ÷ busy GPUs).

Capacity is counted in GPUs of compute: a whole GPU is 1, a MIG instance its share of its GPU's
compute slices (the snapshot's ``mig.compute_fraction``, by default ``<n>/7`` for a profile
``<n>g.…``: a 1g.10gb instance of an H100 is 1/7 GPU), so an H100 split into seven 1g.10gb
instances is one GPU, not seven. A split GPU counts only the instances reported; counts of GPUs
(``gpus``, each bucket, ``allocated_gpus``, ``util_gpus``, ``mfu_known_gpus``) are then
fractional, and activity (util, MFU) is weighted by the same measure. The free GPUs of a pool
are labelled fragmented / demand / no-demand one unit at a time.

Per tenant, a GPU belongs to the tenant of the job holding it (the job's ``tenant``, else its
queue's); GPUs no job holds (free, or unavailable and unheld) are under the tenant ``None``
(shown as "(unallocated)"); held by a job with no tenant at all: ``"(no tenant)"``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from diagnosis.core.numbers import json_number
from diagnosis.core.rules.base import Finding
from diagnosis.core.rules.facts import SnapshotFacts, lookup, take
from diagnosis.core.snapshot import ClusterSnapshot

if TYPE_CHECKING:
    from diagnosis.core.rules.engine import Diagnosis

# The buckets a tenant's GPUs fall in (held), then those of the free GPUs.
HELD_BUCKETS: tuple[str, ...] = (
    "unavailable",
    "held-by-partial-gang",
    "allocated-hung",
    "allocated-idle",
    "allocated-data-starved",
    "allocated-busy",
)
BUCKETS: tuple[str, ...] = (*HELD_BUCKETS, "free-fragmented", "free-demand", "free-no-demand")
IDLE_UTIL = 0.05
# A job's mean util equal to IDLE_UTIL up to float rounding (a mean of 0.05s) is not below it;
# the same tolerance as the idle-allocation rule.
EPS = 1e-9
UNALLOCATED_LABEL = "(unallocated)"
NO_TENANT = "(no tenant)"

# The rules whose findings explain each bucket (the waterfall links a bucket to them).
BUCKET_RULES: dict[str, tuple[str, ...]] = {
    "unavailable": ("xid",),
    "held-by-partial-gang": ("gang-deadlock", "gang-partial-hold"),
    "allocated-hung": ("hung-collective",),
    "allocated-idle": ("idle-allocation", "idle-held"),
    "allocated-data-starved": ("data-starvation",),
    "allocated-busy": ("low-mfu", "topology-misplacement"),
    "free-fragmented": ("fragmentation",),
    "free-demand": (),
    "free-no-demand": (),
}

(
    _UNAVAILABLE,
    _PARTIAL,
    _HUNG,
    _IDLE,
    _STARVED,
    _BUSY,
    _FRAGMENTED,
    _DEMAND,
    _NO_DEMAND,
) = range(len(BUCKETS))


@dataclass(frozen=True)
class Breakdown:
    """The buckets of one scope (the cluster, a pool or a tenant) and its utilization."""

    gpus: float  # GPUs of compute (see the module's docstring): whole numbers without MIG
    buckets: Mapping[str, float]
    window_s: int
    allocated_gpus: float
    util_sum: float
    util_gpus: float
    productive_gpus: float
    mfu_known_gpus: float

    def hours(self, gpus: float) -> float:
        return gpus * self.window_s / 3600.0

    @property
    def allocation_utilization(self) -> float:
        return self.allocated_gpus / self.gpus if self.gpus else math.nan

    @property
    def activity_utilization(self) -> float:
        return self.util_sum / self.util_gpus if self.util_gpus else math.nan

    @property
    def activity_coverage(self) -> float:
        return self.util_gpus / self.gpus if self.gpus else math.nan

    @property
    def mfu_coverage(self) -> float:
        busy = self.buckets["allocated-busy"]
        return self.mfu_known_gpus / busy if busy else math.nan

    def as_dict(self) -> dict[str, Any]:
        return {
            "gpus": self.gpus,
            "gpu_hours": json_number(self.hours(self.gpus)),
            "buckets": {
                name: {"gpus": count, "gpu_hours": json_number(self.hours(count))}
                for name, count in self.buckets.items()
            },
            "allocated_gpus": self.allocated_gpus,
            "allocation_utilization": json_number(self.allocation_utilization),
            "activity_utilization": json_number(self.activity_utilization),
            "activity_coverage": json_number(self.activity_coverage),
            "productive_gpus": json_number(self.productive_gpus),
            "productive_gpu_hours": json_number(self.hours(self.productive_gpus)),
            "mfu_coverage": json_number(self.mfu_coverage),
        }


@dataclass(frozen=True)
class Accounting:
    """The GPU-hour breakdown of one snapshot.

    ``gpu_bucket`` holds each GPU's bucket, aligned with ``snapshot.gpus``; ``findings`` maps a
    bucket to the findings (``"rule subject"``) behind it.
    """

    window_s: int
    cluster: Breakdown
    pools: Mapping[str, Breakdown]
    tenants: Mapping[str | None, Breakdown]
    gpu_bucket: pd.Series
    findings: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready form (plain Python numbers, no NaN: unknown values are None)."""
        return {
            "window_s": self.window_s,
            "buckets": list(BUCKETS),
            "cluster": self.cluster.as_dict(),
            "pools": [{"pool": pool, **b.as_dict()} for pool, b in self.pools.items()],
            "tenants": [
                {
                    "tenant": tenant,
                    "label": UNALLOCATED_LABEL if tenant is None else tenant,
                    **b.as_dict(),
                }
                for tenant, b in self.tenants.items()
            ],
            "findings": {bucket: list(refs) for bucket, refs in self.findings.items()},
        }


def account(
    source: Diagnosis | ClusterSnapshot,
    findings: Iterable[Finding] | None = None,
    facts: SnapshotFacts | None = None,
) -> Accounting:
    """The GPU-hour breakdown of a :class:`~diagnosis.core.rules.engine.Diagnosis` (its snapshot,
    findings and facts), or of a snapshot with the findings of a run over it."""
    if isinstance(source, ClusterSnapshot):
        snapshot = source
        found = tuple(findings or ())
    else:
        snapshot = source.snapshot
        found = tuple(source.findings if findings is None else findings)
        facts = facts or source.facts
    facts = facts or SnapshotFacts(snapshot)

    by_rule = _findings_by_rule(found)
    state = facts.gpu_state
    n = len(state)
    holder = state["job"].to_numpy(dtype=object)
    held = pd.notna(holder)
    bucket = _gpu_buckets(snapshot, facts, by_rule, held)
    position = facts.holder_position

    util = state["util_mean"].to_numpy(dtype=float)
    has_util = ~np.isnan(util)
    mfu = _gpu_mfu(snapshot, facts, position)
    mfu = np.where(bucket == _BUSY, mfu, np.nan)
    has_mfu = ~np.isnan(mfu)

    pool_names = sorted(pd.unique(snapshot.nodes["pool"].to_numpy(dtype=object)))
    pool_codes = pd.Categorical(state["pool"], categories=pool_names).codes.astype(np.int64)
    tenant = np.full(n, None, dtype=object)
    tenant[held] = take(_job_tenants(snapshot), position[held], NO_TENANT)
    unheld = ~held  # a held GPU's tenant is a name or NO_TENANT
    codes, distinct = pd.factorize(tenant[~unheld])
    tenant_names: list[str | None] = sorted({str(t) for t in distinct})
    number = {name: i for i, name in enumerate(tenant_names)}
    rank = np.array([number[str(t)] for t in distinct], dtype=np.int64)
    tenant_codes = np.full(n, len(tenant_names), dtype=np.int64)
    tenant_codes[~unheld] = rank[codes]
    tenant_names.append(None)

    capacity = state["capacity"].to_numpy(dtype=float)
    columns = {
        "held": held * capacity,
        "util": np.where(has_util, util, 0.0) * capacity,
        "has_util": has_util * capacity,
        "mfu": np.where(has_mfu, mfu, 0.0) * capacity,
        "has_mfu": has_mfu * capacity,
    }

    def breakdowns(codes: np.ndarray, groups: int) -> list[Breakdown]:
        counts = np.bincount(
            codes * len(BUCKETS) + bucket, weights=capacity, minlength=groups * len(BUCKETS)
        )
        counts = counts.reshape(groups, len(BUCKETS))
        sums = {k: np.bincount(codes, weights=v, minlength=groups) for k, v in columns.items()}
        return [
            Breakdown(
                gpus=_count(counts[g].sum()),
                buckets={name: _count(counts[g, b]) for b, name in enumerate(BUCKETS)},
                window_s=int(snapshot.window_s),
                allocated_gpus=_count(sums["held"][g]),
                util_sum=float(sums["util"][g]),
                util_gpus=_count(sums["has_util"][g]),
                productive_gpus=float(sums["mfu"][g]),
                mfu_known_gpus=_count(sums["has_mfu"][g]),
            )
            for g in range(groups)
        ]

    cluster = breakdowns(np.zeros(n, dtype=np.int64), 1)[0]
    pools = dict(zip(map(str, pool_names), breakdowns(pool_codes, len(pool_names)), strict=True))
    tenants = dict(zip(tenant_names, breakdowns(tenant_codes, len(tenant_names)), strict=True))
    labels = pd.Series(np.asarray(BUCKETS, dtype=object)[bucket], index=state.index)
    return Accounting(
        window_s=int(snapshot.window_s),
        cluster=cluster,
        pools=pools,
        tenants=tenants,
        gpu_bucket=labels,
        findings=_bucket_findings(by_rule),
    )


def _job_tenants(snapshot: ClusterSnapshot) -> np.ndarray:
    """Each job's tenant (aligned with ``snapshot.jobs``): its own, else its queue's, else
    :data:`NO_TENANT`."""
    jobs = snapshot.jobs
    own = jobs["tenant"].to_numpy(dtype=object)
    queues, names = pd.factorize(jobs["queue"].to_numpy(dtype=object))
    of_queue = lookup(snapshot.queues["tenant"], names, None)
    of_queue = np.append(of_queue, None)[queues]  # code -1: no queue
    tenant = np.where(pd.notna(own), own, of_queue)
    tenant[pd.isna(tenant)] = NO_TENANT
    return tenant


def _findings_by_rule(findings: tuple[Finding, ...]) -> dict[str, list[Finding]]:
    """The findings of the rules the buckets read (:data:`BUCKET_RULES`), per rule, in order:
    one pass over 10^5 findings, most of them of rules no bucket reads (starvation)."""
    wanted = {rule for rules in BUCKET_RULES.values() for rule in rules}
    by_rule: dict[str, list[Finding]] = {rule: [] for rule in wanted}
    for finding in findings:
        if finding.rule in wanted:
            by_rule[finding.rule].append(finding)
    return by_rule


def _count(value: float) -> float:
    """A GPU count: an int when whole (always, without MIG instances), else 6 decimals."""
    rounded = round(float(value), 6)
    return int(rounded) if rounded.is_integer() else rounded


def _gpu_buckets(
    snapshot: ClusterSnapshot,
    facts: SnapshotFacts,
    by_rule: Mapping[str, list[Finding]],
    held: np.ndarray,
) -> np.ndarray:
    """Each GPU's bucket number (an index into :data:`BUCKETS`); ``held``: whether a job
    holds it."""
    state = facts.gpu_state
    holder = pd.Series(state["job"].to_numpy(dtype=object))
    usable = state["usable"].to_numpy(dtype=bool)
    job_util = lookup(facts.job_gpu_stats["util_mean"], holder, np.nan).astype(float)
    starved = _finding_jobs(by_rule["data-starvation"])
    hung = _finding_jobs(by_rule["hung-collective"])

    bucket = np.full(len(state), _NO_DEMAND, dtype=np.int64)
    bucket[held] = _BUSY
    bucket[held & holder.isin(starved).to_numpy()] = _STARVED
    bucket[held & (job_util < IDLE_UTIL - EPS)] = _IDLE
    bucket[held & holder.isin(hung).to_numpy()] = _HUNG
    bucket[held & holder.isin(facts.partial_gangs.index).to_numpy()] = _PARTIAL
    bucket[~usable] = _UNAVAILABLE

    free = state["free"].to_numpy(dtype=bool)
    if free.any():
        bucket[free] = _free_buckets(snapshot, facts, state[free])
    return bucket


def _finding_jobs(findings: list[Finding]) -> list[str]:
    """The jobs that ``job:`` findings (of one rule) name."""
    return sorted({f.subject[4:] for f in findings if f.subject[4:]})


def _free_buckets(snapshot: ClusterSnapshot, facts: SnapshotFacts, free: pd.DataFrame):
    """Buckets of the free GPUs: per pool, the first ``fragmented`` of them (emptiest nodes
    first) are fragmented, the next ``demand`` are free-demand, the rest free-no-demand."""
    pools = free["pool"].to_numpy(dtype=object)
    free_count = pd.Series(pools).value_counts().sort_index()

    placement = facts.pending_placement
    blocked = placement[placement["fragmentation_blocked"].to_numpy()]
    waiting = placement[placement["placeable"].to_numpy() & (placement["request"] > 0).to_numpy()]
    gangs = facts.partial_gang_placement
    gangs = gangs[gangs["can_complete"].to_numpy()]
    ready_demand = pd.concat(
        [
            _demand(waiting["scope"], waiting["request"]),
            _demand(gangs["scope"], gangs["missing_pods"] * gangs["gpus_per_pod"]),
        ]
    )
    fragmented = _fill(free_count, _demand(blocked["scope"], blocked["request"]))
    ready = _fill(free_count - fragmented, ready_demand.groupby(level=0, dropna=False).sum())

    node_free = lookup(facts.free_per_node, free["node"], np.nan)
    node_code = pd.factorize(free["node"].to_numpy(dtype=object), sort=True)[0]
    pool_code = pd.factorize(pools, sort=True)[0]
    order = np.lexsort((free["index"].to_numpy(), node_code, node_free, pool_code))
    ranks = np.empty(len(free), dtype=np.int64)
    sorted_pools = pools[order]
    first = np.r_[True, sorted_pools[1:] != sorted_pools[:-1]]
    group_start = np.maximum.accumulate(np.where(first, np.arange(len(order)), 0))
    ranks[order] = np.arange(len(order)) - group_start
    cut_fragmented = lookup(fragmented, pools, np.nan).astype(np.int64)
    cut_ready = cut_fragmented + lookup(ready, pools, np.nan).astype(np.int64)
    return np.where(
        ranks < cut_fragmented, _FRAGMENTED, np.where(ranks < cut_ready, _DEMAND, _NO_DEMAND)
    )


def _demand(scope: pd.Series, gpus: pd.Series) -> pd.Series:
    """GPUs asked per scope label (None: the whole cluster)."""
    keys = scope.astype(object).where(scope.notna(), None).to_numpy()
    return pd.Series(gpus.to_numpy(dtype=np.int64)).groupby(keys, dropna=False).sum()


def _fill(free: pd.Series, demand: pd.Series) -> pd.Series:
    """How many of each pool's free GPUs the demand takes: each pool's own demand first, then
    the cluster-wide demand (scope None) over what is left, in pool-name order."""
    own_keys = [k for k in demand.index if not pd.isna(k)]
    own = demand[own_keys].groupby(level=0).sum() if own_keys else pd.Series(dtype=np.int64)
    taken = np.minimum(free.to_numpy(), own.reindex(free.index, fill_value=0).to_numpy())
    anywhere = int(demand[[pd.isna(k) for k in demand.index]].sum())
    if anywhere:
        left = free.to_numpy() - taken
        before = np.r_[0, np.cumsum(left)[:-1]]
        taken = taken + np.clip(anywhere - before, 0, left)
    return pd.Series(taken.astype(np.int64), index=free.index)


def _gpu_mfu(snapshot: ClusterSnapshot, facts: SnapshotFacts, position: np.ndarray) -> np.ndarray:
    """Per GPU: MFU of its job from achieved TFLOP/s over the model's peak where both are
    known, else the GPU's own tensor activity; NaN when neither is known. ``position``: each
    GPU's holder in ``snapshot.jobs`` (-1: none)."""
    state = facts.gpu_state
    reported = snapshot.jobs["achieved_tflops_per_gpu"].to_numpy(dtype=float)
    achieved = take(reported, position, np.nan)
    peak = facts.peak_tflops_per_gpu().to_numpy(dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        reported = np.where(peak > 0, achieved / peak, np.nan)
    tensor = state["tensor_active_mean"].to_numpy(dtype=float)
    mfu = np.where(np.isnan(reported), tensor, reported)
    return np.clip(mfu, 0.0, 1.0)


def _bucket_findings(by_rule: Mapping[str, list[Finding]]) -> dict[str, tuple[str, ...]]:
    return {
        bucket: tuple(f"{rule} {f.subject}" for rule in rules for f in by_rule[rule])
        for bucket, rules in BUCKET_RULES.items()
    }
