"""Start-time forecasts of pending jobs (issue #33, docs/forecasts.md): after a cycle commits,
:func:`forecast_after_cycle` sends the task ``estimate_forecasts`` to the ``impact`` queue (at
most once per ``GPUOBS_FORECAST_SECONDS`` of snapshot time); :func:`record_forecasts` replays
the cluster's latest snapshot (``diagnosis.core.forecast``) and replaces the cluster's forecast
rows, one per pending job, in one transaction."""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Max

from diagnosis.actions.enqueue import forecast_on_commit
from diagnosis.actions.workflow.base import OPEN_STATES
from diagnosis.choices import FindingState
from diagnosis.core import snapshot as snapshot_format
from diagnosis.core.forecast.runtimes import RuntimeSample
from diagnosis.core.forecast.starts import Forecast, forecast_settings_for, forecast_starts
from diagnosis.models import Cluster, Finding, Job, JobForecast, Recommendation, Snapshot

logger = logging.getLogger(__name__)

HISTORY_DAYS = 7
HISTORY_JOBS = 5000  # the newest ended jobs the runtimes are learned from


def forecast_after_cycle(cluster: Cluster, as_of: Any, pending: int) -> bool:
    """Send the cluster's forecast once the cycle commits, unless its last forecast is less than
    ``GPUOBS_FORECAST_SECONDS`` older than ``as_of`` (or forecasts are off). With no job
    ``pending`` nothing is sent and the cluster's forecasts are dropped. Whether it sent."""
    period = settings.GPUOBS_FORECAST_SECONDS
    if period <= 0:
        return False
    if pending == 0:
        JobForecast.objects.filter(cluster=cluster).delete()
        return False
    last = JobForecast.objects.filter(cluster=cluster).aggregate(last=Max("as_of"))["last"]
    if last is not None and (as_of - last).total_seconds() < period:
        return False
    forecast_on_commit(cluster.pk)
    return True


def record_forecasts(cluster_id: int) -> dict[str, Any]:
    """Forecast the pending jobs of the cluster's latest snapshot and store them (replacing the
    cluster's earlier forecasts); says what it did. A redelivered task finds the snapshot
    forecast already and does nothing."""
    cluster = Cluster.objects.filter(pk=cluster_id).first()
    if cluster is None:
        return {"outcome": "skipped", "why": "no such cluster"}
    row = Snapshot.objects.filter(cluster=cluster).order_by("-as_of", "-id").first()
    if row is None:
        return {"outcome": "skipped", "why": "no snapshot"}
    if JobForecast.objects.filter(cluster=cluster, as_of=row.as_of).exists():
        return {"outcome": "skipped", "why": "forecast already", "as_of": row.as_of.isoformat()}
    snap = snapshot_format.load(row.load_document())
    findings = _active_findings(cluster)
    replay_settings, model = forecast_settings_for(
        int(snap.nodes["gpus"].sum()), reduced_from_gpus=settings.GPUOBS_IMPACT_REDUCED_FROM_GPUS
    )
    forecast = forecast_starts(
        snap,
        findings=findings,
        history=runtime_history(cluster, row.as_of),
        settings=replay_settings,
        model=model,
    )
    stored = store_forecast(cluster, forecast, findings)
    return {
        "outcome": "forecast",
        "as_of": row.as_of.isoformat(),
        "jobs": stored,
        "model": model,
        "cpu_s": forecast.cpu_s,
    }


def _active_findings(cluster: Cluster) -> dict[tuple[str, str], int]:
    rows = Finding.objects.filter(
        cluster=cluster, state__in=[FindingState.PENDING, FindingState.FIRING]
    ).values_list("rule_id", "subject", "pk")
    return {(rule, subject): pk for rule, subject, pk in rows}


def runtime_history(cluster: Cluster, as_of: Any) -> list[RuntimeSample]:
    """Runtimes of the cluster's jobs that ended in the last :data:`HISTORY_DAYS` days before
    ``as_of`` (the newest :data:`HISTORY_JOBS`)."""
    rows = (
        Job.objects.filter(
            cluster=cluster,
            started_at__isnull=False,
            ended_at__isnull=False,
            ended_at__gte=as_of - timedelta(days=HISTORY_DAYS),
            ended_at__lte=as_of,
        )
        .order_by("-ended_at")
        .values_list("kind", "tenant__name", "started_at", "ended_at")[:HISTORY_JOBS]
    )
    return [
        RuntimeSample(kind or "", tenant or "", (ended - started).total_seconds())
        for kind, tenant, started, ended in rows
    ]


def store_forecast(
    cluster: Cluster, forecast: Forecast, findings: dict[tuple[str, str], int]
) -> int:
    """Replace the cluster's forecast rows by ``forecast``'s, bulk; how many were stored (a job
    the inventory does not hold yet is left out)."""
    as_of = forecast.as_of.to_pydatetime()
    jobs = dict(
        Job.objects.filter(
            cluster=cluster, external_id__in=[f.job for f in forecast.jobs]
        ).values_list("external_id", "pk")
    )
    linked = {findings[f.cause.finding] for f in forecast.jobs if f.cause.finding in findings}
    recommendation_of: dict[int, int] = {}
    for finding_pk, rec_pk in (
        Recommendation.objects.filter(
            cluster=cluster, state__in=OPEN_STATES, motivating_findings__in=linked
        )
        .order_by("pk")
        .values_list("motivating_findings", "pk")
    ):
        recommendation_of.setdefault(finding_pk, rec_pk)

    def moment(seconds: float | None) -> Any:
        return None if seconds is None else as_of + timedelta(seconds=seconds)

    rows = []
    for f in forecast.jobs:
        if f.job not in jobs:
            continue
        finding_pk = findings.get(f.cause.finding) if f.cause.finding else None
        rows.append(
            JobForecast(
                cluster=cluster,
                job_id=jobs[f.job],
                as_of=as_of,
                start_at=moment(f.start_s),
                low_at=moment(f.low_s),
                high_at=moment(f.high_s),
                horizon_s=forecast.settings.horizon_s,
                seeds=f.seeds,
                started_in=f.started_in,
                cause=f.cause.kind,
                figures=dict(f.cause.figures),
                finding_id=finding_pk,
                recommendation_id=recommendation_of.get(finding_pk) if finding_pk else None,
            )
        )
    with transaction.atomic():
        JobForecast.objects.filter(cluster=cluster).delete()
        JobForecast.objects.bulk_create(rows, batch_size=2000)
    return len(rows)
