"""The fleet as JSON (docs/fairness.md "The fleet"):

- ``GET /api/v1/fleet``: every cluster the caller may read, with GPUs, allocation, activity,
  the last hour's top waste bucket and its cost, open incidents, stale data, and the totals;
- ``GET /api/v1/fleet/tenants?period=24h|7d|30d`` or ``?from=&to=``: the cross-cluster tenant
  report, one row per tenant name with each cluster's part.

Session or token authentication; the same scoping as the pages (a manager: the clusters and
tenants they manage, nothing of another tenant).
"""

from __future__ import annotations

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from diagnosis.api.auth import AUTHENTICATION
from diagnosis.api.errors import invalid
from diagnosis.api.responses import FleetSerializer, FleetTenantReportSerializer
from diagnosis.pages.fleet import build_fleet, fleet_period
from diagnosis.reports.fleet_report import build_fleet_tenant_report
from diagnosis.reports.period import PRESETS, PeriodError


class FleetView(APIView):
    """Every cluster the caller may read, with its headline figures."""

    authentication_classes = AUTHENTICATION

    @extend_schema(responses=FleetSerializer)
    def get(self, request: Request) -> Response:
        return Response(build_fleet(request.user).as_dict())


class FleetTenantsView(APIView):
    """The cross-cluster tenant report over a period."""

    authentication_classes = AUTHENTICATION

    @extend_schema(
        responses=FleetTenantReportSerializer,
        parameters=[
            OpenApiParameter("period", str, enum=list(PRESETS), description="a preset period"),
            OpenApiParameter("from", str, description="start, ISO 8601 (a date: its midnight)"),
            OpenApiParameter("to", str, description="end, ISO 8601"),
        ],
    )
    def get(self, request: Request) -> Response:
        try:
            period = fleet_period(request.query_params, request.user)
        except PeriodError as error:
            return invalid({error.field: str(error)})
        return Response(build_fleet_tenant_report(request.user, period).as_dict())
