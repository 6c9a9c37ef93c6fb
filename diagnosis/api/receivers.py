"""Receivers of the machine API: scheduler events and Alertmanager webhooks. Thin: parse the
body, check access, call an action."""

from __future__ import annotations

import logging
from typing import Any

from django.conf import settings
from django.db import DatabaseError
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from diagnosis.access import clusters_for_sender, get_cluster_for_sender
from diagnosis.actions.oncall.alerts import (
    open_or_update_incident_from_alert,
    resolve_incident_from_alert,
)
from diagnosis.actions.records.events import record_scheduler_events
from diagnosis.api.auth import AUTHENTICATION, CanRecordSchedulerEvents, CanReportIncidents
from diagnosis.api.serializers import EventBatchSerializer
from diagnosis.choices import SenderKind
from diagnosis.edge.schedulers.base import EventBatch
from diagnosis.edge.sources import alertmanager
from diagnosis.models import Snapshot

logger = logging.getLogger(__name__)


class SchedulerEventsView(APIView):
    """``POST /api/v1/clusters/{cluster}/events``: a batch of normalized scheduler events, for
    schedulers without an adapter. Stored idempotently; a malformed batch is refused whole (400
    naming every bad field) and stores nothing."""

    authentication_classes = AUTHENTICATION
    permission_classes = [CanRecordSchedulerEvents]

    @extend_schema(request=OpenApiTypes.OBJECT, responses=OpenApiTypes.OBJECT)
    def post(self, request: Request, cluster: str) -> Response:
        target = get_cluster_for_sender(request.auth, cluster, SenderKind.EVENTS)
        batch = EventBatchSerializer(data=request.data)
        batch.is_valid(raise_exception=True)
        events = batch.normalized()
        recorded = record_scheduler_events(target, EventBatch(events=events, cursor=None))
        return Response(
            {"received": len(events), "stored": recorded.stored, "duplicates": recorded.duplicates}
        )


def alert_rules() -> alertmanager.AlertRules:
    return alertmanager.AlertRules.of(
        settings.GPUOBS_ALERTMANAGER_XID_ALERTS,
        settings.GPUOBS_ALERTMANAGER_HEALTH_ALERTS,
        settings.GPUOBS_ALERTMANAGER_CLUSTER_LABEL,
    )


class AlertmanagerWebhookView(APIView):
    """``POST /api/v1/alertmanager[?cluster=NAME]``: Alertmanager's webhook (version 4). Xid and
    GPU-health alerts open, update or resolve incidents; other alerts are acknowledged and
    ignored. The cluster comes from ``?cluster=`` or the alert's cluster label. Answers 200 with
    what each alert did (Alertmanager retries anything else), 400 for a body that is not an
    Alertmanager payload. An alert holding what gpuobs cannot store (a NUL, a node name longer
    than DNS allows, an index or code out of range) is ``rejected`` with its reasons; the other
    alerts of the batch are stored (each in its own transaction)."""

    authentication_classes = AUTHENTICATION
    permission_classes = [CanReportIncidents]

    @extend_schema(request=OpenApiTypes.OBJECT, responses=OpenApiTypes.OBJECT)
    def post(self, request: Request) -> Response:
        try:
            message = alertmanager.parse_webhook(request.data)
        except alertmanager.AlertmanagerPayloadError as exc:
            return Response({"errors": exc.errors}, status=status.HTTP_400_BAD_REQUEST)
        rules = alert_rules()
        default_cluster = request.query_params.get("cluster") or None
        clusters = clusters_for_sender(request.auth, SenderKind.ALERTS)
        documents: dict[int, dict[str, Any] | None] = {}
        results = []
        for alert in message.alerts:
            result: dict[str, Any] = {
                "fingerprint": alertmanager.shown(alert.fingerprint),
                "alertname": alertmanager.shown(alert.name, 200),
            }
            results.append(result)
            gpu_alert = alertmanager.classify(alert, rules)
            problems = alertmanager.alert_problems(alert, gpu_alert)
            if problems:
                result.update(outcome="rejected", errors=problems)
                continue
            if gpu_alert is None:
                result["outcome"] = "ignored"
                continue
            name = default_cluster or gpu_alert.cluster
            cluster = clusters.filter(name=name).first() if name else None
            if cluster is None:
                result["outcome"] = "unknown-cluster"
                result["cluster"] = name
                continue
            if cluster.pk not in documents:
                latest = Snapshot.objects.filter(cluster=cluster).order_by("-as_of").first()
                documents[cluster.pk] = latest.load_document() if latest else None
            record = (
                open_or_update_incident_from_alert
                if alert.status == "firing"
                else resolve_incident_from_alert
            )
            try:
                outcome = record(cluster, alert, gpu_alert, snapshot_document=documents[cluster.pk])
            except DatabaseError:  # its own transaction rolled back; the batch goes on
                logger.exception("alert %s could not be stored", result["fingerprint"])
                result.update(outcome="rejected", errors=["could not be stored"])
                continue
            result.update(
                outcome=outcome.outcome, incident=outcome.incident.pk, cluster=cluster.name
            )
        return Response({"alerts": results})
