"""Health for load balancers and containers (no login): ``/healthz`` and ``/healthz?deep=1``,
and Kubernetes's two probes (docs/operations.md, "Kubernetes"): ``/livez`` (the process serves
requests; never the database, so a database outage does not restart every web pod) and
``/readyz`` (the database and the broker answer: traffic may come)."""

from __future__ import annotations

from django.contrib.auth.decorators import login_not_required
from django.db import DatabaseError, connection
from django.http import HttpRequest, JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_safe

from diagnosis.actions.upkeep.health import deep_health, redis_health


@login_not_required
@never_cache
@require_safe
def livez(request: HttpRequest) -> JsonResponse:
    """200 while this process answers requests; touches neither the database nor Redis."""
    return JsonResponse({"status": "ok"})


@login_not_required
@never_cache
@require_safe
def readyz(request: HttpRequest) -> JsonResponse:
    """200 when the database and the broker (Redis; none in the embedded mode) answer, else 503
    naming which does not."""
    report = {"database": _database_health(), "redis": redis_health()}
    ok = all(part["status"] == "ok" for part in report.values())
    return JsonResponse({"status": "ok" if ok else "error", **report}, status=200 if ok else 503)


def _database_health() -> dict[str, str]:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    except DatabaseError:
        return {"status": "error", "detail": "unreachable"}
    return {"status": "ok", "detail": "answers"}


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
