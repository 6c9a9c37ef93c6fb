"""The clusters of the API: a read-only list and detail, scoped to what the caller may read."""

from __future__ import annotations

from django.db.models import (
    QuerySet,
)
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_view
from rest_framework import viewsets

from diagnosis.access import (
    clusters_for_user,
)
from diagnosis.api.serializers import ClusterSerializer
from diagnosis.models import Cluster


@extend_schema_view(
    retrieve=extend_schema(parameters=[OpenApiParameter("id", int, OpenApiParameter.PATH)])
)
class ClusterViewSet(viewsets.ReadOnlyModelViewSet):
    serializer_class = ClusterSerializer
    lookup_field = "pk"

    def get_queryset(self) -> QuerySet[Cluster]:
        return clusters_for_user(self.request.user).order_by("name")
