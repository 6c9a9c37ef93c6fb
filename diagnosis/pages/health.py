"""Liveness for load balancers and containers (no login): ``/healthz`` and ``/healthz?deep=1``."""

from __future__ import annotations

from django.contrib.auth.decorators import login_not_required
from django.db import DatabaseError, connection
from django.http import HttpRequest, JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_safe

from diagnosis.actions.upkeep.health import deep_health


@login_not_required
@never_cache
@require_safe
def healthz(request: HttpRequest) -> JsonResponse:
    """200 when the database answers, else 503. With ``?deep=1`` also Redis, and the worker's and
    beat's heartbeats (diagnosis/actions/upkeep/health.py): 503 when any is missing or stale, with a
    part per component saying which and since when (docker-compose's health checks use it); the
    heartbeats' hosts and pids only for staff."""
    if request.GET.get("deep") in ("1", "true", "yes"):
        ok, report = deep_health(show_hosts=request.user.is_staff)
        return JsonResponse(report, status=200 if ok else 503)
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    except DatabaseError:
        return JsonResponse({"status": "error", "database": "unreachable"}, status=503)
    return JsonResponse({"status": "ok", "database": "ok"})
