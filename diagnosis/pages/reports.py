"""Pages of the tenant fairness report (docs/fairness.md): the report of a
cluster over a period, its CSV and PDF, a tenant's drill-down (its jobs and findings) and the
reader's emailed subscription. Thin: parse, check access, build, render. A job's page is its
efficiency report, in diagnosis/pages/jobs.py.

Everything goes through ``diagnosis.access`` and :func:`build_fairness_report`, so a manager
sees only their tenants here, in the downloads and in the API, and asking for anyone else's
tenant or job (by URL or by ``?tenant=``) is a 404.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from django.contrib import messages
from django.db.models import Q
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils.safestring import SafeString
from django.utils.translation import gettext
from django.views.decorators.http import require_POST, require_safe

from diagnosis.access import (
    findings_for_user,
    get_cluster_for_user,
    get_tenant_for_user,
    jobs_for_user,
    subject_for_user,
)
from diagnosis.actions.notify.subscriptions import subscribe_to_report
from diagnosis.charts.figures import embed
from diagnosis.core.fairness import SIZE_CLASSES
from diagnosis.models import Cluster, Job, ReportFrequency, ReportSubscription
from diagnosis.pages.support import page_cache
from diagnosis.pages.support.forecasts import forecast_table
from diagnosis.pages.support.pagination import paginate
from diagnosis.reports import figures
from diagnosis.reports.csv_export import render_csv
from diagnosis.reports.fairness_report import FairnessReportData, build_fairness_report, default_end
from diagnosis.reports.pdf import render_pdf
from diagnosis.reports.period import PRESET_LABELS, PeriodError, ReportPeriod
from diagnosis.reports.pricing import price_key

JOBS_PER_PAGE = 50
FINDINGS_SHOWN = 100


def _period(request: HttpRequest, cluster: Cluster) -> ReportPeriod:
    """The period the query string asks for (``period``, or ``from``/``to``)."""
    return ReportPeriod.parse(request.GET, default_end=lambda: default_end(cluster))


def _report(
    request: HttpRequest, cluster: Cluster, period: ReportPeriod | None = None, **narrow: Any
) -> FairnessReportData:
    """The report the query string asks for (its period, and ``tenant``)."""
    period = period or _period(request, cluster)
    tenants = narrow.get("tenants", request.GET.getlist("tenant"))
    return build_fairness_report(request.user, cluster, period, tenants=tenants)


def _exact_query(request: HttpRequest, data: FairnessReportData) -> str:
    """The report's exact period and tenant filter, for the links that must show the same
    numbers (downloads, the API) even if new cycles arrive meanwhile."""
    query: list[tuple[str, str]] = list(data.period.query().items())
    query += [("tenant", t) for t in sorted(set(request.GET.getlist("tenant")) - {""})]
    return urlencode(query)


def _bad_period(request: HttpRequest, cluster: Cluster, error: PeriodError) -> HttpResponse:
    context = {"cluster": cluster, "section": "fairness", "error": error, "presets": PRESET_LABELS}
    return render(request, "diagnosis/report_fairness.html", context, status=400)


@require_safe
def fairness_report(request: HttpRequest, name: str) -> HttpResponse:
    """The tenant table, the three charts, downloads and the reader's subscription. The report
    part is cached per data version, reader's scope, period and query
    (diagnosis/pages/support/page_cache.py); the subscription form is the reader's own."""
    cluster = get_cluster_for_user(request.user, name)
    try:
        period = _period(request, cluster)
    except PeriodError as error:
        return _bad_period(request, cluster, error)
    body = page_cache.cached_fragments(
        "fairness",
        request,
        cluster,
        lambda: {"body": _fairness_body(request, cluster, period)},
        parts=(period.start, period.end, period.preset, price_key(cluster)),
    )
    context = {
        "cluster": cluster,
        "section": "fairness",
        "subscription": ReportSubscription.objects.filter(
            user=request.user, cluster=cluster
        ).first(),
        "frequencies": ReportFrequency.choices,
        **body,
    }
    return render(request, "diagnosis/report_fairness.html", context)


def _fairness_body(request: HttpRequest, cluster: Cluster, period: ReportPeriod) -> SafeString:
    data = _report(request, cluster, period)
    query = _exact_query(request, data)
    context = {
        "cluster": cluster,
        "data": data,
        "report": data.report,
        "verdict": data.productive.headline_in(gettext),
        "presets": PRESET_LABELS,
        "query": query,
        "period_query": urlencode(data.period.query()),
        "csv_url": f"{reverse('diagnosis:fairness_csv', args=[cluster.name])}?{query}",
        "pdf_url": f"{reverse('diagnosis:fairness_pdf', args=[cluster.name])}?{query}",
        "api_url": f"{reverse('api-v1:fairness-report', args=[cluster.name])}?{query}",
        "size_classes": SIZE_CLASSES,
        "rows": [(row, [row.waits[c] for c in SIZE_CLASSES]) for row in data.tenants],
        "pooled_waits": [data.report.waits[c] for c in SIZE_CLASSES],
    }
    if data.tenants:
        context |= {
            "share_chart": embed(
                figures.share_over_time(data),
                "fairness-shares",
                label="Usage, fair share and entitlement of each tenant over the period",
            ),
            "waits_chart": embed(
                figures.waits_by_size_class(data),
                "fairness-waits",
                label="Wait p50 and p95 by job size class (the table lists them per tenant)",
            ),
            "breakdown_chart": embed(
                figures.tenant_breakdown(data),
                "fairness-breakdown",
                label="GPU-hours each tenant held, by accounting bucket",
            ),
        }
    return render_to_string("diagnosis/includes/report_fairness_body.html", context, request)


def _download(request: HttpRequest, name: str, kind: str) -> HttpResponse:
    cluster = get_cluster_for_user(request.user, name)
    try:
        data = _report(request, cluster)
    except PeriodError as error:
        return HttpResponse(str(error), status=400, content_type="text/plain; charset=utf-8")
    start, end = data.period.as_dict()["from"], data.period.as_dict()["to"]
    filename = f"fairness-{cluster.name}-{start[:10]}-{end[:10]}.{kind}"
    if kind == "csv":
        response = HttpResponse(render_csv(data), content_type="text/csv; charset=utf-8")
    else:
        response = HttpResponse(render_pdf(data), content_type="application/pdf")
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response


@require_safe
def fairness_report_csv(request: HttpRequest, name: str) -> HttpResponse:
    """The report as CSV, one row per tenant (columns: docs/fairness.md)."""
    return _download(request, name, "csv")


@require_safe
def fairness_report_pdf(request: HttpRequest, name: str) -> HttpResponse:
    """The report as PDF, with the charts."""
    return _download(request, name, "pdf")


@require_POST
def fairness_subscription(request: HttpRequest, name: str) -> HttpResponse:
    """Subscribe the reader to the report by email (weekly, monthly) or cancel (empty)."""
    cluster = get_cluster_for_user(request.user, name)
    frequency = request.POST.get("frequency", "")
    target = reverse("diagnosis:fairness", args=[cluster.name])
    if frequency and frequency not in ReportFrequency.values:
        messages.error(request, gettext("Unknown frequency %(value)r.") % {"value": frequency})
        return HttpResponseRedirect(target)
    if frequency and not request.user.email:
        messages.error(
            request, gettext("Your account has no email address; ask an admin to add one.")
        )
        return HttpResponseRedirect(target)
    subscription = subscribe_to_report(request.user, cluster, frequency)
    if subscription is None:
        messages.info(request, gettext("You will no longer get this report by email."))
    else:
        label = subscription.get_frequency_display().lower()
        messages.info(
            request,
            gettext("You will get this report %(frequency)s by email, as a PDF.")
            % {"frequency": label},
        )
    return HttpResponseRedirect(target)


@require_safe
def tenant_detail(request: HttpRequest, name: str, tenant: str) -> HttpResponse:
    """One tenant over the period: its report row, its jobs and its findings."""
    cluster = get_cluster_for_user(request.user, name)
    row_tenant = get_tenant_for_user(request.user, cluster, tenant)
    try:
        data = _report(request, cluster, tenants=[row_tenant.name])
    except PeriodError as error:
        return _bad_period(request, cluster, error)
    period = data.period
    jobs = (
        jobs_for_user(request.user, cluster)
        .filter(tenant=row_tenant, submitted_at__lte=period.end)
        .filter(Q(ended_at__isnull=True) | Q(ended_at__gt=period.start))
        .order_by("-submitted_at", "-id")
    )
    page, query = paginate(request, jobs, JOBS_PER_PAGE)
    findings = (
        findings_for_user(request.user, cluster)
        .filter(tenant=row_tenant, first_seen__lte=period.end, last_seen__gte=period.start)
        .order_by("-last_seen", "-id")
    )
    shown_findings = list(findings[:FINDINGS_SHOWN])
    for finding in shown_findings:  # names linked to their pages (links.subject_link)
        finding.subject_shown = subject_for_user(request.user, cluster.pk, finding.subject)
    context = {
        "cluster": cluster,
        "section": "fairness",
        "tenant": row_tenant,
        "data": data,
        "row": data.tenants[0] if data.tenants else None,
        "size_classes": SIZE_CLASSES,
        "class_waits": (
            list(zip(SIZE_CLASSES, [data.tenants[0].waits[c] for c in SIZE_CLASSES], strict=True))
            if data.tenants
            else []
        ),
        "page": page,
        "query": query,
        "job_rows": [(job, _wait_s(job)) for job in page.object_list],
        "findings": shown_findings,
        "findings_total": findings.count(),
        "forecasts": forecast_table(request.user, cluster, tenant=row_tenant),  # issue #33
        "period_query": urlencode(period.query()),
        "report_url": f"{reverse('diagnosis:fairness', args=[cluster.name])}?"
        + urlencode(period.query()),
    }
    return render(request, "diagnosis/report_tenant.html", context)


# A job's page is its efficiency report: diagnosis/pages/jobs.py (issue 19).


def _wait_s(job: Job) -> float | None:
    """How long the job waited to start (None while it has not started)."""
    if job.started_at is None:
        return None
    return max(0.0, (job.started_at - job.submitted_at).total_seconds())
