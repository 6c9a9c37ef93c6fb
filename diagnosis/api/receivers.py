"""Receivers of the machine API: scheduler events and Alertmanager webhooks, and what became of
a received batch. Thin: parse the body, check access, call an action."""

from __future__ import annotations

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from diagnosis.access import (
    clusters_for_sender,
    get_cluster_for_sender,
    get_inbound_batch_for_sender,
)
from diagnosis.actions.oncall.inbound import receive_alert_batch
from diagnosis.actions.records.inbound import receive_scheduler_events
from diagnosis.api.auth import AUTHENTICATION, CanRecordSchedulerEvents, CanReportIncidents
from diagnosis.api.errors import invalid, paths_and_messages
from diagnosis.api.responses import (
    AlertBatchReceivedSerializer,
    EventsReceivedSerializer,
    InboundBatchSerializer,
)
from diagnosis.api.serializers import EventBatchSerializer
from diagnosis.choices import SenderKind
from diagnosis.edge.sources import alertmanager
from diagnosis.throttling import SenderRateThrottle


class SchedulerEventsView(APIView):
    """``POST /api/v1/clusters/{cluster}/events``: a batch of normalized scheduler events, for
    schedulers without an adapter. Validated whole in the request (a malformed batch is refused
    whole, 400 naming every bad field, and stores nothing), kept as one stored batch and answered
    202 at once, naming it; a worker stores the events, de-duplicated
    (``diagnosis.actions.records.inbound``). ``GET .../inbound/{batch}`` says how that went."""

    authentication_classes = AUTHENTICATION
    permission_classes = [CanRecordSchedulerEvents]
    throttle_classes = [SenderRateThrottle]

    @extend_schema(request=EventBatchSerializer, responses={202: EventsReceivedSerializer})
    def post(self, request: Request, cluster: str) -> Response:
        target = get_cluster_for_sender(request.auth, cluster, SenderKind.EVENTS)
        batch = EventBatchSerializer(data=request.data)
        batch.is_valid(raise_exception=True)
        stored = receive_scheduler_events(request.user, target, batch.normalized())
        return Response(
            {"batch": stored.pk, "received": stored.items, "state": stored.state},
            status=status.HTTP_202_ACCEPTED,
        )


class InboundBatchView(APIView):
    """``GET /api/v1/clusters/{cluster}/inbound/{batch}``: a received events or topology batch,
    for a token that may send that kind to the cluster: its state (``pending``, ``done``,
    ``failed``), what storing it did (``result``) and its error. 404 for another cluster's batch
    or one of a kind the token may not send."""

    authentication_classes = AUTHENTICATION

    @extend_schema(responses=InboundBatchSerializer)
    def get(self, request: Request, cluster: str, batch_id: int) -> Response:
        batch = get_inbound_batch_for_sender(request.auth, cluster, batch_id)
        return Response(
            {
                "batch": batch.pk,
                "cluster": cluster,
                "kind": batch.kind,
                "node": batch.node or None,
                "items": batch.items,
                "state": batch.state,
                "received_at": batch.received_at,
                "processed_at": batch.processed_at,
                "attempts": batch.attempts,
                "result": batch.result,
                "error": batch.error or None,
            }
        )


class AlertmanagerWebhookView(APIView):
    """``POST /api/v1/alertmanager[?cluster=NAME]``: Alertmanager's webhook (version 4). Xid and
    GPU-health alerts open, update or resolve incidents; other alerts are acknowledged and
    ignored. The cluster comes from ``?cluster=`` or the alert's cluster label. The body is
    validated and its GPU alerts stored in one row; the answer is 202 at once, naming the stored
    batch and, per alert, ``queued`` or what was decided without the database (``ignored``;
    ``rejected`` with its reasons for an alert holding what gpuobs cannot store: a NUL, a node
    name longer than DNS allows, an index or code out of range). A worker then reads the batch
    into incidents (``diagnosis.actions.oncall.inbound``). 400 for a body that is not an
    Alertmanager payload; 429 past the sender's rate (Alertmanager retries both 429 and 5xx)."""

    authentication_classes = AUTHENTICATION
    permission_classes = [CanReportIncidents]
    throttle_classes = [SenderRateThrottle]

    @extend_schema(
        # Alertmanager's own document (its webhook_config reference), parsed by the edge
        request=OpenApiTypes.OBJECT,
        responses={202: AlertBatchReceivedSerializer},
        parameters=[OpenApiParameter("cluster", str, description="the alerts' cluster's name")],
    )
    def post(self, request: Request) -> Response:
        try:
            message = alertmanager.parse_webhook(request.data)
        except alertmanager.AlertmanagerPayloadError as exc:
            return invalid(paths_and_messages(exc.errors), "not an Alertmanager webhook payload")
        received = receive_alert_batch(
            request.user,
            message,
            clusters=clusters_for_sender(request.auth, SenderKind.ALERTS),
            cluster_name=request.query_params.get("cluster") or "",
        )
        batch = received.batch
        return Response(
            {"batch": batch.pk if batch else None, "alerts": received.alerts},
            status=status.HTTP_202_ACCEPTED,
        )
