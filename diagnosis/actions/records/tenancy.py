"""Tenancy of a cycle: tenants, queues and jobs synced from the snapshot, and the pool and
tenant rollups the charts and fairness reports read.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pandas as pd

from diagnosis.actions.records.findings import tag_finding_tenants
from diagnosis.core import fairness
from diagnosis.core import snapshot as snapshot_format
from diagnosis.core.rules.engine import Diagnosis
from diagnosis.core.rules.facts import SnapshotFacts
from diagnosis.core.vocabulary import LIVE_JOB_STATES
from diagnosis.db_bulk import upsert_rows
from diagnosis.db_timestamps import fast_rows
from diagnosis.models import (
    Cluster,
    ClusterCycle,
    Job,
    PoolRollup,
    Queue,
    Tenant,
    TenantRollup,
)

# The Job columns a snapshot sets, compared to decide whether a stored job changed.
JOB_SYNC_FIELDS = (
    "name",
    "tenant_id",
    "queue_id",
    "pool",
    "kind",
    "priority",
    "state",
    "submitted_at",
    "started_at",
    "ended_at",
    "pods",
    "gpus_per_pod",
    "gang",
    "min_member",
    "preemptions",
)


# The columns that change during a job's life: a stored unfinished job is compared on these
# only (its name, shape and submission do not change), which keeps the per-cycle read small.
JOB_CHANGING_FIELDS = (
    "tenant_id",
    "queue_id",
    "priority",
    "state",
    "started_at",
    "ended_at",
    "preemptions",
)


@dataclass(frozen=True)
class RecordedTenancy:
    """What :func:`record_tenancy` wrote for one cycle."""

    tenants_created: int
    jobs_written: int
    jobs_unlisted: int
    findings_tagged: int
    interval_s: float
    tenant_rows: int
    pool_rows: int


def record_tenancy(
    cluster: Cluster,
    snap: snapshot_format.ClusterSnapshot,
    diagnosis: Diagnosis,
    accounting: Any,
    cycle: ClusterCycle,
) -> RecordedTenancy:
    """The tenant side of a cycle, inside its transaction: sync Tenant and Queue rows from the
    snapshot's queues (so managers can be assigned in the admin), sync Job rows (only the jobs
    that changed), tag the cycle's findings with their tenant, and store the cycle's per-tenant
    and per-pool rollups (:func:`diagnosis.core.fairness.cycle_rollup`).

    The rollups stand for the time since the previous good cycle's snapshot, at most the
    snapshot's window; a snapshot already rolled up (the same ``as_of`` again) adds nothing.
    """

    as_of = snap.as_of.to_pydatetime()
    tenant_of_job = fairness.job_tenants(snap)
    tenant_ids, created = sync_tenants_and_queues(cluster, snap)
    queue_ids = dict(Queue.objects.filter(cluster=cluster).values_list("name", "pk"))
    previous = (
        ClusterCycle.objects.filter(cluster=cluster, ok=True, as_of__lt=as_of)
        .exclude(pk=cycle.pk)
        .order_by("-as_of")
        .values_list("as_of", flat=True)
        .first()
    )
    synced = sync_jobs(cluster, snap, tenant_of_job, tenant_ids, queue_ids, previous)
    job_tenant = dict(zip(tenant_of_job.index, tenant_of_job.to_numpy(), strict=True))
    tagged = tag_finding_tenants(cluster, diagnosis, job_tenant, tenant_ids)
    if PoolRollup.objects.filter(cluster=cluster, pool="", as_of=as_of).exists():
        return RecordedTenancy(created, synced.written, synced.unlisted, tagged, 0.0, 0, 0)
    interval = float(snap.window_s)
    if previous is not None:
        interval = min(interval, (as_of - previous).total_seconds())
    rollup = fairness.cycle_rollup(
        snap,
        accounting,
        diagnosis.facts or SnapshotFacts(snap),
        diagnosis.findings,
        interval_s=interval,
        preemptions=synced.preemptions,
    )
    common = {"cluster": cluster, "cycle": cycle, "as_of": as_of, "interval_s": interval}
    tenant_rows = [
        TenantRollup(
            **common,
            **figures.held_figures(),
            tenant_id=tenant_ids.get(name),
            tenant_name=name,
            entitlement_s=figures.entitlement * interval,
            fair_gpu_s=figures.fair_gpu_s,
        )
        for name, figures in rollup.tenants.items()
    ]
    pool_rows = [
        PoolRollup(
            **common,
            **figures.held_figures(),
            pool=pool,
            gpu_s=figures.gpu_s,
            free_fragmented_gpu_s=figures.free_fragmented_gpu_s,
            free_demand_gpu_s=figures.free_demand_gpu_s,
            free_no_demand_gpu_s=figures.free_no_demand_gpu_s,
            entitlement_basis=rollup.entitlement_basis if pool == "" else "",
        )
        for pool, figures in rollup.pools.items()
    ]
    TenantRollup.objects.bulk_create(tenant_rows, batch_size=500)
    PoolRollup.objects.bulk_create(pool_rows, batch_size=500)
    return RecordedTenancy(
        created,
        synced.written,
        synced.unlisted,
        tagged,
        interval,
        len(tenant_rows),
        len(pool_rows),
    )


def sync_tenants_and_queues(
    cluster: Cluster, snap: snapshot_format.ClusterSnapshot
) -> tuple[dict[str, int], int]:
    """Create the Tenant rows of the snapshot's queues and jobs, and create or update its Queue
    rows; nothing is deleted (a queue that disappears keeps its history). Returns tenant name ->
    id and how many tenants were created. Costs two reads when nothing changed."""

    queues = snap.queues
    names = set(queues["tenant"].astype(str)) | set(fairness.job_tenants(snap).astype(str))
    # every name fits its column: record_cycle clipped a longer one (and said so)
    names = {n for n in names if n != fairness.NO_TENANT}
    tenant_ids = dict(Tenant.objects.filter(cluster=cluster).values_list("name", "pk"))
    missing = sorted(names - set(tenant_ids))
    if missing:
        Tenant.objects.bulk_create(
            [Tenant(cluster=cluster, name=name) for name in missing], ignore_conflicts=True
        )
        tenant_ids = dict(Tenant.objects.filter(cluster=cluster).values_list("name", "pk"))
    stored = {
        row[0]: row[1:]
        for row in Queue.objects.filter(cluster=cluster).values_list(
            "name", "pk", "tenant_id", "weight", "deserved_gpus", "capability_gpus"
        )
    }
    create, update = [], []
    for name, row in queues.iterrows():
        wanted = (
            tenant_ids.get(str(row["tenant"])),
            _whole(row["weight"]) if _whole(row["weight"]) is not None else 1,
            _whole(row["deserved_gpus"]),
            _whole(row["capability_gpus"]),
        )
        known = stored.get(name)
        if known is not None and tuple(known[1:]) == wanted:
            continue
        queue = Queue(
            pk=known[0] if known else None,
            cluster=cluster,
            name=name,
            tenant_id=wanted[0],
            weight=wanted[1],
            deserved_gpus=wanted[2],
            capability_gpus=wanted[3],
        )
        (update if known else create).append(queue)
    Queue.objects.bulk_create(create, ignore_conflicts=True)
    Queue.objects.bulk_update(update, ["tenant_id", "weight", "deserved_gpus", "capability_gpus"])
    return tenant_ids, len(missing)


def _whole(value: Any) -> int | None:
    return None if value is None or value != value else max(0, round(float(value)))


def _objects(column: pd.Series) -> np.ndarray:
    """A text column as plain Python values (None where missing): fast to iterate."""
    return column.to_numpy(dtype=object, na_value=None)


def _moments(times: pd.Series) -> list[datetime | None]:
    """Aware UTC datetimes (None for NaT) of a UTC datetime column, without a Timestamp each."""
    naive = times.to_numpy(dtype="datetime64[us]", na_value=np.datetime64("NaT")).astype(object)
    return [None if moment is None else moment.replace(tzinfo=UTC) for moment in naive]


_UPSERTED_COLUMNS = ("cluster_id", "external_id", "unlisted_since", *JOB_SYNC_FIELDS)


@dataclass(frozen=True)
class SyncedJobs:
    written: int
    unlisted: int
    preemptions: dict[str, int]  # job id -> preemptions since the previous cycle


def sync_jobs(
    cluster: Cluster,
    snap: snapshot_format.ClusterSnapshot,
    tenant_of_job: pd.Series,
    tenant_ids: Mapping[str, int],
    queue_ids: Mapping[str, int],
    previous_as_of: datetime | None,
) -> SyncedJobs:
    """Bring the cluster's Job rows up to date with a snapshot, writing only what changed.

    Reads the stored unfinished jobs (one query); writes the jobs that are new or changed, the
    jobs that ended since the previous cycle, and marks unfinished jobs the scheduler no longer
    lists as ``unlisted_since`` this snapshot. Ended jobs that ended before the previous cycle
    were written then and are skipped, so the cost follows the churn, not the cluster's size.
    """
    jobs = snap.jobs
    as_of = snap.as_of.to_pydatetime()
    live = {
        row[0]: (row[1], row[2:])
        for row in fast_rows(
            Job.objects.filter(
                cluster=cluster, state__in=LIVE_JOB_STATES, unlisted_since__isnull=True
            ).values_list("external_id", "pk", *JOB_CHANGING_FIELDS)
        )
    }
    columns = {
        "name": [n[:255] if isinstance(n, str) else "" for n in _objects(jobs["name"])],
        "tenant_id": [tenant_ids.get(t) for t in tenant_of_job.reindex(jobs.index).tolist()],
        "queue_id": [queue_ids.get(q) for q in _objects(jobs["queue"])],
        "pool": [p[:128] if isinstance(p, str) else "" for p in _objects(jobs["pool"])],
        "kind": [k[:32] if isinstance(k, str) else "" for k in _objects(jobs["kind"])],
        "priority": jobs["priority"].astype(int).tolist(),
        "state": jobs["state"].astype(object).where(jobs["state"].notna(), "pending").tolist(),
        "submitted_at": _moments(jobs["submitted"]),
        "started_at": _moments(jobs["started"]),
        "ended_at": _moments(jobs["ended"]),
        "pods": jobs["pods"].astype(int).tolist(),
        "gpus_per_pod": jobs["gpus_per_pod"].astype(int).tolist(),
        "gang": jobs["gang"].astype(bool).tolist(),
        "min_member": jobs["min_member"].astype(int).tolist(),
        "preemptions": jobs["preemptions"].astype(int).tolist(),
    }
    upsert: list[
        tuple[Any, ...]
    ] = []  # (cluster_id, external_id, unlisted_since, *JOB_SYNC_FIELDS)
    unknown: list[str] = []  # upserted jobs that were not among the stored unfinished ones
    preemptions: dict[str, int] = {}
    changing = list(zip(*(columns[f] for f in JOB_CHANGING_FIELDS), strict=True))
    for i, job_id in enumerate(jobs.index.tolist()):
        known = live.pop(job_id, None)
        if known is not None:
            now, stored = changing[i], known[1]
            if stored == now:
                continue
            if now[-1] > stored[-1]:
                preemptions[job_id] = now[-1] - stored[-1]
        values = tuple(columns[f][i] for f in JOB_SYNC_FIELDS)
        if known is None:
            ended = columns["ended_at"][i]
            if (
                values[6] not in LIVE_JOB_STATES
                and previous_as_of is not None
                and ended is not None
                and ended <= previous_as_of
            ):
                continue  # written when it ended (or before gpuobs knew the cluster)
            unknown.append(job_id)
        upsert.append((cluster.pk, job_id, None, *values))
    if unknown:
        unknown_set = set(unknown)
        before = dict(
            Job.objects.filter(cluster=cluster, external_id__in=unknown).values_list(
                "external_id", "preemptions"
            )
        )
        at = _UPSERTED_COLUMNS.index("preemptions")
        for job in upsert:
            job_id, count = job[1], job[at]
            if job_id in unknown_set and count > before.get(job_id, 0):
                preemptions[job_id] = count - before.get(job_id, 0)
    # INSERT ... ON CONFLICT DO UPDATE: one statement for new and changed jobs alike.
    upsert_rows(
        Job,
        _UPSERTED_COLUMNS,
        upsert,
        unique=["cluster", "external_id"],
        update=[*JOB_SYNC_FIELDS, "unlisted_since"],
    )
    unlisted = 0
    if live:
        unlisted = Job.objects.filter(pk__in=[pk for pk, _ in live.values()]).update(
            unlisted_since=as_of
        )
    return SyncedJobs(len(upsert), unlisted, preemptions)
