"""On-call's incidents as JSON (issue #16), every read through ``diagnosis.access`` (a manager:
the incidents of their tenants, and only their tenants' jobs in them):

- ``GET /api/v1/clusters/{cluster}/incidents?state=``: the incidents, unresolved first.
- ``GET /api/v1/clusters/{cluster}/incidents/{id}``: one, with its timeline.
- ``POST .../incidents/{id}/acknowledge``, ``.../resolve`` (``{"note": ...}``), ``.../note``
  (``{"text": ...}``): ``oncall`` or ``sre``; 403 without the role, 409 when the state does
  not allow it. Each action is its own path and operation (:data:`ACTIONS`); another word
  there is no path (404).
- ``POST .../incidents/{id}/drain`` (``{"expected_jobs": [...]}``, optional): drain the node
  now, the jobs to evict computed at this moment; 409 with the fresh list when they differ
  from ``expected_jobs``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from drf_spectacular.utils import (
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
    extend_schema_view,
)
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.serializers import Serializer
from rest_framework.views import APIView

from diagnosis import roles
from diagnosis.access import (
    get_cluster_for_user,
    get_incident_for_user,
    incidents_for_user,
    prime_texts_for_user,
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
from diagnosis.api.errors import invalid
from diagnosis.api.responses import IncidentConflictSerializer, IncidentListSerializer
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
    return {"tenants": tenants, "user": request.user, **extra}


class IncidentListView(APIView):
    """The cluster's incidents the caller may read (``?state=`` one of the states)."""

    authentication_classes = AUTHENTICATION

    @extend_schema(
        responses=IncidentListSerializer,
        parameters=[
            OpenApiParameter(
                "state", str, enum=IncidentState.values, description="only incidents in this state"
            )
        ],
    )
    def get(self, request: Request, cluster: str) -> Response:
        target = get_cluster_for_user(request.user, cluster)
        incidents = incidents_for_user(request.user, target).select_related(
            "cluster", "acknowledged_by", "resolved_by", "drain"
        )
        wanted = request.query_params.get("state")
        if wanted:
            if wanted not in IncidentState.values:
                choices = ", ".join(IncidentState.values)
                return invalid({"state": f"one of {choices}"})
            incidents = incidents.filter(state=wanted)
        rows = list(incidents.order_by("-opened_at", "-id")[:LIMIT])
        prime_texts_for_user(request.user, target.pk, [i.summary for i in rows])
        data = IncidentSerializer(rows, many=True, context=_context(request, target)).data
        return Response({"count": len(data), "results": data})


class IncidentDetailView(APIView):
    authentication_classes = AUTHENTICATION

    @extend_schema(responses=IncidentSerializer, operation_id="clusters_incident_retrieve")
    def get(self, request: Request, cluster: str, incident_id: int) -> Response:
        target = get_cluster_for_user(request.user, cluster)
        incident = get_incident_for_user(request.user, target, incident_id)
        context = _context(request, target, history=True)
        return Response(IncidentSerializer(incident, context=context).data)


# Each action: the serializer of its body (None: it takes none), and the call that does it, given
# the incident, the caller and the body's validated fields.
_Do = Callable[[Incident, Any, dict[str, Any]], Any]
ACTIONS: dict[str, tuple[type[Serializer] | None, _Do]] = {
    "acknowledge": (None, lambda incident, user, _: acknowledge_incident(incident, user)),
    "resolve": (
        IncidentResolveSerializer,
        lambda incident, user, fields: resolve_incident_by(incident, user, fields["note"]),
    ),
    "note": (
        IncidentNoteSerializer,
        lambda incident, user, fields: add_incident_note(incident, user, fields["text"]),
    ),
    "drain": (
        IncidentDrainSerializer,
        lambda incident, user, fields: drain_for_incident(
            incident, user, expected_job_ids=fields["expected_jobs"]
        ),
    ),
}
CONFLICT = OpenApiResponse(
    IncidentConflictSerializer,
    description="The incident's state does not allow it; for a drain, the jobs to evict "
    "changed (`jobs_to_evict` holds the fresh list).",
)


class IncidentActionView(APIView):
    """One of :data:`ACTIONS` (``incident_action``): each has its view below, and its path."""

    authentication_classes = AUTHENTICATION
    incident_action = ""

    def post(self, request: Request, cluster: str, incident_id: int) -> Response:
        target = get_cluster_for_user(request.user, cluster)
        incident = get_incident_for_user(request.user, target, incident_id)
        form_class, do = ACTIONS[self.incident_action]
        fields: dict[str, Any] = {}
        if form_class is not None:
            form = form_class(data=request.data)
            if not form.is_valid():
                return invalid(form.errors)
            fields = form.validated_data
        try:
            do(incident, request.user, fields)
        except DrainChanged as exc:
            return Response(
                {"detail": str(exc), "jobs_to_evict": exc.impact["jobs_to_evict"]},
                status=status.HTTP_409_CONFLICT,
            )
        except WorkflowError as exc:
            return Response({"detail": str(exc)}, status=status.HTTP_409_CONFLICT)
        fresh = Incident.objects.select_related("drain").get(pk=incident.pk)
        return Response(IncidentSerializer(fresh, context=_context(request, target)).data)


def _action_view(name: str) -> type[IncidentActionView]:
    """The view of one action: its own path, body and operation in the schema."""
    body, _ = ACTIONS[name]
    view = type(
        f"Incident{name.capitalize()}View",
        (IncidentActionView,),
        {"incident_action": name, "__module__": __name__, "__doc__": f"``POST .../{name}``."},
    )
    schema = extend_schema(
        request=body,
        responses={200: IncidentSerializer, 409: CONFLICT},
        operation_id=f"clusters_incident_{name}",
        summary=f"{name.capitalize()} the incident",
    )
    return extend_schema_view(post=schema)(view)


IncidentAcknowledgeView = _action_view("acknowledge")
IncidentResolveView = _action_view("resolve")
IncidentNoteView = _action_view("note")
IncidentDrainView = _action_view("drain")
