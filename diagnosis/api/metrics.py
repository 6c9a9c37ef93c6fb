"""``GET /metrics``: gpuobs's state in Prometheus's text exposition format (prometheus_client).

Cheap to scrape: one :class:`GpuobsCollector` reads what the cycles stored -- the latest cycle of
each cluster, the last hour of rollups, counts of findings, recommendations and incidents, the
notification channels' counters -- in a fixed number of queries whatever the number of clusters,
GPUs or jobs, and never runs a rule. Label values are the snapshot's own names (the library
escapes them). Every family but ``gpuobs_build_info`` and the ``gpuobs_component_*`` heartbeat
gauges has a ``cluster`` label; names follow
Prometheus's conventions (base units, ``_ratio``, ``_total``), which ``promtool check metrics``
checks (tests/app/notify/test_metrics.py). Cardinality is bounded by rules × severities
× states, buckets × pools, tenants, recommendation kinds × states, and at most
``GPUOBS_METRICS_MAX_FINDING_SERIES`` per-finding series per cluster (docs/integrations.md,
"/metrics").

Authentication: a DRF token (``Authorization: Bearer <token>`` or ``Token <token>``, Prometheus's
``authorization`` scrape setting) or HTTP basic auth (``basic_auth``) of a user with a reading role
that is not tenant-scoped (a tenant-scoped manager gets 403: the metrics are cluster-wide).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator, Sequence
from datetime import datetime, timedelta
from typing import Any

import numpy as np
from django.conf import settings
from django.db.models import (
    Case,
    Count,
    F,
    IntegerField,
    OuterRef,
    Q,
    Subquery,
    Sum,
    Value,
    When,
    Window,
)
from django.db.models.fields.json import KT
from django.db.models.functions import RowNumber
from django.http import HttpResponse
from django.utils import timezone
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4
from prometheus_client.registry import Collector
from rest_framework.authentication import BasicAuthentication, SessionAuthentication
from rest_framework.permissions import BasePermission
from rest_framework.views import APIView

from diagnosis.access import clusters_for_user
from diagnosis.actions.upkeep.health import COMPONENTS, component_health
from diagnosis.api.auth import AUTHENTICATION
from diagnosis.choices import FindingState, IncidentState
from diagnosis.core import fairness
from diagnosis.core.accounting import BUCKETS
from diagnosis.core.cost import tenant_cost
from diagnosis.models import (
    Cluster,
    ClusterCycle,
    DeliveryState,
    Finding,
    Incident,
    JobForecast,
    PoolRollup,
    Recommendation,
    TenantRollup,
)
from diagnosis.reports.pricing import pricings
from diagnosis.roles import can_read, is_tenant_scoped
from gpuobs import __version__

HOUR = timedelta(hours=1)
# upper bounds of gpuobs_cycle_duration_seconds's buckets: a cycle takes seconds (the budget
# in docs/architecture.md), a slow one minutes, the task time limit is 300 s by default
CYCLE_SECONDS_BUCKETS = (0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
# predicted waits of pending jobs (docs/forecasts.md): a minute to a day
FORECAST_WAIT_BUCKETS = (60.0, 300.0, 900.0, 1800.0, 3600.0, 7200.0, 14400.0, 43200.0, 86400.0)
OPEN_FINDING_STATES = (FindingState.PENDING, FindingState.FIRING)
OPEN_INCIDENT_STATES = (IncidentState.OPEN, IncidentState.ACKNOWLEDGED, IncidentState.MITIGATING)
SEVERITY_RANK = {"critical": 0, "warning": 1, "info": 2}
SEVERITY_ORDER = Case(
    *(When(severity=s, then=Value(rank)) for s, rank in SEVERITY_RANK.items()),
    default=Value(3),
    output_field=IntegerField(),
)
CYCLE_FIELDS = (
    "id",
    "cluster_id",
    "as_of",
    "ran_at",
    "seconds",
    "ok",
    "gpus",
    "allocated_gpus",
    "allocation_utilization",
    "activity_utilization",
    "coverage",
    "data_age_s",
)


def _latest(ok_only: bool) -> Subquery:
    cycles = ClusterCycle.objects.filter(cluster=OuterRef("pk"))
    if ok_only:
        cycles = cycles.filter(ok=True)
    return Subquery(cycles.order_by("-as_of", "-id").values("pk")[:1])


def _number(value: Any) -> float | None:
    try:
        return None if value is None else float(value)
    except (TypeError, ValueError):
        return None


class GpuobsCollector(Collector):
    """Every gpuobs family, read from stored rows for the clusters ``clusters`` names."""

    def __init__(self, clusters: Sequence[Cluster], *, now: datetime | None = None) -> None:
        self.clusters = list(clusters)
        self.now = now or timezone.now()

    def collect(self) -> Iterator[Metric]:
        names = {c.pk: c.name for c in self.clusters}
        ids = list(names)
        latest_ids = {c.pk: (c.latest_ok_id, c.latest_id) for c in self.clusters}
        wanted = {i for pair in latest_ids.values() for i in pair if i}
        cycles = {
            row["id"]: row
            for row in ClusterCycle.objects.filter(pk__in=wanted).values(
                *CYCLE_FIELDS, productive=KT("accounting__cluster__productive_gpus")
            )
        }
        good = {cid: cycles.get(ok_id) for cid, (ok_id, _) in latest_ids.items() if ok_id}
        last = {cid: cycles.get(any_id) for cid, (_, any_id) in latest_ids.items() if any_id}
        yield from self._build_families()
        yield from self._cycle_families(names, good, last)
        yield from self._cycle_duration_families(names, ids)
        yield from self._finding_families(names, ids)
        yield from self._rollup_families(names, good)
        yield from self._recommendation_families(names, ids)
        yield from self._incident_families(names, ids)
        yield from self._delivery_families(names, ids)
        yield from self._forecast_families(names, ids)

    # -- the build, cycles ------------------------------------------------------------------------

    def _build_families(self) -> Iterator[Metric]:
        info = GaugeMetricFamily(
            "gpuobs_build_info",
            "Always 1; the gpuobs version serving this scrape (pyproject.toml's).",
            labels=["version"],
        )
        info.add_metric([__version__], 1)
        yield info
        # the worker's and beat's heartbeats, as /healthz?deep=1 reads them (no database query:
        # judged by this scrape's clock; embedded mode: always up)
        up = GaugeMetricFamily(
            "gpuobs_component_up",
            "1 when the component's heartbeat is fresh (a worker took beat's heartbeat task, "
            "beat sent a task), else 0 (docs/operations.md, Faults and supervision).",
            labels=["component"],
        )
        age = GaugeMetricFamily(
            "gpuobs_component_heartbeat_age_seconds",
            "Age of the component's latest heartbeat.",
            labels=["component"],
        )
        for component in COMPONENTS:
            health = component_health(component, self.now)
            up.add_metric([component], 1.0 if health.ok else 0.0)
            if health.age_s is not None:
                age.add_metric([component], health.age_s)
        yield from (up, age)

    def _cycle_duration_families(self, names, ids) -> Iterator[Metric]:
        """Every stored cycle's wall time, as a histogram per cluster (one query; the counts go
        down when the retention prunes old cycles, which rate() reads as a counter reset)."""
        family = HistogramMetricFamily(
            "gpuobs_cycle_duration_seconds",
            "Wall time of the cluster's stored cycles.",
            labels=["cluster"],
        )
        bounds = {f"le_{i}": bound for i, bound in enumerate(CYCLE_SECONDS_BUCKETS)}
        rows = (
            ClusterCycle.objects.filter(cluster_id__in=ids)
            .values("cluster_id")
            .annotate(
                n=Count("id"),
                total=Sum("seconds"),
                **{key: Count("id", filter=Q(seconds__lte=b)) for key, b in bounds.items()},
            )
            .order_by("cluster_id")
        )
        for row in rows:
            buckets = [(str(b), row[key]) for key, b in bounds.items()]
            family.add_metric(
                [names[row["cluster_id"]]], [*buckets, ("+Inf", row["n"])], row["total"] or 0.0
            )
        yield family

    # -- cycles ---------------------------------------------------------------------------------

    def _forecast_families(self, names, ids) -> Iterator[Metric]:
        """The pending jobs' predicted waits from their forecast's snapshot to their start (one
        query); a job the forecast puts past its horizon counts only in ``+Inf`` and not in the
        sum (issue #33, docs/forecasts.md)."""
        family = HistogramMetricFamily(
            "gpuobs_forecast_wait_seconds",
            "Predicted time from the forecast's snapshot to the start of each pending job.",
            labels=["cluster"],
        )
        waits: dict[int, list[float | None]] = defaultdict(list)
        for cluster_id, as_of, start_at in JobForecast.objects.filter(
            cluster_id__in=ids, job__state="pending"
        ).values_list("cluster_id", "as_of", "start_at"):
            waits[cluster_id].append(
                None if start_at is None else max((start_at - as_of).total_seconds(), 0.0)
            )
        for cluster_id in sorted(waits):
            known = np.array([w for w in waits[cluster_id] if w is not None], dtype=float)
            buckets = [(str(b), int((known <= b).sum())) for b in FORECAST_WAIT_BUCKETS]
            family.add_metric(
                [names[cluster_id]],
                [*buckets, ("+Inf", len(waits[cluster_id]))],
                float(known.sum()),
            )
        yield family

    def _cycle_families(self, names, good, last) -> Iterator[Metric]:
        def gauge(name: str, doc: str, unit_rows: dict[int, float | None]) -> Metric:
            family = GaugeMetricFamily(name, doc, labels=["cluster"])
            for cid, value in sorted(unit_rows.items()):
                if value is not None:
                    family.add_metric([names[cid]], value)
            return family

        yield gauge(
            "gpuobs_cycle_up",
            "1 when the cluster's latest cycle succeeded, 0 when it failed.",
            {cid: 1.0 if row["ok"] else 0.0 for cid, row in last.items() if row},
        )
        yield gauge(
            "gpuobs_cycle_last_duration_seconds",
            "Wall time of the cluster's latest cycle.",
            {cid: row["seconds"] for cid, row in last.items() if row},
        )
        yield gauge(
            "gpuobs_cycle_last_success_timestamp_seconds",
            "When the latest successful cycle ran (Unix time).",
            {cid: row["ran_at"].timestamp() for cid, row in good.items() if row},
        )
        yield gauge(
            "gpuobs_snapshot_timestamp_seconds",
            "Snapshot time the latest successful cycle judged (Unix time).",
            {cid: row["as_of"].timestamp() for cid, row in good.items() if row},
        )
        yield gauge(
            "gpuobs_collection_coverage_ratio",
            "GPUs the metrics source answered for / GPUs expected, latest successful cycle.",
            {cid: _number(row["coverage"]) for cid, row in good.items() if row},
        )
        yield gauge(
            "gpuobs_data_age_seconds",
            "Age of the newest data gpuobs judged, now (0 when a simulated clock runs ahead).",
            {
                cid: max((row["data_age_s"] or 0.0) + (self.now - row["ran_at"]).total_seconds(), 0)
                for cid, row in good.items()
                if row
            },
        )
        yield gauge(
            "gpuobs_gpus",
            "GPUs of the cluster in the latest successful cycle.",
            {cid: float(row["gpus"]) for cid, row in good.items() if row},
        )
        yield gauge(
            "gpuobs_allocation_ratio",
            "GPUs held by jobs / GPUs, latest successful cycle.",
            {cid: _number(row["allocation_utilization"]) for cid, row in good.items() if row},
        )
        yield gauge(
            "gpuobs_activity_ratio",
            "Mean GPU activity (util) over the GPUs with metrics, latest successful cycle.",
            {cid: _number(row["activity_utilization"]) for cid, row in good.items() if row},
        )
        yield gauge(
            "gpuobs_productive_ratio",
            "MFU-weighted busy GPUs / GPUs (productive GPU-hours share), latest successful cycle.",
            {
                cid: _number(row["productive"]) / row["gpus"]
                for cid, row in good.items()
                if row and row["gpus"] and _number(row["productive"]) is not None
            },
        )

    # -- findings -------------------------------------------------------------------------------

    def _finding_families(self, names, ids) -> Iterator[Metric]:
        counts = GaugeMetricFamily(
            "gpuobs_findings",
            "Open findings (pending or firing) by rule, severity and state.",
            labels=["cluster", "rule", "severity", "state"],
        )
        rows = (
            Finding.objects.filter(cluster_id__in=ids, state__in=OPEN_FINDING_STATES)
            .values("cluster_id", "rule_id", "severity", "state")
            .annotate(n=Count("id"))
            .order_by("cluster_id", "rule_id", "severity", "state")
        )
        for row in rows:
            counts.add_metric(
                [names[row["cluster_id"]], row["rule_id"], row["severity"], row["state"]],
                row["n"],
            )
        yield counts
        cap = settings.GPUOBS_METRICS_MAX_FINDING_SERIES
        info = GaugeMetricFamily(
            "gpuobs_finding_info",
            f"One series (value 1) per firing finding, the most severe and oldest first, at most "
            f"{cap} per cluster (gpuobs_finding_info_dropped counts the rest).",
            labels=["cluster", "rule", "subject", "severity", "pool", "tenant", "finding_id"],
        )
        ranked = (
            Finding.objects.filter(cluster_id__in=ids, state=FindingState.FIRING)
            .annotate(
                rank=Window(
                    RowNumber(),
                    partition_by=[F("cluster_id")],
                    order_by=[SEVERITY_ORDER.asc(), F("firing_since").asc(), F("id").asc()],
                ),
                pool=KT("evidence__pool"),
            )
            .filter(rank__lte=cap)
            .values("id", "cluster_id", "rule_id", "subject", "severity", "pool", "tenant__name")
        )
        rows = sorted(ranked, key=lambda r: (r["cluster_id"], SEVERITY_RANK.get(r["severity"], 3)))
        shown: dict[int, int] = defaultdict(int)
        for row in rows:
            subject = row["subject"]
            pool = subject.removeprefix("pool:") if subject.startswith("pool:") else row["pool"]
            info.add_metric(
                [
                    names[row["cluster_id"]],
                    row["rule_id"],
                    subject,
                    row["severity"],
                    pool or "",
                    row["tenant__name"] or "",
                    str(row["id"]),
                ],
                1,
            )
            shown[row["cluster_id"]] += 1
        yield info
        firing = dict(
            Finding.objects.filter(cluster_id__in=ids, state=FindingState.FIRING)
            .values("cluster_id")
            .annotate(n=Count("id"))
            .values_list("cluster_id", "n")
        )
        dropped = GaugeMetricFamily(
            "gpuobs_finding_info_dropped",
            "Firing findings left out of gpuobs_finding_info by its per-cluster cap.",
            labels=["cluster"],
        )
        for cid in sorted(names):
            dropped.add_metric([names[cid]], max(firing.get(cid, 0) - shown.get(cid, 0), 0))
        yield dropped

    # -- rollups: GPU-hours, fairness -------------------------------------------------------------

    def _rollup_families(self, names, good) -> Iterator[Metric]:
        windows = Q(pk__in=[])
        for cid, row in good.items():
            if row:
                windows |= Q(cluster_id=cid, as_of__gt=row["as_of"] - HOUR, as_of__lte=row["as_of"])
        columns = {bucket: fairness.BUCKET_COLUMNS[bucket] for bucket in BUCKETS}
        pool_rows = list(
            PoolRollup.objects.filter(windows)
            .values("cluster_id", "pool")
            .annotate(**{c: Sum(c) for c in fairness.CLUSTER_SUMS})
            .order_by("cluster_id", "pool")
        )
        hours = GaugeMetricFamily(
            "gpuobs_last_hour_gpu_seconds",
            "GPU-seconds of the last hour of snapshots by accounting bucket (/ 3600: GPU-hours); "
            'pool "" is the whole cluster.',
            labels=["cluster", "pool", "bucket"],
        )
        cluster_sums: dict[int, dict[str, float]] = {}
        for row in pool_rows:
            for bucket, column in columns.items():
                hours.add_metric(
                    [names[row["cluster_id"]], row["pool"], bucket], row[column] or 0.0
                )
            if row["pool"] == "":
                cluster_sums[row["cluster_id"]] = row
        yield hours
        totals = CounterMetricFamily(
            "gpuobs_gpu_seconds",
            "GPU-seconds accounted per bucket over every stored cycle of the cluster.",
            labels=["cluster", "bucket"],
        )
        for row in (
            PoolRollup.objects.filter(cluster_id__in=list(names), pool="")
            .values("cluster_id")
            .annotate(**{c: Sum(c) for c in columns.values()})
            .order_by("cluster_id")
        ):
            for bucket, column in columns.items():
                totals.add_metric([names[row["cluster_id"]], bucket], row[column] or 0.0)
        yield totals

        tenant_rows = (
            TenantRollup.objects.filter(windows)
            .values("cluster_id", "tenant_name")
            .annotate(**{c: Sum(c) for c in fairness.TENANT_SUMS})
            .order_by("cluster_id", "tenant_name")
        )
        by_cluster: dict[int, dict[str, dict[str, float]]] = defaultdict(dict)
        for row in tenant_rows:
            by_cluster[row["cluster_id"]][row["tenant_name"]] = row
        ratio = GaugeMetricFamily(
            "gpuobs_tenant_fair_share_ratio",
            "Usage / demand-aware fair share over the last hour (1 is fair, below 1 got less).",
            labels=["cluster", "tenant"],
        )
        usage = GaugeMetricFamily(
            "gpuobs_tenant_usage_ratio",
            "Allocated GPU-seconds / usable GPU-seconds of the cluster, last hour.",
            labels=["cluster", "tenant"],
        )
        fair = GaugeMetricFamily(
            "gpuobs_tenant_fair_share_of_cluster_ratio",
            "Water-filled fair GPU-seconds / usable GPU-seconds of the cluster, last hour.",
            labels=["cluster", "tenant"],
        )
        jain = GaugeMetricFamily(
            "gpuobs_jain_index",
            "Jain's index over the fairness ratios of tenants with demand, last hour.",
            labels=["cluster"],
        )
        # money only for priced clusters: no series at all rather than a 0 (docs/accounting.md)
        held_cost = GaugeMetricFamily(
            "gpuobs_tenant_last_hour_cost",
            "Allocated GPU-hours of the tenant's jobs in the last hour × the cluster's price per "
            "GPU-hour, to the cent; priced clusters only.",
            labels=["cluster", "tenant", "currency"],
        )
        wasted_cost = GaugeMetricFamily(
            "gpuobs_tenant_last_hour_wasted_cost",
            "GPU-hours the tenant's jobs held by partial gangs, hung, idle or data-starved in the "
            "last hour × the price per GPU-hour, to the cent; priced clusters only.",
            labels=["cluster", "tenant", "currency"],
        )
        prices = pricings(self.clusters)
        for cid, tenants in sorted(by_cluster.items()):
            report = fairness.fairness_report(tenants, cluster_sums.get(cid, {}))
            for row in report.tenants:
                if row.ratio is not None:
                    ratio.add_metric([names[cid], row.tenant], row.ratio)
                if row.usage is not None:
                    usage.add_metric([names[cid], row.tenant], row.usage)
                if row.fair_share is not None:
                    fair.add_metric([names[cid], row.tenant], row.fair_share)
                cost = tenant_cost(prices[cid], row.allocated_gpu_hours, row.buckets)
                if cost is not None:
                    key = [names[cid], row.tenant, cost.held.currency]
                    held_cost.add_metric(key, float(cost.held.amount))
                    wasted_cost.add_metric(key, float(cost.wasted.amount))
            if report.jain_index is not None:
                jain.add_metric([names[cid]], report.jain_index)
        yield from (ratio, usage, fair, jain, held_cost, wasted_cost)

    # -- recommendations, incidents, notifications ---------------------------------------------

    def _recommendation_families(self, names, ids) -> Iterator[Metric]:
        family = GaugeMetricFamily(
            "gpuobs_recommendations",
            "Recommendations by kind and workflow state.",
            labels=["cluster", "kind", "state"],
        )
        for row in (
            Recommendation.objects.filter(cluster_id__in=ids)
            .values("cluster_id", "kind", "state")
            .annotate(n=Count("id"))
            .order_by("cluster_id", "kind", "state")
        ):
            family.add_metric([names[row["cluster_id"]], row["kind"], row["state"]], row["n"])
        yield family

    def _incident_families(self, names, ids) -> Iterator[Metric]:
        family = GaugeMetricFamily(
            "gpuobs_incidents_open",
            "Open or acknowledged incidents by severity (the Xid catalog's).",
            labels=["cluster", "severity"],
        )
        counts: dict[tuple[int, str], int] = defaultdict(int)
        for row in (
            Incident.objects.filter(cluster_id__in=ids, state__in=OPEN_INCIDENT_STATES)
            .values("cluster_id", severity=KT("details__xid__severity"), kind=KT("details__kind"))
            .annotate(n=Count("id"))
            .order_by()
        ):
            severity = row["severity"] or ("critical" if row["kind"] == "gpu-health" else "warning")
            counts[(row["cluster_id"], severity)] += row["n"]
        for (cid, severity), n in sorted(counts.items()):
            family.add_metric([names[cid], severity], n)
        yield family

    def _delivery_families(self, names, ids) -> Iterator[Metric]:
        rows = list(
            DeliveryState.objects.filter(cluster_id__in=ids).order_by("cluster_id", "channel")
        )
        labels = ["cluster", "channel"]
        sent = CounterMetricFamily(
            "gpuobs_notifications_sent", "Successful sends per channel.", labels=labels
        )
        failed = CounterMetricFamily(
            "gpuobs_notification_failures",
            "Sends that failed after their retries, per channel.",
            labels=labels,
        )
        attempts = CounterMetricFamily(
            "gpuobs_notification_attempts",
            "Requests made per channel (retries included).",
            labels=labels,
        )
        alerts = CounterMetricFamily(
            "gpuobs_notification_alerts_sent",
            "Alerts or notices delivered per channel.",
            labels=labels,
        )
        failing = GaugeMetricFamily(
            "gpuobs_notification_consecutive_failures",
            "Failed sends since the last success, per channel.",
            labels=labels,
        )
        success = GaugeMetricFamily(
            "gpuobs_notification_last_success_timestamp_seconds",
            "When the channel last delivered (Unix time).",
            labels=labels,
        )
        for row in rows:
            key = [names[row.cluster_id], row.channel]
            sent.add_metric(key, row.deliveries_total)
            failed.add_metric(key, row.failures_total)
            attempts.add_metric(key, row.attempts_total)
            alerts.add_metric(key, row.alerts_sent_total)
            failing.add_metric(key, row.consecutive_failures)
            if row.last_success_at:
                success.add_metric(key, row.last_success_at.timestamp())
        yield from (sent, failed, attempts, alerts, failing, success)


def exposition(clusters: Sequence[Cluster], *, now: datetime | None = None) -> bytes:
    """The text exposition of ``clusters`` (annotated by :func:`readable_clusters`)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(GpuobsCollector(clusters, now=now))
    return generate_latest(registry)


def readable_clusters(user: Any) -> list[Cluster]:
    return list(
        clusters_for_user(user)
        .annotate(latest_ok_id=_latest(ok_only=True), latest_id=_latest(ok_only=False))
        .only("id", "name")
        .order_by("name")
    )


class CanScrape(BasePermission):
    message = "scraping /metrics needs a reading role that is not limited to some tenants"

    def has_permission(self, request: Any, view: Any) -> bool:
        user = request.user
        return bool(
            user and user.is_authenticated and can_read(user) and not is_tenant_scoped(user)
        )


class MetricsView(APIView):
    """``GET /metrics`` (and ``/api/v1/metrics``)."""

    # the API's tokens (hashed or plain, Token or Bearer) and basic auth; no session: a scraper
    # has no browser, and a session cookie would let a page's script read it
    authentication_classes = [
        *(a for a in AUTHENTICATION if not issubclass(a, SessionAuthentication)),
        BasicAuthentication,
    ]
    permission_classes = [CanScrape]

    def get(self, request: Any) -> HttpResponse:
        body = exposition(readable_clusters(request.user))
        return HttpResponse(body, content_type=CONTENT_TYPE_PLAIN_0_0_4)
