"""Start-time forecasts of pending jobs (issue #33, docs/forecasts.md).

- ``GET /api/v1/clusters/{cluster}/forecasts?tenant=&queue=``: the forecasts of the pending jobs
  the caller may see, soonest first, paginated;
- ``GET /api/v1/clusters/{cluster}/jobs/{id}/forecast``: one job's (404 when it has none).

Session or token authentication; reads through ``diagnosis.access`` (a manager: their tenants'
jobs; another tenant's job, by id or filter, is a 404).
"""

from __future__ import annotations

from typing import Any

from django.db.models import F
from django.http import Http404
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import generics
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from diagnosis.access import (
    forecasts_for_user,
    get_cluster_for_user,
    get_job_for_user,
    get_tenant_for_user,
)
from diagnosis.api.auth import AUTHENTICATION
from diagnosis.api.serializers import JobForecastSerializer
from diagnosis.forecast_text import forecast_view


class ForecastListView(generics.ListAPIView):
    authentication_classes = AUTHENTICATION
    serializer_class = JobForecastSerializer

    @extend_schema(
        parameters=[
            OpenApiParameter("tenant", str, description="Only this tenant's jobs."),
            OpenApiParameter("queue", str, description="Only this queue's jobs."),
        ],
        summary="Predicted starts of the pending jobs",
    )
    def get(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return super().get(request, *args, **kwargs)

    def get_queryset(self) -> Any:
        params = self.request.query_params
        self.cluster = get_cluster_for_user(self.request.user, self.kwargs["cluster"])
        rows = forecasts_for_user(self.request.user, self.cluster)
        if params.get("tenant"):
            tenant = get_tenant_for_user(self.request.user, self.cluster, params["tenant"])
            rows = rows.filter(job__tenant=tenant)
        if params.get("queue"):
            rows = rows.filter(job__queue__name=params["queue"])
        return rows.order_by(F("start_at").asc(nulls_last=True), "job__submitted_at", "pk")

    def paginate_queryset(self, queryset: Any) -> Any:
        page = super().paginate_queryset(queryset)
        rows = queryset if page is None else page
        return [forecast_view(self.request.user, row, self.cluster.name) for row in rows]


class JobForecastView(APIView):
    authentication_classes = AUTHENTICATION

    @extend_schema(responses=JobForecastSerializer, summary="A pending job's predicted start")
    def get(self, request: Request, cluster: str, job_id: str) -> Response:
        target = get_cluster_for_user(request.user, cluster)
        job = get_job_for_user(request.user, target, job_id)
        row = forecasts_for_user(request.user, target).filter(job=job).first()
        if row is None:
            raise Http404("no forecast for this job")
        return Response(JobForecastSerializer(forecast_view(request.user, row, target.name)).data)
