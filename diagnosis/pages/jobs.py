"""The cluster's jobs (issue 19; docs/ui.md "Jobs"): a searchable, filtered, paginated list and
a job's page, which is its efficiency report.

The list reads the ``Job`` rows every cycle keeps in step with the latest snapshot (one indexed,
paginated query, whatever the cluster's size); the job page adds what the stored snapshots say
of it over its life: its allocation, per-GPU metrics, MFU and what it cost. Both go through
:mod:`diagnosis.access`: a manager finds only their tenants' jobs, and another tenant's job is a
404.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db.models import (
    Case,
    DateTimeField,
    DurationField,
    ExpressionWrapper,
    F,
    Q,
    QuerySet,
    Value,
    When,
)
from django.http import HttpRequest, HttpResponse, QueryDict
from django.shortcuts import render
from django.utils.translation import gettext_lazy as _
from django.views.decorators.http import require_safe

from diagnosis.access import (
    findings_for_user,
    get_cluster_for_user,
    get_job_for_user,
    incidents_for_user,
    jobs_for_user,
    prime_texts_for_user,
    tenants_for_user,
    with_summary_text,
)
from diagnosis.charts.figures import embed, gpus_util_series
from diagnosis.choices import FindingState, JobState, SchedulerEventKind
from diagnosis.core.fairness import size_class
from diagnosis.core.rules.facts import peak_tflops
from diagnosis.core.vocabulary import parse_time
from diagnosis.models import Cluster, Finding, Job, Queue, SchedulerEvent, Snapshot, Tenant
from diagnosis.pages.incidents import job_drains
from diagnosis.pages.live import latest_good_cycle
from diagnosis.pages.support.forecasts import job_forecast
from diagnosis.pages.support.pagination import paginate
from diagnosis.pages.support.snapshots import (
    GpuKey,
    StoredSnapshot,
    gpu_series,
    job_records,
    node_view,
)
from diagnosis.pages.support.sorting import TableSort

JOBS_PER_PAGE = 50
LIFE_POINTS = 60
OPEN_STATES = (FindingState.PENDING, FindingState.FIRING)
STATE_CHOICES: dict[str, Any] = {
    "live": _("Pending or running"),
    **dict(JobState.choices),
    "all": _("Any state"),
}
LIVE_STATES = (JobState.PENDING, JobState.RUNNING)
PREEMPTION_EVENTS = ("preempted", "evicted")
GPU_ROWS_OPEN = 16  # a job's GPU table shows open up to this many rows; more fold under a summary


# -- the list ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class JobFilter:
    """The job list's search box and filters, from the query string."""

    search: str = ""
    state: str = "live"
    tenant: str = ""
    queue: str = ""
    pool: str = ""

    @classmethod
    def parse(cls, query: QueryDict) -> JobFilter:
        state = query.get("state") or "live"
        return cls(
            search=(query.get("q") or "").strip()[:200],
            state=state if state in STATE_CHOICES else "live",
            tenant=(query.get("tenant") or "").strip(),
            queue=(query.get("queue") or "").strip(),
            pool=(query.get("pool") or "").strip(),
        )

    def apply(self, jobs: QuerySet[Job], cluster: Cluster) -> QuerySet[Job]:
        if self.state == "live":
            jobs = jobs.filter(state__in=LIVE_STATES, unlisted_since__isnull=True)
        elif self.state != "all":
            jobs = jobs.filter(state=self.state)
        if self.tenant:
            jobs = jobs.filter(tenant__name=self.tenant)
        if self.queue:
            jobs = jobs.filter(queue__name=self.queue)
        if self.pool:
            jobs = jobs.filter(pool=self.pool)
        if self.search:
            # tenants and queues are few: their matching ids first, so the jobs need no join
            term = self.search
            tenants = Tenant.objects.filter(cluster=cluster, name__icontains=term)
            queues = Queue.objects.filter(cluster=cluster, name__icontains=term)
            tenant_ids = list(tenants.values_list("pk", flat=True)[:500])
            queue_ids = list(queues.values_list("pk", flat=True)[:500])
            jobs = jobs.filter(
                Q(external_id__icontains=term)
                | Q(name__icontains=term)
                | Q(tenant_id__in=tenant_ids)
                | Q(queue_id__in=queue_ids)
            )
        return jobs


@require_safe
def job_list(request: HttpRequest, name: str) -> HttpResponse:
    """Every job of the cluster the reader may see, searched by id, name, tenant or queue and
    filtered by state, tenant, queue and pool; 50 a page, the newest first."""
    cluster = get_cluster_for_user(request.user, name)
    filters = JobFilter.parse(request.GET)
    sort = TableSort.parse(
        request.GET, JOB_SORTS, "-submitted", descending_first=JOB_SORTS_DESCENDING_FIRST
    )
    as_of = (
        Snapshot.objects.filter(cluster=cluster)
        .order_by("-as_of")
        .values_list("as_of", flat=True)
        .first()
    )
    jobs = filters.apply(jobs_for_user(request.user, cluster), cluster)
    jobs = sorted_jobs(jobs, sort, as_of).select_related("tenant", "queue")
    page, query = paginate(request, jobs, JOBS_PER_PAGE)
    context = {
        "table": sort,
        "cluster": cluster,
        "section": "jobs",
        "page": page,
        "query": query,
        "filters": filters,
        "state_choices": STATE_CHOICES,
        "tenant_choices": list(
            tenants_for_user(request.user, cluster).order_by("name").values_list("name", flat=True)
        ),
        "as_of": as_of,
        "rows": [(job, wait_s(job, as_of)) for job in page.object_list],
        "good": latest_good_cycle(request, cluster),  # the live status line (docs/ui.md)
    }
    return render(request, "diagnosis/job_list.html", context)


# The job table's orders (?sort=KEY or -KEY, diagnosis/pages/support/sorting.py): a column each,
# done by the database (one indexed, paginated query), ties by id.
JOB_SORTS: dict[str, Any] = {
    "id": F("external_id"),
    "name": F("name"),
    "tenant": F("tenant__name"),
    "queue": F("queue__name"),
    "state": F("state"),
    "gpus": F("pods") * F("gpus_per_pod"),
    "submitted": F("submitted_at"),
    "wait": None,  # the wait so far (see sorted_jobs)
}
JOB_SORTS_DESCENDING_FIRST = ("gpus", "submitted", "wait")
NULLABLE_JOB_SORTS = ("tenant", "queue", "wait")


def sorted_jobs(jobs: QuerySet[Job], sort: TableSort, as_of: datetime | None) -> QuerySet[Job]:
    """``jobs`` in ``sort``'s order, nulls last either way. The wait is what the table shows
    (:func:`wait_s`): until its start, or until the snapshot time ``as_of`` while pending; a
    job that never started and is not pending has none."""
    if sort.key == "wait":
        end = Case(
            When(started_at__isnull=False, then=F("started_at")),
            When(state=JobState.PENDING, then=Value(as_of)),
            default=None,
            output_field=DateTimeField(),
        )
        value = ExpressionWrapper(end - F("submitted_at"), output_field=DurationField())
    else:
        value = JOB_SORTS[sort.key]
    # nulls last only where there can be any: a plain order keeps the default one indexed
    nulls_last = True if sort.key in NULLABLE_JOB_SORTS else None
    order = (
        value.desc(nulls_last=nulls_last) if sort.descending else value.asc(nulls_last=nulls_last)
    )
    tie = "-id" if sort.descending else "id"
    return jobs.order_by(order, tie)


def wait_s(job: Job, as_of: datetime | None) -> float | None:
    """How long the job waited to start, or has waited so far (until the snapshot time ``as_of``)
    while pending; never negative."""
    end = job.started_at or (as_of if job.state == JobState.PENDING else None)
    if end is None:
        return None
    return max(0.0, (end - job.submitted_at).total_seconds())


# -- findings that name jobs ----------------------------------------------------------------------


def findings_naming_jobs(
    request: HttpRequest, cluster: Cluster, job_ids: Iterable[str], *, open_only: bool = True
) -> dict[str, list[Finding]]:
    """Per job id: the findings (open ones by default) whose subject is the job (``job:<id>``),
    a set of jobs holding it (``jobs:a+b``, a gang deadlock) or whose evidence lists it among
    the jobs fragmentation blocks."""
    ids = {str(j) for j in job_ids}
    named: dict[str, list[Finding]] = {j: [] for j in ids}
    if not ids:
        return named
    findings = findings_for_user(request.user, cluster)
    if open_only:
        findings = findings.filter(state__in=OPEN_STATES)
    direct = with_summary_text(
        findings.filter(subject__in=[f"job:{j}" for j in ids]).defer("evidence")
    )
    for finding in direct:
        named[finding.subject.partition(":")[2]].append(finding)
    for finding in with_summary_text(
        findings.filter(subject__startswith="jobs:").defer("evidence")
    ):
        for member in finding.subject.partition(":")[2].split("+"):
            if member in named:
                named[member].append(finding)
    for finding in findings.filter(rule_id="fragmentation"):
        for blocked in (finding.evidence or {}).get("blocked_jobs") or ():
            job_id = str(blocked.get("id")) if isinstance(blocked, Mapping) else ""
            if job_id in named:
                named[job_id].append(finding)
    return named


# -- a job: its efficiency report ---------------------------------------------------------------


def _life_snapshots(cluster: Cluster, job: Job) -> list[StoredSnapshot]:
    life = Snapshot.objects.filter(cluster=cluster)
    if job.started_at is not None:
        life = life.filter(as_of__gte=job.started_at)
    if job.ended_at is not None:
        life = life.filter(as_of__lte=job.ended_at)
    return [StoredSnapshot(*row) for row in life.order_by("as_of", "id").values_list("id", "as_of")]


def job_record_in(stored: StoredSnapshot, job_id: str) -> dict[str, Any] | None:
    """The job's record in one stored snapshot, or None when it does not list it."""
    return job_records(stored.id, [job_id]).get(job_id)


@dataclass(frozen=True)
class Allocation:
    """Where the job ran, as the last snapshot of its life that lists its allocation says."""

    as_of: datetime | None
    pods: list[dict[str, Any]]  # node, gpus, uuids?, share?
    record: dict[str, Any]

    @property
    def nodes(self) -> list[str]:
        return sorted({str(p["node"]) for p in self.pods})


def _allocation(life: list[StoredSnapshot], job_id: str) -> Allocation:
    """The newest snapshot of the job's life listing its allocation (at most a few looked at)."""
    fallback: dict[str, Any] = {}
    for stored in reversed(life[-5:]):
        record = job_record_in(stored, job_id)
        if record is None:
            continue
        fallback = fallback or record
        if record.get("allocation"):
            return Allocation(stored.as_of, list(record["allocation"]), record)
    return Allocation(None, [], fallback)


def _units_by_uuid(stored: StoredSnapshot, nodes: list[str]) -> dict[str, GpuKey]:
    """The GPU units of ``nodes`` in one snapshot, by UUID."""
    found: dict[str, GpuKey] = {}
    for node in nodes:
        view = node_view(stored.id, node)
        for key, gpu in view.metrics.gpus.items() if view else ():
            if gpu["uuid"]:
                found[gpu["uuid"]] = key
    return found


def allocation_keys(allocation: Allocation, stored: StoredSnapshot | None) -> list[GpuKey]:
    """The GPU units the job holds: (node, index, MIG instance), a MIG instance found by the
    UUID the allocation names (in ``stored``'s GPUs)."""
    by_uuid: dict[str, GpuKey] | None = None
    keys: list[GpuKey] = []
    for pod in allocation.pods:
        node, uuids = str(pod["node"]), pod.get("uuids") or []
        for i, index in enumerate(pod.get("gpus") or ()):
            uuid = uuids[i] if i < len(uuids) else None
            key: GpuKey = (node, int(index), -1)
            if uuid and stored is not None:
                if by_uuid is None:
                    by_uuid = _units_by_uuid(stored, allocation.nodes)
                key = by_uuid.get(uuid, key)
            keys.append(key)
    return keys


@dataclass(frozen=True)
class Efficiency:
    """What the job's GPUs did over its life, from the sampled snapshots."""

    gpu_hours: float | None
    busy_gpu_hours: float | None
    productive_gpu_hours: float | None
    util_mean: float | None
    tensor_mean: float | None
    fb_mean: float | None
    mfu: float | None
    mfu_method: str
    run_s: float | None
    # a gang that has not started but holds the GPUs of its bound pods (issue #32 item 11):
    # gpu_hours are then those GPUs × the time since it became partial
    held_gpus: int = 0
    held_s: float | None = None


def _mean(values: Iterable[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) / len(known) if known else None


def efficiency(
    job: Job,
    as_of: datetime | None,
    series: Mapping[GpuKey, list[dict[str, Any]]],
    record: Mapping[str, Any],
    gpu_model: str | None,
) -> Efficiency:
    """GPU-hours the job held (GPUs × run time), the busy part (× mean utilization) and the
    productive part (× MFU); MFU from the TFLOP/s the job reports over its GPU model's peak,
    else tensor-core activity as a proxy (the method ``low-mfu`` uses)."""
    end = job.ended_at or as_of
    run_s = max(0.0, (end - job.started_at).total_seconds()) if job.started_at and end else None
    points = [row for rows in series.values() for row in rows]
    util = _mean(r["util"] for r in points)
    tensor = _mean(r["tensor_active"] for r in points)
    fb = _mean(r["fb_used_frac"] for r in points)
    tflops = record.get("achieved_tflops_per_gpu")
    peak = peak_tflops(gpu_model)
    mfu, method = None, ""
    if isinstance(tflops, int | float) and peak == peak and peak > 0:
        mfu, method = min(1.0, float(tflops) / peak), "reported_tflops"
    elif tensor is not None:
        mfu, method = tensor, "tensor_active_proxy"
    gpu_hours = job.gpus * run_s / 3600 if run_s is not None else None
    held_gpus, held_s = 0, None
    partial_since = parse_time(record.get("partial_since"))
    if run_s is None and partial_since is not None and as_of is not None:
        held_gpus = sum(
            len(pod.get("gpus") or ())
            for pod in record.get("allocation") or ()
            if isinstance(pod, Mapping)
        )
        held_s = max(0.0, (as_of - partial_since).total_seconds())
        gpu_hours = held_gpus * held_s / 3600 if held_gpus else None
    return Efficiency(
        gpu_hours=gpu_hours,
        busy_gpu_hours=gpu_hours * util if gpu_hours is not None and util is not None else None,
        productive_gpu_hours=gpu_hours * mfu if gpu_hours is not None and mfu is not None else None,
        util_mean=util,
        tensor_mean=tensor,
        fb_mean=fb,
        mfu=mfu,
        mfu_method=method,
        run_s=run_s,
        held_gpus=held_gpus,
        held_s=held_s,
    )


def _incidents_hitting(request: HttpRequest, cluster: Cluster, job: Job, nodes: list[str]):
    """Incidents that list the job among the jobs they hit (``details.jobs``)."""
    candidates = incidents_for_user(request.user, cluster)
    if nodes:
        candidates = candidates.filter(node__in=nodes)
    hit = []
    for incident in candidates.order_by("-opened_at", "-id")[:200]:
        jobs = (incident.details or {}).get("jobs") or ()
        if any(isinstance(j, Mapping) and j.get("id") == job.external_id for j in jobs):
            hit.append(incident)
    return hit


@require_safe
def job_detail(request: HttpRequest, name: str, job_id: str) -> HttpResponse:
    """One job's efficiency report: its record and wait, its allocation (nodes, GPUs, MIG),
    per-GPU util, memory and tensor activity over its life, MFU and its method, GPU-hours and
    productive GPU-hours, findings, incidents that hit it, preemptions and why."""
    cluster = get_cluster_for_user(request.user, name)
    job = get_job_for_user(request.user, cluster, job_id)
    life = _life_snapshots(cluster, job)
    allocation = _allocation(life, job.external_id) if life else Allocation(None, [], {})
    keys = allocation_keys(allocation, life[-1] if life else None)
    start = life[0].as_of if life else None
    end = life[-1].as_of if life else None
    series: dict[GpuKey, list[dict[str, Any]]] = {}
    if keys and start is not None and job.started_at is not None:
        series = gpu_series(cluster, keys, start, end, LIFE_POINTS)
    latest_as_of = (
        Snapshot.objects.filter(cluster=cluster)
        .order_by("-as_of")
        .values_list("as_of", flat=True)
        .first()
    )
    gpu_model = None
    if allocation.pods and life and keys:
        view = node_view(life[-1].id, keys[0][0])
        gpu_model = view.metrics.model_of(keys[0]) if view else None
    report = efficiency(job, latest_as_of, series, allocation.record, gpu_model)
    labels = {k: f"{k[0]}/{k[1]}" + (f" MIG {k[2]}" if k[2] >= 0 else "") for k in keys}
    findings = list(
        with_summary_text(
            findings_for_user(request.user, cluster)
            .filter(
                Q(subject=f"job:{job.external_id}")
                | Q(subject__startswith="jobs:", subject__contains=job.external_id)
            )
            .defer("evidence")
        ).order_by("-last_seen", "-id")
    )
    findings = [
        f
        for f in findings
        if f.subject == f"job:{job.external_id}"
        or job.external_id in f.subject.partition(":")[2].split("+")
    ]
    preemptions = list(
        SchedulerEvent.objects.filter(
            cluster=cluster, job_external_id=job.external_id, kind__in=PREEMPTION_EVENTS
        ).order_by("-time", "-id")[:50]
    )
    prime_texts_for_user(  # the texts below, a manager's words looked up at once
        request.user,
        cluster.pk,
        [f.summary for f in findings] + [t for e in preemptions for t in (e.reason, e.message)],
    )
    gpu_rows = [
        {
            "key": k,
            "label": labels[k],
            "util": _mean(r["util"] for r in series.get(k, ())),
            "fb": _mean(r["fb_used_frac"] for r in series.get(k, ())),
            "tensor": _mean(r["tensor_active"] for r in series.get(k, ())),
            "points": len(series.get(k, ())),
        }
        for k in keys
    ]
    known = [row["util"] for row in gpu_rows if row["util"] is not None]
    gpu_summary = {
        "gpus": len(gpu_rows),
        "nodes": len({row["key"][0] for row in gpu_rows}),
        "silent": sum(1 for row in gpu_rows if not row["points"]),
        "util": sum(known) / len(known) if known else None,
    }
    drains = job_drains(cluster, job.external_id)
    context: dict[str, Any] = {
        "cluster": cluster,
        "section": "jobs",
        "job": job,
        "wait_s": wait_s(job, latest_as_of),
        "size_class": size_class(job.gpus),
        "as_of": latest_as_of,
        "findings": findings,
        "drains": drains,  # issue #16: why it was preempted
        # issue #32 item 7: without the scheduler's event, the applied drain says why
        "drain_preemptions": [d for d in drains if d["applied"]],
        "allocation": allocation,
        "gpu_rows": gpu_rows,
        "gpu_summary": gpu_summary,
        "report": report,
        "GPU_ROWS_OPEN": GPU_ROWS_OPEN,
        "incidents": _incidents_hitting(request, cluster, job, allocation.nodes),
        "preemption_events": preemptions,
        "pending_reason": allocation.record.get("pending_reason"),
        "preemption_kinds": dict(SchedulerEventKind.choices),
        "forecast": job_forecast(request.user, cluster, job),  # issue #33
    }
    if series:
        for metric, element in (
            ("util", "job-util"),
            ("fb_used_frac", "job-fb"),
            ("tensor_active", "job-tensor"),
        ):
            context[f"{metric}_chart"] = embed(
                gpus_util_series({labels[k]: series[k] for k in keys}, metric),
                element,
                label=str(_("Each of the job's GPUs over its life")),
            )
    return render(request, "diagnosis/report_job.html", context)
