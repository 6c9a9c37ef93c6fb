"""On-call's incidents as JSON (issue #16), every read through ``diagnosis.access`` (a manager:
the incidents of their tenants, and only their tenants' jobs in them):

- ``GET /api/v1/clusters/{cluster}/incidents?state=``: the incidents, unresolved first.
- ``GET /api/v1/clusters/{cluster}/incidents/{id}``: one, with its timeline.
- ``POST .../incidents/{id}/acknowledge``, ``.../resolve`` (``{"note": ...}``), ``.../note``
  (``{"text": ...}``): ``oncall`` or ``sre``; 403 without the role, 409 when the state does
  not allow it.
- ``POST .../incidents/{id}/drain`` (``{"expected_jobs": [...]}``, optional): drain the node
  now, the jobs to evict computed at this moment; 409 with the fresh list when they differ
  from ``expected_jobs``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from diagnosis import roles
from diagnosis.access import (
    get_cluster_for_user,
    get_incident_for_user,
    incidents_for_user,
    tenants_for_user,
)
from diagnosis.actions.oncall.drain import DrainChanged, drain_for_incident
from diagnosis.actions.oncall.incidents import (
    acknowledge_incident,
    add_incident_note,
    resolve_incident_by,
)
from diagnosis.actions.workflow.base import WorkflowError
from diagnosis.api.auth import AUTHENTICATION
from diagnosis.api.serializers import (
    IncidentDrainSerializer,
    IncidentNoteSerializer,
    IncidentResolveSerializer,
    IncidentSerializer,
)
from diagnosis.choices import IncidentState
from diagnosis.models import Cluster, Incident

LIMIT = 200


def _context(request: Request, cluster: Cluster, **extra: Any) -> dict[str, Any]:
    tenants = None
    if roles.is_tenant_scoped(request.user):
        tenants = set(tenants_for_user(request.user, cluster).values_list("name", flat=True))
    return {"tenants": tenants, **extra}


class IncidentListView(APIView):
    """The cluster's incidents the caller may read (``?state=`` one of the states)."""

    authentication_classes = AUTHENTICATION

    @extend_schema(responses=OpenApiTypes.OBJECT)
    def get(self, request: Request, cluster: str) -> Response:
        target = get_cluster_for_user(request.user, cluster)
        incidents = incidents_for_user(request.user, target).select_related(
            "cluster", "acknowledged_by", "resolved_by", "drain"
        )
        wanted = request.query_params.get("state")
        if wanted:
            if wanted not in IncidentState.values:
                choices = ", ".join(IncidentState.values)
                return Response({"errors": {"state": f"one of {choices}"}}, status=400)
            incidents = incidents.filter(state=wanted)
        rows = incidents.order_by("-opened_at", "-id")[:LIMIT]
        data = IncidentSerializer(rows, many=True, context=_context(request, target)).data
        return Response({"count": len(data), "results": data})


class IncidentDetailView(APIView):
    authentication_classes = AUTHENTICATION

    @extend_schema(responses=OpenApiTypes.OBJECT, operation_id="clusters_incident_retrieve")
    def get(self, request: Request, cluster: str, incident_id: int) -> Response:
        target = get_cluster_for_user(request.user, cluster)
        incident = get_incident_for_user(request.user, target, incident_id)
        context = _context(request, target, history=True)
        return Response(IncidentSerializer(incident, context=context).data)


class IncidentActionView(APIView):
    """``acknowledge``, ``resolve``, ``note`` or ``drain``."""

    authentication_classes = AUTHENTICATION

    @extend_schema(request=OpenApiTypes.OBJECT, responses=OpenApiTypes.OBJECT)
    def post(self, request: Request, cluster: str, incident_id: int, action: str) -> Response:
        target = get_cluster_for_user(request.user, cluster)
        incident = get_incident_for_user(request.user, target, incident_id)
        do: Callable[[], Any]
        if action == "acknowledge":
            do = lambda: acknowledge_incident(incident, request.user)  # noqa: E731
        elif action == "resolve":
            form = IncidentResolveSerializer(data=request.data)
            if not form.is_valid():
                return Response({"errors": form.errors}, status=400)
            note = form.validated_data["note"]
            do = lambda: resolve_incident_by(incident, request.user, note)  # noqa: E731
        elif action == "note":
            form = IncidentNoteSerializer(data=request.data)
            if not form.is_valid():
                return Response({"errors": form.errors}, status=400)
            text = form.validated_data["text"]
            do = lambda: add_incident_note(incident, request.user, text)  # noqa: E731
        elif action == "drain":
            form = IncidentDrainSerializer(data=request.data)
            if not form.is_valid():
                return Response({"errors": form.errors}, status=400)
            expected = form.validated_data["expected_jobs"]
            do = lambda: drain_for_incident(  # noqa: E731
                incident, request.user, expected_job_ids=expected
            )
        else:
            return Response({"detail": f"no such action: {action}"}, status=404)
        try:
            do()
        except DrainChanged as exc:
            return Response(
                {"detail": str(exc), "jobs_to_evict": exc.impact["jobs_to_evict"]},
                status=status.HTTP_409_CONFLICT,
            )
        except WorkflowError as exc:
            return Response({"detail": str(exc)}, status=status.HTTP_409_CONFLICT)
        fresh = Incident.objects.select_related("drain").get(pk=incident.pk)
        return Response(IncidentSerializer(fresh, context=_context(request, target)).data)
