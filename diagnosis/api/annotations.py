"""``GET /api/v1/annotations``: what changed and when, for Grafana annotations, read-only.

Grafana reads it through the **Infinity** datasource (``yesoreyeram-infinity-datasource``: JSON
from a URL, columns picked by name), so gpuobs pushes nothing to Grafana's own APIs. Each item is
one event: an applied recommendation (placement policy, queue weight; ``drain-node`` ones are
tagged ``drain``) at its ``applied_at``, and an incident from ``opened_at`` to ``resolved_at``.

Query: ``from`` and ``to`` (Unix milliseconds, as Grafana's ``${__from}``/``${__to}``, or
RFC 3339; default the last 24 hours), ``cluster`` (repeatable, or comma-separated as Grafana's
``${cluster:csv}`` sends a multi-value selection; ``.*``, ``$__all`` or nothing: every cluster the
user may read; :func:`cluster_selection`). At most :data:`LIMIT` items, newest first. Access:
the same helpers as the pages (a tenant-scoped manager sees only their tenants' incidents and no
recommendations).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

from django.conf import settings
from django.urls import reverse
from django.utils import timezone
from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.exceptions import ValidationError
from rest_framework.response import Response
from rest_framework.views import APIView

from diagnosis.access import (
    clusters_for_user,
    incidents_for_user,
    recommendations_for_user,
    text_for_user,
)
from diagnosis.api.auth import AUTHENTICATION
from diagnosis.choices import RecommendationKind
from diagnosis.core.vocabulary import parse_time

LIMIT = 1000
DEFAULT_SPAN = timedelta(hours=24)
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


# Unix milliseconds are ASCII digits (``str.isdigit`` also takes "²"); a number beyond what
# ``datetime`` holds is refused like any other nonsense, with a 400.
_MILLISECONDS = re.compile(r"[0-9]+")


def _from_milliseconds(raw: str) -> datetime | None:
    try:
        return datetime.fromtimestamp(int(raw) / 1000, tz=UTC)
    except (OverflowError, OSError, ValueError):
        return None


def _moment(raw: str | None, name: str) -> datetime | None:
    if not raw:
        return None
    moment = _from_milliseconds(raw) if _MILLISECONDS.fullmatch(raw) else parse_time(raw)
    if moment is None or moment < EPOCH:  # before 1970 nothing happened, and "to - 24 h" holds
        raise ValidationError(
            {name: f"expected Unix milliseconds or an RFC 3339 time, got {raw[:40]!r}"}
        )
    return moment


def _ms(moment: datetime | None) -> int | None:
    return None if moment is None else int(moment.timestamp() * 1000)


def _link(page: str, **kwargs: Any) -> str:
    return settings.GPUOBS_EXTERNAL_URL.rstrip("/") + reverse(f"diagnosis:{page}", kwargs=kwargs)


def annotations_for(user: Any, names: list[str], start: datetime, end: datetime) -> list[dict]:
    clusters = clusters_for_user(user)
    if names:
        clusters = clusters.filter(name__in=names)
    items: list[dict[str, Any]] = []
    for cluster in clusters.order_by("name"):
        for rec in (
            recommendations_for_user(user, cluster)
            .filter(applied_at__gte=start, applied_at__lte=end)
            .order_by("-applied_at")[:LIMIT]
        ):
            tags = ["gpuobs", "recommendation", rec.kind, rec.state]
            if rec.kind == RecommendationKind.DRAIN_NODE:
                tags.append("drain")
            items.append(
                {
                    "time": _ms(rec.applied_at),
                    "timeEnd": None,
                    "cluster": cluster.name,
                    "kind": "drain" if rec.kind == RecommendationKind.DRAIN_NODE else "change",
                    "title": f"{rec.kind} {rec.target}: {rec.state}",
                    "text": f"{rec.target}: {rec.change.get('from')} → {rec.change.get('to')}",
                    "tags": tags,
                    "url": _link("recommendation", name=cluster.name, recommendation_id=rec.pk),
                }
            )
        incidents = incidents_for_user(user, cluster).filter(opened_at__lte=end)
        for incident in incidents.exclude(resolved_at__lt=start).order_by("-opened_at")[:LIMIT]:
            xid = f"Xid {incident.xid_code} " if incident.xid_code is not None else ""
            items.append(
                {
                    "time": _ms(incident.opened_at),
                    "timeEnd": _ms(incident.resolved_at),
                    "cluster": cluster.name,
                    "kind": "incident",
                    "title": f"{xid}incident on {incident.node}"
                    + (f"/{incident.gpu_index}" if incident.gpu_index is not None else ""),
                    "text": text_for_user(user, cluster.pk, incident.summary),
                    "tags": ["gpuobs", "incident", incident.state],
                    "url": _link("incidents", name=cluster.name),
                }
            )
    items.sort(key=lambda item: item["time"], reverse=True)
    return items[:LIMIT]


# What Grafana sends for a variable's "All": the dashboard's allValue, or its own marker.
EVERY_CLUSTER = frozenset({".*", "$__all", "All"})


def cluster_selection(values: list[str]) -> list[str]:
    """The cluster names of ``cluster`` parameters (empty: every cluster): each may hold several
    names, comma-separated or in Grafana's glob braces (``{a,b}``); an "All" value wins."""
    names: list[str] = []
    for value in values:
        inner = value.strip()
        if inner.startswith("{") and inner.endswith("}"):
            inner = inner[1:-1]
        for name in (part.strip() for part in inner.split(",")):
            if name in EVERY_CLUSTER:
                return []
            if name and name not in names:
                names.append(name)
    return names


# An item's kind (its enum in the schema: SPECTACULAR_SETTINGS["ENUM_NAME_OVERRIDES"]).
ANNOTATION_KINDS = ("change", "drain", "incident")

# What each item carries (deploy/grafana/annotations-infinity.json picks these columns).
ANNOTATIONS = inline_serializer(
    "Annotation",
    {
        "time": serializers.IntegerField(),
        "timeEnd": serializers.IntegerField(allow_null=True),
        "cluster": serializers.CharField(),
        "kind": serializers.ChoiceField(ANNOTATION_KINDS),
        "title": serializers.CharField(),
        "text": serializers.CharField(),
        "tags": serializers.ListField(child=serializers.CharField()),
        "url": serializers.URLField(),
    },
    many=True,
)


class AnnotationsView(APIView):
    """Read-only list of changes and incidents in a time range (for Grafana's Infinity)."""

    authentication_classes = AUTHENTICATION  # Infinity sends "Authorization: Bearer <token>"

    @extend_schema(
        parameters=[
            OpenApiParameter("from", str, description="Unix milliseconds or RFC 3339"),
            OpenApiParameter("to", str, description="Unix milliseconds or RFC 3339"),
            OpenApiParameter("cluster", str, many=True, description="a cluster's name"),
        ],
        responses=ANNOTATIONS,
    )
    def get(self, request: Any) -> Response:
        end = _moment(request.query_params.get("to"), "to") or timezone.now()
        start = _moment(request.query_params.get("from"), "from") or end - DEFAULT_SPAN
        if start > end:
            raise ValidationError({"from": "must not be after 'to'"})
        names = cluster_selection(request.query_params.getlist("cluster"))
        return Response(annotations_for(request.user, names, start, end))
