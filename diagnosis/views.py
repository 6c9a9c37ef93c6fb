"""Pages and API views. Thin: read models, render; writes go through diagnosis.actions.

Every view needs a login (LoginRequiredMiddleware) unless marked ``@login_not_required``. The API
viewsets move to ``diagnosis/api/`` once that package exists.
"""

from django.contrib.auth.decorators import login_not_required
from django.db import DatabaseError, connection
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_safe
from rest_framework import serializers, viewsets

from diagnosis.models import Cluster


@require_safe
def overview(request: HttpRequest) -> HttpResponse:
    """The dashboard: every cluster and its state."""
    return render(request, "diagnosis/overview.html", {"clusters": Cluster.objects.all()})


@login_not_required
@never_cache
@require_safe
def healthz(request: HttpRequest) -> JsonResponse:
    """Liveness for load balancers and containers: 200 when the database answers, else 503."""
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    except DatabaseError:
        return JsonResponse({"status": "error", "database": "unreachable"}, status=503)
    return JsonResponse({"status": "ok", "database": "ok"})


class ClusterSerializer(serializers.ModelSerializer):
    """A cluster as the API shows it; data-source configs stay out (they are admin-only)."""

    class Meta:
        model = Cluster
        fields = [
            "id",
            "name",
            "scheduler_kind",
            "metrics_kind",
            "enabled",
            "dry_run",
            "status",
            "status_message",
            "last_cycle_at",
        ]
        read_only_fields = fields


class ClusterViewSet(viewsets.ReadOnlyModelViewSet):
    queryset = Cluster.objects.all()
    serializer_class = ClusterSerializer
