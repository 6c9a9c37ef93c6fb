"""The health of gpuobs's own services (issue #18): one clock, heartbeats, and what
``/healthz?deep=1`` and ``manage.py healthcheck`` report.

*One clock.* Every time a cycle or a claim is judged by comes from the database
(:func:`database_now`), never from a worker's wall clock: a worker whose clock runs fast or slow
must not discard tasks, stamp cycles in the future or take over a live claim. A worker whose clock
differs from the database's by more than ``GPUOBS_MAX_CLOCK_SKEW_SECONDS`` refuses to run cycles
(:func:`clock_skew_s`; the refusal is a cycle row, shown on the pages and in the API).

*Heartbeats.* Beat writes ``gpuobs:heartbeat:beat`` each time it sends a task (the
``after_task_publish`` signal in the beat process, gpuobs/celery.py); a worker writes
``gpuobs:heartbeat:worker`` each time it runs the heartbeat task beat sends every cycle period,
so a fresh worker heartbeat proves a worker *takes tasks*, not only that its process lives. Each
heartbeat is a small JSON value: when (database time), who (host and pid) and the writer's clock
skew. Both live in Redis for a few cycle periods; a missing one reads as dead.
"""

from __future__ import annotations

import json
import logging
import os
import socket
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.db import DatabaseError, connection
from django.utils import timezone

from gpuobs import redis_sentinel

if TYPE_CHECKING:
    import redis

logger = logging.getLogger(__name__)

HEARTBEAT_KEY = "gpuobs:heartbeat:{component}"
# Beat-sent cycles skipped because their cluster's interval was already taken (a second beat):
# a hash of cluster id -> count, kept while such sends go on and a heartbeat's life after.
SAME_INTERVAL_SKIPS_KEY = "gpuobs:cycle-same-interval-skips"
COMPONENTS = ("worker", "beat")
# Redis calls of the health checks and heartbeats give up quickly: a health check that hangs
# on a dead Redis is itself a failure.
REDIS_TIMEOUT_S = 2.0


def redis_error() -> type[Exception]:
    """Redis's error, for an ``except`` after a call through :func:`redis_client` (which has
    imported redis by then; an ``except`` evaluates its type only when something was raised)."""
    import redis  # noqa: PLC0415 -- see redis_client

    return redis.RedisError


@lru_cache(maxsize=4)
def redis_client(url: str) -> redis.Redis:
    """A Redis client with short socket timeouts (locks, interval keys, heartbeats)."""
    import redis  # noqa: PLC0415 -- its package loads redis.asyncio: not at start-up (#35)

    options: dict[str, Any] = {
        "socket_timeout": REDIS_TIMEOUT_S,
        "socket_connect_timeout": REDIS_TIMEOUT_S,
        "health_check_interval": 10,
        "retry_on_timeout": True,
    }
    if redis_sentinel.is_sentinel(url):
        return redis_sentinel.master_client(url, settings.GPUOBS_REDIS_SENTINEL_MASTER, **options)
    return redis.Redis.from_url(url, **options)


def database_now() -> datetime:
    """The database's clock (PostgreSQL's ``clock_timestamp()``); SQLite (the embedded mode, one
    machine) has no clock of its own worth asking, so there it is this process's."""
    if connection.vendor != "postgresql":
        return timezone.now()
    with connection.cursor() as cursor:
        cursor.execute("SELECT clock_timestamp()")
        return cursor.fetchone()[0]


def clock_skew_s() -> float:
    """How far this process's wall clock is ahead (+) or behind (-) the database's, seconds."""
    return (timezone.now() - database_now()).total_seconds()


def skew_refusal(skew_s: float) -> str:
    """Why a cycle is refused for a clock skew of ``skew_s`` (empty: within the bound)."""
    bound = settings.GPUOBS_MAX_CLOCK_SKEW_SECONDS
    if abs(skew_s) <= bound:
        return ""
    way = "ahead of" if skew_s > 0 else "behind"
    logger.warning("worker %s: clock %+.0f s off the database's", socket.gethostname(), skew_s)
    return (
        f"skipped: the worker's clock is {abs(skew_s):.0f} s {way} the database's "
        f"(more than {bound} s): cycle refused until the clocks agree (check the workers' NTP)"
    )


# -- heartbeats ----------------------------------------------------------------------------------


def heartbeat_ttl_s() -> int:
    """How long a heartbeat is kept: a few cycle periods, so a dead one disappears."""
    return max(30, 5 * settings.GPUOBS_CYCLE_SECONDS)


def stale_after_s() -> float:
    """A heartbeat older than this means its component is dead or stuck: three heartbeat
    periods (GPUOBS_HEARTBEAT_SECONDS, at most 15 s) and 5 s, so at the default 60 s cycle period
    a dead worker or beat is reported within 50 s, and a live one is back within one heartbeat
    period (docs/operations.md, "Faults and supervision")."""
    return 3 * settings.GPUOBS_HEARTBEAT_SECONDS + 5


def write_heartbeat(component: str, **extra: Any) -> None:
    """Record that ``component`` (worker or beat) is alive now; never raises (a heartbeat that
    cannot be written is what the health check then reports)."""
    if not settings.REDIS_URL:
        return
    try:
        at = database_now()
        skew = (timezone.now() - at).total_seconds()
    except DatabaseError:
        at, skew = timezone.now(), None
    value = {
        "at": at.isoformat(),
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "clock_skew_s": skew,
        **extra,
    }
    try:
        redis_client(settings.REDIS_URL).set(
            HEARTBEAT_KEY.format(component=component), json.dumps(value), ex=heartbeat_ttl_s()
        )
    except redis_error():
        logger.warning("heartbeat of %s not written: Redis unreachable", component)


@dataclass(frozen=True)
class ComponentHealth:
    name: str
    ok: bool
    detail: str
    last_seen: str | None = None
    age_s: float | None = None
    clock_skew_s: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "status": "ok" if self.ok else "error",
            "detail": self.detail,
            "last_seen": self.last_seen,
            "age_s": None if self.age_s is None else round(self.age_s, 1),
            "clock_skew_s": None if self.clock_skew_s is None else round(self.clock_skew_s, 1),
        }


def component_health(
    component: str, now: datetime | None = None, *, show_hosts: bool = False
) -> ComponentHealth:
    """Whether ``component``'s heartbeat is fresh (see :func:`stale_after_s`); ``show_hosts``
    names the writer's host and pid (for staff: ``/healthz`` answers anyone)."""
    if not settings.REDIS_URL:
        return ComponentHealth(component, True, "embedded mode: cycles run in the web process")
    try:
        raw = redis_client(settings.REDIS_URL).get(HEARTBEAT_KEY.format(component=component))
    except redis_error() as exc:
        return ComponentHealth(component, False, f"Redis unreachable: {type(exc).__name__}")
    if raw is None:
        return ComponentHealth(component, False, f"no heartbeat from any {component}")
    beat = json.loads(raw)
    seen = datetime.fromisoformat(beat["at"])
    age = ((now or database_now()) - seen).total_seconds()
    skew = beat.get("clock_skew_s")
    ok = age <= stale_after_s()
    detail = f"last heartbeat {age:.0f} s ago"
    if show_hosts:
        detail += f" from {beat.get('host')} (pid {beat.get('pid')})"
    if not ok:
        detail = f"stale: {detail}, more than {stale_after_s():.0f} s"
    elif skew is not None and abs(skew) > settings.GPUOBS_MAX_CLOCK_SKEW_SECONDS:
        ok = False
        detail = f"{detail}; its clock is {skew:+.0f} s off the database's: cycles are refused"
    return ComponentHealth(component, ok, detail, beat["at"], age, skew)


def count_same_interval_skip(cluster_id: int) -> None:
    """Count a beat-sent cycle skipped because its interval was taken; never raises."""
    if not settings.REDIS_URL:
        return
    try:
        client = redis_client(settings.REDIS_URL)
        client.hincrby(SAME_INTERVAL_SKIPS_KEY, str(cluster_id), 1)
        client.expire(SAME_INTERVAL_SKIPS_KEY, heartbeat_ttl_s())
    except redis_error():
        logger.warning("same-interval skip of cluster %s not counted: no Redis", cluster_id)


def same_interval_skips() -> dict[str, int]:
    """Cluster id -> beat-sent cycles skipped as a second beat's, lately (empty: none)."""
    if not settings.REDIS_URL:
        return {}
    try:
        counts = redis_client(settings.REDIS_URL).hgetall(SAME_INTERVAL_SKIPS_KEY)
    except redis_error():
        return {}
    return {key.decode(): int(value) for key, value in counts.items()}


def redis_health() -> dict[str, str]:
    if not settings.REDIS_URL:
        return {"status": "ok", "detail": "embedded mode: no Redis"}
    try:
        redis_client(settings.REDIS_URL).ping()
    except redis_error() as exc:
        return {"status": "error", "detail": f"unreachable: {type(exc).__name__}"}
    return {"status": "ok", "detail": "answers"}


def deep_health(*, show_hosts: bool = False) -> tuple[bool, dict[str, Any]]:
    """Database, Redis, worker and beat: (all fine, the report ``/healthz?deep=1`` answers)."""
    report: dict[str, Any] = {}
    try:
        now = database_now()
        report["database"] = {"status": "ok", "detail": "answers"}
    except DatabaseError:
        now = None
        report["database"] = {"status": "error", "detail": "unreachable"}
    report["redis"] = redis_health()
    for component in COMPONENTS:
        health = component_health(component, now or timezone.now(), show_hosts=show_hosts)
        report[component] = health.as_dict()
    # a second beat is harmless (each interval still runs one cycle) but a misconfiguration
    report["beat"]["same_interval_skips"] = same_interval_skips()
    ok = all(part["status"] == "ok" for part in report.values())
    return ok, {"status": "ok" if ok else "error", **report}
