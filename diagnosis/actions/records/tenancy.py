"""Tenancy of a cycle: tenants, queues and jobs synced from the snapshot, and the pool and
tenant rollups the charts and fairness reports read.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pandas as pd
from django.db import IntegrityError, transaction

from diagnosis.actions.records.findings import tag_finding_tenants
from diagnosis.core import fairness
from diagnosis.core import snapshot as snapshot_format
from diagnosis.core.rules.base import Finding as RuleFinding
from diagnosis.core.rules.engine import Diagnosis
from diagnosis.core.rules.facts import SnapshotFacts
from diagnosis.core.vocabulary import LIVE_JOB_STATES
from diagnosis.db_bulk import insert_new_rows, upsert_rows
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


@dataclass(frozen=True)
class CycleTenants:
    """A snapshot's tenants once their rows are synced (:func:`sync_cycle_tenants`): each
    job's tenant, tenant name -> id, and how many tenant rows were created."""

    tenant_of_job: pd.Series
    job_tenant: dict[str, str]
    tenant_ids: dict[str, int]
    created: int

    def finding_tenant_id(self, hit: RuleFinding) -> int | None:
        """The id of the one tenant a rule's finding concerns
        (:func:`diagnosis.core.fairness.finding_tenant`), or None."""
        name = fairness.finding_tenant(hit, self.job_tenant)
        return self.tenant_ids.get(name) if name is not None else None

    def finding_tenant_ids(self, hits: Iterable[RuleFinding]) -> list[int | None]:
        """:meth:`finding_tenant_id` of each hit, read at once
        (:func:`diagnosis.core.fairness.finding_tenants`)."""
        ids = self.tenant_ids.get
        return [
            ids(name) if name is not None else None
            for name in fairness.finding_tenants(hits, self.job_tenant)
        ]


def sync_cycle_tenants(cluster: Cluster, snap: snapshot_format.ClusterSnapshot) -> CycleTenants:
    """Sync the snapshot's Tenant and Queue rows (:func:`sync_tenants_and_queues`) and map its
    jobs to their tenants: before the findings step, which inserts a new finding with its
    tenant (a cycle that creates every finding does not rewrite them all to tag them)."""
    tenant_of_job = fairness.job_tenants(snap)
    tenant_ids, created = sync_tenants_and_queues(cluster, snap)
    job_tenant = dict(zip(tenant_of_job.index.tolist(), tenant_of_job.tolist(), strict=True))
    return CycleTenants(tenant_of_job, job_tenant, tenant_ids, created)


def record_tenancy(
    cluster: Cluster,
    snap: snapshot_format.ClusterSnapshot,
    diagnosis: Diagnosis,
    accounting: Any,
    cycle: ClusterCycle,
    hit_rows: Mapping[tuple[str, str], tuple[int, int | None]] | None = None,
    tenants: CycleTenants | None = None,
) -> RecordedTenancy:
    """The tenant side of a cycle, inside its transaction: sync Tenant and Queue rows from the
    snapshot's queues (so managers can be assigned in the admin), sync Job rows (only the jobs
    that changed), tag the cycle's findings with their tenant, and store the cycle's per-tenant
    and per-pool rollups (:func:`diagnosis.core.fairness.cycle_rollup`).

    The rollups stand for the time since the previous good cycle's snapshot, at most the
    snapshot's window; a snapshot already rolled up (the same ``as_of`` again) adds nothing.
    ``hit_rows``: the hits' rows as the findings step recorded them
    (``RecordedFindings.hit_rows``), so the tagging reads no finding again; ``tenants``: what
    :func:`sync_cycle_tenants` synced for this snapshot already.
    """

    as_of = snap.as_of.to_pydatetime()
    tenants = tenants if tenants is not None else sync_cycle_tenants(cluster, snap)
    tenant_of_job, tenant_ids, created = tenants.tenant_of_job, tenants.tenant_ids, tenants.created
    queue_ids = dict(Queue.objects.filter(cluster=cluster).values_list("name", "pk"))
    previous = (
        ClusterCycle.objects.filter(cluster=cluster, ok=True, as_of__lt=as_of)
        .exclude(pk=cycle.pk)
        .order_by("-as_of")
        .values_list("as_of", flat=True)
        .first()
    )
    synced = sync_jobs(cluster, snap, tenant_of_job, tenant_ids, queue_ids, previous)
    tagged = tag_finding_tenants(cluster, diagnosis, tenants.finding_tenant_ids, hit_rows)
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
    names = set(queues["tenant"].astype(str)) | set(
        fairness.job_tenants(snap).astype(str).unique().tolist()
    )
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


def _micros(times: Any) -> np.ndarray:
    """Microseconds since the epoch of UTC moments (a datetime column, or datetimes and None),
    a missing one as NaT's integer: compared as numbers, not as a datetime each."""
    return pd.DatetimeIndex(pd.to_datetime(times, utc=True)).as_unit("us").asi8


def _ids(values: Any) -> np.ndarray:
    """Row ids (None where there is none) as integers, -1 for none."""
    return pd.Series(values, dtype="Float64").fillna(-1).to_numpy(dtype=np.int64)


def _ids_of(names: pd.Series, ids: Mapping[str, int]) -> np.ndarray:
    """The id of each name (-1 for a name without one, or none), looked up once per name."""
    codes, uniques = pd.factorize(names)
    known = np.array([ids.get(name, -1) for name in uniques.tolist()] + [-1], dtype=np.int64)
    return known[codes]  # code -1 (no name) reads the -1 at the end


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
    were written then and are skipped, so the cost follows the churn, not the cluster's size:
    the snapshot's jobs are compared with the stored ones column by column, and only the rows
    to write are built as Python values.
    """
    jobs = snap.jobs
    as_of = snap.as_of.to_pydatetime()
    live = fast_rows(
        Job.objects.filter(
            cluster=cluster, state__in=LIVE_JOB_STATES, unlisted_since__isnull=True
        ).values_list("external_id", "pk", *JOB_CHANGING_FIELDS)
    )
    names = ("external_id", "pk", *JOB_CHANGING_FIELDS)
    stored = dict(zip(names, zip(*live, strict=True), strict=True)) if live else {}
    stored_ids = pd.Index(stored.get("external_id", ()), dtype=object)
    at = stored_ids.get_indexer(jobs.index)  # each job's stored unfinished row, -1 if none
    known = at >= 0
    tenant_of = tenant_of_job.reindex(jobs.index)
    state = jobs["state"].astype(object).where(jobs["state"].notna(), "pending")
    preempted = jobs["preemptions"].astype(int).to_numpy()
    now = {
        "tenant_id": _ids_of(tenant_of, tenant_ids),
        "queue_id": _ids_of(jobs["queue"], queue_ids),
        "priority": jobs["priority"].astype(int).to_numpy(),
        "state": state.to_numpy(dtype=object),
        "started_at": _micros(jobs["started"]),
        "ended_at": _micros(jobs["ended"]),
        "preemptions": preempted,
    }
    same = known.copy()
    if live:
        then = {
            "tenant_id": _ids(stored["tenant_id"]),
            "queue_id": _ids(stored["queue_id"]),
            "priority": np.asarray(stored["priority"], dtype=np.int64),
            "state": np.asarray(stored["state"], dtype=object),
            "started_at": _micros(list(stored["started_at"])),
            "ended_at": _micros(list(stored["ended_at"])),
            "preemptions": np.asarray(stored["preemptions"], dtype=np.int64),
        }
        for name in JOB_CHANGING_FIELDS:
            same &= now[name] == then[name][at]
        was = then["preemptions"][at]
    else:
        was = np.zeros(len(jobs), dtype=np.int64)
    ended_before = np.zeros(len(jobs), dtype=bool)  # ended by the previous cycle (NaT: not)
    if previous_as_of is not None:
        ended = jobs["ended"] <= pd.Timestamp(previous_as_of)
        ended_before = (ended & ~state.isin(LIVE_JOB_STATES)).to_numpy()
    # known and changed, or not known and not written when it ended (or before gpuobs knew it)
    write = (known & ~same) | (~known & ~ended_before)
    ids = jobs.index.to_numpy(dtype=object)
    grew = known & ~same & (preempted > was)
    preemptions = {
        job_id: int(count)
        for job_id, count in zip(ids[grew].tolist(), (preempted - was)[grew].tolist(), strict=True)
    }
    rows = np.flatnonzero(write)
    unknown = ids[rows[~known[rows]]].tolist()  # upserted jobs not among the stored unfinished
    upsert = _job_rows(cluster, jobs.iloc[rows], tenant_of.iloc[rows], tenant_ids, queue_ids)
    written = len(upsert)
    new: list[tuple[Any, ...]] = []
    if unknown:
        unknown_set = set(unknown)
        # the stored rows of those jobs (ended, or unlisted); none where the cluster has no job
        before = (
            dict(
                Job.objects.filter(cluster=cluster, external_id__in=unknown).values_list(
                    "external_id", "preemptions"
                )
            )
            if live or Job.objects.filter(cluster=cluster).exists()
            else {}
        )
        position = _UPSERTED_COLUMNS.index("preemptions")
        for job in upsert:
            job_id, count = job[1], job[position]
            if job_id in unknown_set and count > before.get(job_id, 0):
                preemptions[job_id] = count - before.get(job_id, 0)
        new = [job for job in upsert if job[1] in unknown_set and job[1] not in before]
        if new:
            upsert = [job for job in upsert if job[1] not in unknown_set or job[1] in before]
    _write_jobs(new, upsert)
    unlisted = 0
    gone = np.ones(len(stored_ids), dtype=bool)
    gone[at[known]] = False  # stored unfinished jobs the scheduler no longer lists
    if gone.any():
        pks = np.asarray(stored["pk"], dtype=np.int64)[gone].tolist()
        unlisted = Job.objects.filter(pk__in=pks).update(unlisted_since=as_of)
    return SyncedJobs(written, unlisted, preemptions)


def _write_jobs(new: list[tuple[Any, ...]], changed: list[tuple[Any, ...]]) -> None:
    """Insert the ``new`` jobs (no row stored when the cycle read them) in one COPY, and upsert
    the ``changed`` ones (``INSERT ... ON CONFLICT DO UPDATE``). A new job stored meanwhile by
    another writer (jobs take no lock) makes the insert fail: it is then upserted with them."""
    if new:
        try:
            with transaction.atomic():
                insert_new_rows(Job, _UPSERTED_COLUMNS, new)
        except IntegrityError:
            changed = [*new, *changed]
    upsert_rows(
        Job,
        _UPSERTED_COLUMNS,
        changed,
        unique=["cluster", "external_id"],
        update=[*JOB_SYNC_FIELDS, "unlisted_since"],
    )


def _job_rows(
    cluster: Cluster,
    jobs: pd.DataFrame,
    tenant_of_job: pd.Series,
    tenant_ids: Mapping[str, int],
    queue_ids: Mapping[str, int],
) -> list[tuple[Any, ...]]:
    """The rows to upsert for ``jobs`` (in their order), as :data:`_UPSERTED_COLUMNS`."""
    columns = {
        "name": [n[:255] if isinstance(n, str) else "" for n in _objects(jobs["name"])],
        "tenant_id": [tenant_ids.get(t) for t in tenant_of_job.tolist()],
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
    external = jobs.index.tolist()
    return [
        (cluster.pk, job_id, None, *values)
        for job_id, *values in zip(external, *(columns[f] for f in JOB_SYNC_FIELDS), strict=True)
    ]
