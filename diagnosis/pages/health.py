"""Health for load balancers and containers (no login): ``/healthz`` and ``/healthz?deep=1``,
and Kubernetes's two probes (docs/operations.md, "Kubernetes"): ``/livez`` (the process serves
requests; never the database, so a database outage does not restart every web pod) and
``/readyz`` (the database and the broker answer: traffic may come)."""

from __future__ import annotations

import logging
from typing import Any

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


logger = logging.getLogger(__name__)


def _probe_answer(report: dict[str, Any], status: int) -> JsonResponse:
    """A probe's 503 is its answer, not a server error: logged here, once, as a warning -- or at
    INFO while gpuobs is starting (a worker or beat that has not yet written its first
    heartbeat) -- instead of Django's ERROR line for every 5xx (docs/operations.md, "Logs")."""
    response = JsonResponse(report, status=status)
    if status >= 500:
        failing = {name: part for name, part in report.items() if isinstance(part, dict)}
        failing = {n: p for n, p in failing.items() if p.get("status") != "ok"}
        starting = bool(failing) and all(
            str(part.get("detail", "")).startswith("no heartbeat") for part in failing.values()
        )
        logger.log(
            logging.INFO if starting else logging.WARNING,
            "health probe answered %s%s: %s",
            status,
            " (starting)" if starting else "",
            ", ".join(f"{n}: {p.get('detail')}" for n, p in failing.items()) or "database",
        )
        response._has_been_logged = True  # Django's log_response skips what was logged
    return response


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
        return _probe_answer(report, 200 if ok else 503)
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    except DatabaseError:
        return _probe_answer({"status": "error", "database": "unreachable"}, 503)
    return JsonResponse({"status": "ok", "database": "ok"})
