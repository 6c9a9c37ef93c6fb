"""The fairness report and the tenant-scoped reads behind it, as JSON (docs/fairness.md, "API").

- ``GET /api/v1/clusters/{cluster}/reports/fairness?period=24h|7d|30d`` or ``?from=&to=``
  (ISO 8601), optionally ``&tenant=NAME`` (repeatable): the same document as the page's numbers
  and ``manage.py report fairness --format json``.
- ``GET /api/v1/clusters/{cluster}/jobs?tenant=&state=``: job records, paginated.
- ``GET /api/v1/clusters/{cluster}/jobs/{id}``: one job record by the scheduler's id.
- ``GET /api/v1/clusters/{cluster}/findings?tenant=&rule=&state=``: findings, paginated;
  ``.../findings/{id}``: one.

Session or token authentication. Every read goes through ``diagnosis.access``: a manager gets
only their tenants' rows, and a cluster, tenant or job they may not see is a 404, whether asked
for by id or through a filter.
"""

from __future__ import annotations

from django.db.models import QuerySet, TextChoices
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_view
from rest_framework import generics
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from diagnosis.access import (
    findings_for_user,
    get_cluster_for_user,
    get_finding_for_user,
    get_job_for_user,
    get_tenant_for_user,
    jobs_for_user,
)
from diagnosis.api.auth import AUTHENTICATION
from diagnosis.api.errors import invalid
from diagnosis.api.responses import FairnessReportSerializer
from diagnosis.api.serializers import FindingSerializer, JobSerializer
from diagnosis.choices import FindingState, JobState
from diagnosis.models import Finding, Job
from diagnosis.reports.fairness_report import build_fairness_report, default_end
from diagnosis.reports.period import PRESETS, PeriodError, ReportPeriod

TENANT = OpenApiParameter(
    "tenant", str, many=True, description="a tenant's name (repeatable); one you may not see: 404"
)


class FairnessReportView(APIView):
    """The fairness report of a cluster over a period, as JSON."""

    authentication_classes = AUTHENTICATION

    @extend_schema(
        responses=FairnessReportSerializer,
        parameters=[
            OpenApiParameter("period", str, enum=list(PRESETS), description="a preset period"),
            OpenApiParameter("from", str, description="start, ISO 8601 (a date: its midnight UTC)"),
            OpenApiParameter("to", str, description="end, ISO 8601"),
            TENANT,
        ],
    )
    def get(self, request: Request, cluster: str) -> Response:
        target = get_cluster_for_user(request.user, cluster)
        try:
            period = ReportPeriod.parse(request.query_params, default_end=default_end(target))
        except PeriodError as error:
            return invalid({error.field: str(error)})
        data = build_fairness_report(
            request.user, target, period, tenants=request.query_params.getlist("tenant")
        )
        return Response(data.as_dict())


class _ClusterScopedList(generics.ListAPIView):
    """A list of one cluster's rows the caller may see, narrowed by ``?tenant=`` (a tenant they
    may not see is a 404) and ``?state=`` (one of ``states``, else a 400)."""

    authentication_classes = AUTHENTICATION
    states: type[TextChoices]

    def scoped(self) -> QuerySet:
        raise NotImplementedError

    def get_queryset(self) -> QuerySet:
        params = self.request.query_params
        self.cluster = get_cluster_for_user(self.request.user, self.kwargs["cluster"])
        rows = self.scoped()
        for name in sorted(set(params.getlist("tenant")) - {""}):
            rows = rows.filter(tenant=get_tenant_for_user(self.request.user, self.cluster, name))
        if params.get("state"):
            if params["state"] not in self.states.values:
                raise ValidationError({"state": f"one of {', '.join(self.states.values)}"})
            rows = rows.filter(state=params["state"])
        return rows


def _state(choices: type) -> OpenApiParameter:
    return OpenApiParameter(
        "state", str, enum=choices.values, description="only rows in this state"
    )


@extend_schema_view(get=extend_schema(parameters=[TENANT, _state(JobState)]))
class JobListView(_ClusterScopedList):
    serializer_class = JobSerializer
    states = JobState

    def scoped(self) -> QuerySet[Job]:
        return (
            jobs_for_user(self.request.user, self.cluster)
            .select_related("tenant", "queue")
            .order_by("-submitted_at", "-id")
        )


class JobDetailView(APIView):
    authentication_classes = AUTHENTICATION

    @extend_schema(responses=JobSerializer)
    def get(self, request: Request, cluster: str, job_id: str) -> Response:
        target = get_cluster_for_user(request.user, cluster)
        return Response(JobSerializer(get_job_for_user(request.user, target, job_id)).data)


@extend_schema_view(
    get=extend_schema(
        parameters=[
            TENANT,
            _state(FindingState),
            OpenApiParameter("rule", str, description="a rule's id (docs/rules.md)"),
        ]
    )
)
class FindingListView(_ClusterScopedList):
    serializer_class = FindingSerializer
    states = FindingState

    def scoped(self) -> QuerySet[Finding]:
        rows = findings_for_user(self.request.user, self.cluster).select_related("tenant")
        if self.request.query_params.get("rule"):
            rows = rows.filter(rule_id=self.request.query_params["rule"])
        return rows.order_by("-last_seen", "-id")


class FindingDetailView(APIView):
    """``GET /api/v1/clusters/{cluster}/findings/{id}``: one finding, as the list shows it."""

    authentication_classes = AUTHENTICATION

    @extend_schema(responses=FindingSerializer, operation_id="clusters_finding_retrieve")
    def get(self, request: Request, cluster: str, finding_id: int) -> Response:
        target = get_cluster_for_user(request.user, cluster)
        finding = get_finding_for_user(request.user, target, finding_id)
        return Response(FindingSerializer(finding, context={"request": request}).data)
