"""Pages and API views. Thin: read models through ``diagnosis.access``, render; writes go through
``diagnosis.actions``.

Pages read the pre-computed rollups (``ClusterCycle``) and stored findings; they never run rules
or accounting. Each page costs a small, fixed number of queries whatever the size of the cluster
(tests/app/pages/test_pages.py holds them to it). What each page shows and where its data comes
from:
docs/ui.md.

Every view needs a login (LoginRequiredMiddleware) unless marked ``@login_not_required``. The API
viewsets move to ``diagnosis/api/`` once that package exists.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import urlencode

import pandas as pd
from django.conf import settings
from django.db.models import (
    Case,
    CharField,
    Count,
    F,
    JSONField,
    Max,
    Min,
    OuterRef,
    Q,
    QuerySet,
    Subquery,
    Value,
    When,
)
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils import timezone
from django.utils.translation import gettext
from django.views.decorators.http import require_safe

from diagnosis.access import (
    clusters_for_user,
    cycles_for_user,
    findings_for_user,
    get_cluster_for_user,
    incidents_for_user,
    recommendations_for_user,
)
from diagnosis.charts.figures import (
    TimeMark,
    add_time_marks,
    embed,
    gpu_hours_waterfall,
    utilization_trend,
)
from diagnosis.charts.gpu_hours import BucketHours, GpuHoursBreakdown, gpu_hours_breakdown
from diagnosis.choices import FindingState, IncidentState, Severity
from diagnosis.core.rules.base import SEVERITIES, Rule
from diagnosis.core.rules.registry import all_rules
from diagnosis.models import Cluster, ClusterCycle, DeliveryState, Finding, Incident
from diagnosis.pages.live import latest_good_cycle
from diagnosis.pages.support import page_cache
from diagnosis.pages.support.time_range import TimeRange, range_picker
from diagnosis.reports.period import PeriodError
from diagnosis.reports.pricing import price_key, waterfall_costs
from diagnosis.roles import Role, can_administer, can_read_failure_cause, has_role, is_tenant_scoped

OPEN_STATES = (FindingState.PENDING, FindingState.FIRING)
WATERFALL_PERIOD_S = 3600
TREND_PERIOD_S = 24 * 3600
FINDINGS_SHOWN_PER_BUCKET = 5

# The ClusterCycle columns the pages read: never the whole accounting JSON of many cycles.
CYCLE_FIELDS = (
    "id",
    "cluster_id",
    "as_of",
    "ran_at",
    "ok",
    "error",
    "gpus",
    "allocated_gpus",
    "allocation_utilization",
    "activity_utilization",
    "rule_errors",
    "not_judged",
    "data_age_s",
    "coverage",
)
# What the waterfall needs of each cycle in the hour: a few keys of its accounting JSON, or the
# same figures from its AccountingSlice (the keys besides bucket_findings).
HOUR_ROW = {
    "window_s": F("accounting__window_s"),
    "buckets": F("accounting__cluster__buckets"),
    "bucket_findings": F("accounting__findings"),
    "productive_gpus": F("accounting__cluster__productive_gpus"),
    "activity_coverage": F("accounting__cluster__activity_coverage"),
    "mfu_coverage": F("accounting__cluster__mfu_coverage"),
}
SLICE_FIGURES = tuple(key for key in HOUR_ROW if key != "bucket_findings")
SUBJECT_NOUNS = {
    "job:": ("job", "jobs"),
    "jobs:": ("set of jobs", "sets of jobs"),
    "pool:": ("pool", "pools"),
    "gpu:": ("GPU", "GPUs"),
    "node:": ("node", "nodes"),
    "tenant:": ("tenant", "tenants"),
    "queue:": ("queue", "queues"),
    "cluster:": ("cluster", "clusters"),
}


# -- freshness -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Freshness:
    """How old a cluster's figures are. They are *stale* when the last good cycle ran, or its
    snapshot was taken, more than two cycle intervals ago (docs/architecture.md#one-cycle): stale
    data is
    labelled stale, never shown as healthy. A cluster without a good cycle has no data at all."""

    now: datetime
    interval_s: float  # how often cycles should run (settings.GPUOBS_CYCLE_SECONDS)
    last_cycle_at: datetime | None = None  # when the latest cycle ran, failed or not
    good_cycle_at: datetime | None = None  # when the latest good cycle ran
    as_of: datetime | None = None  # the snapshot time of the latest good cycle

    @property
    def stale_after_s(self) -> float:
        return 2 * self.interval_s

    @property
    def has_data(self) -> bool:
        return self.as_of is not None

    @property
    def cycle_age_s(self) -> float | None:
        return _seconds(self.now, self.last_cycle_at)

    @property
    def snapshot_age_s(self) -> float | None:
        return _seconds(self.now, self.as_of)

    @property
    def age_s(self) -> float | None:
        ages = [
            age
            for age in (_seconds(self.now, self.good_cycle_at), self.snapshot_age_s)
            if age is not None
        ]
        return max(ages) if ages else None

    @property
    def snapshot_ahead(self) -> bool:
        """The snapshot's clock is ahead of ours (a simulated cluster runs its own clock)."""
        return self.as_of is not None and self.as_of > self.now

    @property
    def stale(self) -> bool:
        return not self.has_data or (self.age_s or 0) > self.stale_after_s


def _seconds(now: datetime, then: datetime | None) -> float | None:
    return None if then is None else (now - then).total_seconds()


def freshness_of(
    latest: ClusterCycle | None, good: ClusterCycle | None, now: datetime | None = None
) -> Freshness:
    return Freshness(
        now=now or timezone.now(),
        interval_s=settings.GPUOBS_CYCLE_SECONDS,
        last_cycle_at=latest.ran_at if latest else None,
        good_cycle_at=good.ran_at if good else None,
        as_of=good.as_of if good else None,
    )


def _failure_cause(request: HttpRequest, cluster: Cluster, latest: ClusterCycle | None) -> str:
    """The failed cycle's whole error for a reader who may see it, when it says more than the
    status message; else empty."""
    if latest is None or latest.ok or not can_read_failure_cause(request.user):
        return ""
    cause = cluster.status_detail or latest.error
    return "" if cause == cluster.status_message else cause


def ran_by_now(cycles: QuerySet[ClusterCycle]) -> QuerySet[ClusterCycle]:
    """The cycles that ran by now, give or take the clock skew a worker is allowed: a cycle a
    fast worker clock stamped ahead is never preferred (issue #18)."""
    horizon = timezone.now() + timedelta(seconds=settings.GPUOBS_MAX_CLOCK_SKEW_SECONDS)
    return cycles.filter(ran_at__lte=horizon)


def _latest_cycles(
    cycles: QuerySet[ClusterCycle],
) -> tuple[ClusterCycle | None, ClusterCycle | None]:
    """The latest cycle (failed or not) and the latest good one. A failed cycle keeps the
    ``as_of`` of the last good one, so ``(-as_of, -id)`` puts it last among equals."""
    newest = cycles.order_by("-id")  # the page cache's data version, in the same query
    cycles = ran_by_now(cycles).only(*CYCLE_FIELDS).order_by("-as_of", "-id")
    latest = cycles.annotate(
        newest_id=Subquery(newest.values("id")[:1]),
        newest_ran_at=Subquery(newest.values("ran_at")[:1]),
    ).first()
    if latest is None or latest.ok:
        return latest, latest
    return latest, cycles.filter(ok=True).first()


# -- small helpers -------------------------------------------------------------------------------


def cluster_url(
    name: str, cluster: Cluster, query: Mapping[str, Any] | None = None, **kwargs: Any
) -> str:
    url = reverse(f"diagnosis:{name}", kwargs={"name": cluster.name, **kwargs})
    return f"{url}?{urlencode(query, doseq=True)}" if query else url


def _not_judged_lines(not_judged: Mapping[str, Mapping[str, int]], rules: Mapping[str, Rule]):
    """``"low-mfu: 12 jobs not judged (no MFU or tensor activity)"`` per rule and reason."""
    lines = []
    for rule_id, reasons in sorted((not_judged or {}).items()):
        rule = rules.get(rule_id)
        one, many = SUBJECT_NOUNS.get(rule.subject_kind if rule else "", ("subject", "subjects"))
        for reason, count in sorted(reasons.items()):
            if count:
                noun = one if count == 1 else many
                lines.append(f"{rule_id}: {count} {noun} not judged ({reason})")
    return lines


def _split_ref(ref: str) -> tuple[str, str]:
    rule_id, _, subject = ref.partition(" ")
    return rule_id, subject


# -- the cluster list ----------------------------------------------------------------------------


@dataclass(frozen=True)
class ClusterRow:
    cluster: Cluster
    good: ClusterCycle | None
    latest: ClusterCycle | None
    freshness: Freshness
    open_findings: int
    critical_findings: int
    open_incidents: int = 0


def _open_incidents(user: Any, clusters: list[Cluster]) -> dict[int, int]:
    """Cluster id -> its unresolved incidents the reader may see: one grouped query, or for a
    manager (whose incidents are picked by the jobs they hit) one per cluster."""
    if is_tenant_scoped(user):
        return {
            c.pk: incidents_for_user(user, c).exclude(state=IncidentState.RESOLVED).count()
            for c in clusters
        }
    grouped = (
        Incident.objects.filter(cluster__in=[c.pk for c in clusters])
        .exclude(state=IncidentState.RESOLVED)
        .order_by()
        .values_list("cluster")
        .annotate(n=Count("id"))
    )
    return dict(grouped)


@require_safe
def cluster_list(request: HttpRequest) -> HttpResponse:
    """Every cluster the user may read, with its headline figures."""
    good = latest_good_cycle(request, None)  # the live status line (docs/ui.md)
    context = {"rows": cluster_rows(request.user), "good": good}
    return render(request, "diagnosis/cluster_list.html", context)


def cluster_rows(user: Any) -> list[ClusterRow]:
    """The cluster list's rows (and the fleet's, diagnosis/pages/fleet.py)."""
    clusters = clusters_for_user(user)
    cycles = cycles_for_user(user)
    latest = ran_by_now(cycles).filter(cluster=OuterRef("pk")).order_by("-as_of", "-id")
    latest = latest.values("pk")
    open_q = Q(findings__state__in=OPEN_STATES)
    if is_tenant_scoped(user):  # count only the findings a manager may see
        open_q &= Q(findings__tenant__managers=user)
    rows = list(
        clusters.annotate(
            latest_cycle_id=Subquery(latest[:1]),
            good_cycle_id=Subquery(latest.filter(ok=True)[:1]),
            open_findings=Count("findings", filter=open_q),
            critical_findings=Count(
                "findings", filter=open_q & Q(findings__severity=Severity.CRITICAL)
            ),
        )
    )
    ids = {c.latest_cycle_id for c in rows} | {c.good_cycle_id for c in rows}
    by_id = (
        {c.pk: c for c in cycles.filter(pk__in=ids - {None}).only(*CYCLE_FIELDS)} if rows else {}
    )
    now = timezone.now()
    incidents = _open_incidents(user, rows) if rows else {}
    table = []
    for cluster in rows:
        latest_cycle = by_id.get(cluster.latest_cycle_id)
        good = by_id.get(cluster.good_cycle_id)
        table.append(
            ClusterRow(
                cluster=cluster,
                good=good,
                latest=latest_cycle,
                freshness=freshness_of(latest_cycle, good, now),
                open_findings=cluster.open_findings,
                critical_findings=cluster.critical_findings,
                open_incidents=incidents.get(cluster.pk, 0),
            )
        )
    return table


# -- the cluster overview ------------------------------------------------------------------------


@dataclass(frozen=True)
class FindingLink:
    label: str  # "rule subject"
    url: str | None
    state: str | None

    @property
    def rule_id(self) -> str:
        return _split_ref(self.label)[0]

    @property
    def subject(self) -> str:
        return _split_ref(self.label)[1]


@dataclass(frozen=True)
class BucketRow:
    bucket: BucketHours
    list_url: str | None
    findings: list[FindingLink] = field(default_factory=list)
    more: int = 0


@dataclass(frozen=True)
class RuleCountRow:
    rule_id: str
    title: str
    cells: list[tuple[str, int, str]]  # severity, count, link
    total: int
    url: str


def _bucket_rows(
    request: HttpRequest, cluster: Cluster, breakdown: GpuHoursBreakdown
) -> list[BucketRow]:
    """Each bucket with the findings behind it (a few, linked) and a link to all of them.

    A tenant-scoped manager gets no finding references here (they name other tenants' jobs);
    the link to the findings list shows them theirs."""
    per_bucket = 0 if is_tenant_scoped(request.user) else FINDINGS_SHOWN_PER_BUCKET
    shown = {b.bucket: b.findings[:per_bucket] for b in breakdown.buckets}
    refs = [_split_ref(ref) for refs in shown.values() for ref in refs]
    found: dict[tuple[str, str], dict[str, Any]] = {}
    if refs:
        fingerprints = {Finding.fingerprint_of(cluster.pk, r, s) for r, s in refs}
        rows = (  # through the fingerprint index, not a scan of the cluster's findings
            findings_for_user(request.user, cluster)
            .filter(fingerprint__in=fingerprints)
            .values("id", "rule_id", "subject", "state")
        )
        found = {(row["rule_id"], row["subject"]): row for row in rows}
    table = []
    for bucket in breakdown.buckets:
        links = []
        for ref in shown[bucket.bucket]:
            row = found.get(_split_ref(ref))
            url = cluster_url("finding", cluster, finding_id=row["id"]) if row else None
            links.append(FindingLink(ref, url, row["state"] if row else None))
        list_url = (
            cluster_url("findings", cluster, {"rule": list(bucket.rules), "state": "all"})
            if bucket.rules
            else None
        )
        more = max(0, len(bucket.findings) - len(links)) if per_bucket else 0
        table.append(BucketRow(bucket, list_url, links, more))
    return table


def _open_findings_table(
    request: HttpRequest, cluster: Cluster, rules: Mapping[str, Rule]
) -> list[RuleCountRow]:
    counts = (
        findings_for_user(request.user, cluster)
        .filter(state__in=OPEN_STATES)
        .values("rule_id", "severity")
        .annotate(n=Count("id"))
        .order_by()
    )
    by_rule: dict[str, dict[str, int]] = {}
    for row in counts:
        by_rule.setdefault(row["rule_id"], {})[row["severity"]] = row["n"]
    table = []
    for rule_id in sorted(by_rule, key=lambda r: (-by_rule[r].get("critical", 0), r)):
        cells = [
            (
                severity,
                by_rule[rule_id].get(severity, 0),
                cluster_url("findings", cluster, {"rule": rule_id, "severity": severity}),
            )
            for severity in SEVERITIES
        ]
        rule = rules.get(rule_id)
        table.append(
            RuleCountRow(
                rule_id=rule_id,
                title=rule.title if rule else "",
                cells=cells,
                total=sum(by_rule[rule_id].values()),
                url=cluster_url("findings", cluster, {"rule": rule_id}),
            )
        )
    return table


def waterfall_rows(cycles: QuerySet[ClusterCycle], end: datetime) -> list[dict[str, Any]]:
    """The good cycles of the hour up to ``end``, as :func:`gpu_hours_breakdown` reads
    them, from their :class:`AccountingSlice` rows (issue #17), in one query: each slice's bucket
    figures and only the finding references new since the previous cycle; the hour's first cycle
    brings its whole list from its accounting document. The union of references, in first-seen
    order, is the documents' own, so the breakdown is the same, and the page reads one document,
    not sixty. A cycle stored before slices existed is read from its document, as before."""
    hour = cycles.filter(
        ok=True, as_of__gt=end - timedelta(seconds=WATERFALL_PERIOD_S), as_of__lte=end
    )
    no_slice = Q(accounting_slice__isnull=True)
    first = Q(as_of=Subquery(hour.order_by("as_of").values("as_of")[:1]))
    from_document = {
        key: Case(When(no_slice, then=value), default=Value(None), output_field=JSONField())
        for key, value in HOUR_ROW.items()
        if key != "bucket_findings"
    }
    rows = hour.order_by("as_of").values(
        "as_of",
        **{f"slice_{key}": F(f"accounting_slice__{key}") for key in SLICE_FIGURES},
        **{f"document_{key}": value for key, value in from_document.items()},
        bucket_findings=Case(
            When(no_slice | first, then=F("accounting__findings")),
            default=F("accounting_slice__new_findings"),
            output_field=JSONField(),
        ),
        sliced=Case(When(no_slice, then=Value(False)), default=Value(True)),
    )
    source = {True: "slice", False: "document"}
    return [
        {
            "as_of": row["as_of"],
            "bucket_findings": row["bucket_findings"],
            **{key: row[f"{source[row['sliced']]}_{key}"] for key in SLICE_FIGURES},
        }
        for row in rows
    ]


MAX_TREND_MARKS = 40
MAX_TREND_POINTS = 360  # a day of minute cycles drawn as 4-minute means


def downsampled_trend(trend: pd.DataFrame, span: timedelta) -> pd.DataFrame:
    """At most about :data:`MAX_TREND_POINTS` points over ``span``: the cycles' utilizations
    averaged per equal slice of time (each point at its slice's last cycle), so a day or a month
    of minute cycles draws as fast as an hour. Slices without a cycle stay empty (the chart's
    gaps stay gaps)."""
    if len(trend) <= MAX_TREND_POINTS:
        return trend
    width = pd.Timedelta(seconds=max(span.total_seconds() / MAX_TREND_POINTS, 1.0)).ceil("s")
    as_of = pd.to_datetime(trend["as_of"], utc=True)
    slices = trend.groupby(as_of.dt.floor(width).to_numpy(), sort=True)
    return pd.DataFrame(
        {
            "as_of": slices["as_of"].last().to_numpy(),
            "allocation_utilization": slices["allocation_utilization"].mean().to_numpy(),
            "activity_utilization": slices["activity_utilization"].mean().to_numpy(),
        }
    )


def _trend_window(
    cycles: QuerySet[ClusterCycle], time_range: TimeRange
) -> tuple[datetime, datetime] | None:
    """When the trend's cycles ran, ``(low, high]`` on the wall clock, from one cycle interval
    before the first; None without cycles."""
    bounds = cycles.filter(
        ok=True, as_of__gt=time_range.start, as_of__lte=time_range.end
    ).aggregate(first=Min("ran_at"), last=Max("ran_at"))
    if bounds["first"] is None:
        return None
    return bounds["first"] - timedelta(seconds=settings.GPUOBS_CYCLE_SECONDS), bounds["last"]


def _mark_rows(
    request: HttpRequest, cluster: Cluster, window: tuple[datetime, datetime] | None
) -> list[tuple[Any, ...]]:
    """Incidents opened and changes applied in the trend's ``window``, the latest
    ``MAX_TREND_MARKS``: ``(moment, kind, text, subject)``. One query for both; small, and
    asked on every request: they change without a new cycle, so the overview's cache key
    names them."""
    if window is None:
        return []
    low, high = window

    def marks(rows: QuerySet, moment: str, kind: str, text: str, subject: str) -> QuerySet:
        return (
            rows.filter(**{f"{moment}__gt": low, f"{moment}__lte": high})
            .annotate(mark=Value(kind, output_field=CharField()), text=F(text))
            .values_list(moment, "mark", "text", subject)
            .order_by()
        )

    incidents = marks(
        incidents_for_user(request.user, cluster), "opened_at", "incident", "summary", "node"
    )
    changes = marks(
        recommendations_for_user(request.user, cluster), "applied_at", "change", "kind", "target"
    )
    return sorted(incidents.union(changes, all=True))[-MAX_TREND_MARKS:]


def _trend_marks(
    rows: list[tuple[Any, ...]], cycles: list[tuple[datetime, datetime]]
) -> list[TimeMark]:
    """Each of :func:`_mark_rows` at the snapshot time of the first cycle that ran after it (the
    chart's clock is snapshot time; theirs is the wall clock)."""
    if not cycles:
        return []
    by_ran_at = sorted(cycles, key=lambda row: row[1])
    ran_at = [row[1] for row in by_ran_at]
    marks = []
    for moment, kind, text, subject in rows:
        index = bisect_left(ran_at, moment)
        if index < len(by_ran_at):
            label = text or subject if kind == "incident" else f"{text} {subject}"
            marks.append(TimeMark(by_ran_at[index][0], kind, label))
    return marks


@require_safe
def cluster_overview(request: HttpRequest, name: str) -> HttpResponse:
    """One cluster: figures of its latest good cycle, the last hour's GPU-hour waterfall, the
    utilization trend, open findings, data age, collection and rule errors.

    The panels (waterfall, trend, open findings, coverage) are cached per data version,
    reader's scope, query and trend marks (diagnosis/pages/support/page_cache.py); the head, the
    data
    age and the notifications are rendered on every request."""
    cluster = get_cluster_for_user(request.user, name)
    cycles = cycles_for_user(request.user, cluster)
    latest, good = _latest_cycles(cycles)
    context: dict[str, Any] = {
        "cluster": cluster,
        "section": "overview",
        "latest": latest,
        "good": good,
        "freshness": freshness_of(latest, good),
        "failed": latest is not None and not latest.ok,
        # outbound channels (Alertmanager, owner notices); their errors name URLs: admins only
        "deliveries": list(DeliveryState.objects.filter(cluster=cluster)),
        "delivery_errors_shown": can_administer(request.user),
        # every reader: which integration failed and how (issue #12); SREs and admins also
        # the whole error, its cause (host, port, remote answer: issue #32 item 10)
        "failure_text": (cluster.status_message or latest.error)
        if latest is not None and not latest.ok
        else "",
        # a drop in size held back from judgement (diagnosis/actions/records/cluster_size.py)
        "size_hold": cluster.size_hold if (cluster.size_hold or {}).get("size") else None,
        "can_confirm_size": has_role(request.user, Role.SRE),
        "failure_cause": _failure_cause(request, cluster, latest),
    }
    time_range, range_error, mark_rows = None, "", []
    if good is not None:
        try:
            time_range = TimeRange.parse(request.GET, default_end=good.as_of)
        except PeriodError as error:
            time_range = TimeRange.parse({}, default_end=good.as_of)
            range_error = str(error)
        # the trend's window changes only with the cycles: cached by the data version
        version = (latest.newest_id, latest.newest_ran_at)
        window = page_cache.cached_value(
            ("trend-window", cluster.pk, version, time_range),
            lambda: _trend_window(cycles, time_range),
        )
        mark_rows = _mark_rows(request, cluster, window)
    context |= page_cache.cached_fragments(
        "overview",
        request,
        cluster,
        lambda: _overview_panels(request, cluster, good, time_range, range_error, mark_rows),
        version=(latest.newest_id, latest.newest_ran_at) if latest is not None else None,
        parts=(
            getattr(latest, "pk", None),
            getattr(good, "pk", None),
            time_range,
            range_error,
            tuple(mark_rows),
            price_key(cluster),
        ),
    )
    return render(request, "diagnosis/cluster_overview.html", context)


def _overview_panels(
    request: HttpRequest,
    cluster: Cluster,
    good: ClusterCycle | None,
    time_range: TimeRange | None,
    range_error: str,
    mark_rows: list[tuple[Any, ...]],
) -> dict[str, Any]:
    """The overview's cached part: the panels' HTML and the figures the page head shows of
    them (the productive share, the coverages)."""
    rules = all_rules()
    cycles = cycles_for_user(request.user, cluster)
    context: dict[str, Any] = {
        "cluster": cluster,
        "good": good,
        "findings_table": _open_findings_table(request, cluster, rules),
        "severities": SEVERITIES,
    }
    figures: dict[str, Any] = {}
    if good is not None and time_range is not None:
        # the waterfall: the hour up to the range's end (the latest good snapshot at most)
        hour_end = min(time_range.end, good.as_of)
        hour_rows = waterfall_rows(cycles, hour_end)
        breakdown = gpu_hours_breakdown(hour_rows, end=hour_end, period_s=WATERFALL_PERIOD_S)
        bucket_rows = _bucket_rows(request, cluster, breakdown)
        links = {row.bucket.bucket: row.list_url for row in bucket_rows if row.list_url}
        money = waterfall_costs(cluster, breakdown)  # docs/accounting.md "Cost"
        trend_rows = list(
            cycles.filter(ok=True, as_of__gt=time_range.start, as_of__lte=time_range.end)
            .order_by("as_of")
            .values_list("as_of", "ran_at", "allocation_utilization", "activity_utilization")
        )
        trend = downsampled_trend(
            pd.DataFrame.from_records(
                [(row[0], row[2], row[3]) for row in trend_rows],
                columns=["as_of", "allocation_utilization", "activity_utilization"],
            ),
            time_range.end - time_range.start,
        )
        marks = _trend_marks(mark_rows, [(row[0], row[1]) for row in trend_rows])
        last = hour_rows[-1] if hour_rows else {}
        figures = {
            "productive_share": breakdown.productive_share,
            "activity_coverage": last.get("activity_coverage"),
            "mfu_coverage": last.get("mfu_coverage"),
        }
        context |= {
            "picker": range_picker(request.GET, time_range, range_error),
            "time_range": time_range,
            "breakdown": breakdown,
            "bucket_rows": bucket_rows,
            **money,
            "waterfall": embed(
                gpu_hours_waterfall(breakdown, links, money["hover_costs"]),
                "gpu-hours-waterfall",
                label=gettext("GPU-hours of the last hour by bucket (the table below lists them)"),
            ),
            "trend": embed(
                add_time_marks(utilization_trend(trend), marks),
                "utilization-trend",
                label=gettext("Allocation and activity utilization over the chosen range"),
            ),
            "trend_points": len(trend),
            "trend_marks": marks,
            "rule_errors": good.rule_errors,
            "not_judged": _not_judged_lines(good.not_judged, rules),
        }
    html = render_to_string("diagnosis/includes/cluster_overview_panels.html", context, request)
    return {"panels": html, **figures}


# -- findings: diagnosis/pages/findings.py ------------------------------------------------------


# -- incidents: diagnosis/pages/incidents.py ----------------------------------------------------


# -- health and API ------------------------------------------------------------------------------
