"""A shared cache of the data-derived parts of the busiest pages (issue #17): the cluster
overview's panels, the findings list's body and the fairness report's body.

What is cached is HTML rendered from stored data, never the page around it: the page shell (the
top bar with the reader's name, the CSRF tokens of its forms, messages, the fairness page's
subscription form, the overview's data age) is rendered on every request. A fragment's key names
everything it depends on:

- the page and the cluster (its id and the fields the fragment reads of it);
- the cluster's data version: the newest stored cycle (id and time it ran). Every write a cycle
  makes (findings, rollups, jobs, tenants, snapshots) commits with that row
  (``record_cycle_steps``), so a new cycle is a new key; the time it ran guards against a
  database restored from a backup reusing ids the cache has already seen;
- anything else the page reads that changes without a cycle, as the caller passes it (the
  overview: the incidents and applied changes marked on its trend);
- the reader's scope: a tenant-scoped manager's own id and the tenants they manage in the
  cluster (another manager, or the same one after an admin changed their tenants, is another
  key); any other reader's roles (the pages differ only by role for them: an admin sees
  collection and delivery errors);
- the language and time zone, and the query string (keys sorted, values in their order).

Entries expire after ``GPUOBS_PAGE_CACHE_SECONDS`` (0: no cache at all), which bounds what a
write no key names (an admin editing a finding by hand, retention pruning the oldest rows) can
leave stale. After a new cycle each web worker (with the local-memory cache) or the first
request (with Redis) renders the fragment once; concurrent first requests may each render it
(no lock: a stampede of one render per worker, accepted). The cache failing (Redis down) is a
render on every request, never an error page.

:func:`rendered_once` is for what a page computes from one stored snapshot alone (the heatmap's
figure and node rows, the queue tree, issue #35): kept under the snapshot's id, and computed by
one request across every process sharing the cache, the others waiting (at most
:data:`RENDER_WAIT_S`) on a short lock instead of each computing it.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable, Hashable, Mapping
from typing import Any

from django.conf import settings
from django.core.cache import caches
from django.http import HttpRequest
from django.utils import timezone, translation
from django.utils.safestring import SafeString, mark_safe

from diagnosis.access import cycles_for_user, tenants_for_user
from diagnosis.models import Cluster
from diagnosis.roles import is_tenant_scoped, roles_of

logger = logging.getLogger(__name__)

CACHE = "pages"  # settings.CACHES: Redis when REDIS_URL is set, else the process's memory
# Bump when a fragment's template or context changes shape, so a rolling deploy never serves
# an older release's fragments from a shared cache.
FORMAT = 1
# After the cache failed, this process leaves it alone this long (a Redis outage costs one
# failed call per interval, not one per request).
RETRY_AFTER_S = 10.0
_failed_at: float | None = None
# rendered_once: how long the lock of a render lives (a render that crashed frees it then), how
# long another request waits on it before computing by itself, and how often it looks.
RENDER_LOCK_S = 10
RENDER_WAIT_S = 5.0
RENDER_POLL_S = 0.02
renders = 0  # what rendered_once computed in this process (bench/pages.py, the tests count it)


def data_version(request: HttpRequest, cluster: Cluster) -> tuple[Any, ...]:
    """The cluster's newest stored cycle, ``(id, ran_at)`` (``(None, None)`` before the first)."""
    newest = (
        cycles_for_user(request.user, cluster).order_by("-id").values_list("id", "ran_at").first()
    )
    return tuple(newest) if newest else (None, None)


def viewer_scope(request: HttpRequest, cluster: Cluster) -> tuple[Any, ...]:
    """What of the reader a fragment may depend on: a tenant-scoped manager's id and the
    tenants they manage in ``cluster``; for anyone else, their roles."""
    user = request.user
    if is_tenant_scoped(user):
        tenants = sorted(tenants_for_user(user, cluster).values_list("pk", flat=True))
        return ("tenants", user.pk, tuple(tenants))
    return ("roles", tuple(sorted(roles_of(user))))


def query_key(request: HttpRequest) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """The query string, normalized: keys sorted, each key's values in their order."""
    return tuple(sorted((key, tuple(values)) for key, values in request.GET.lists()))


def fragment_key(
    page: str,
    request: HttpRequest,
    cluster: Cluster,
    parts: tuple[Hashable, ...],
    version: tuple[Any, ...] | None = None,
) -> str:
    """The cache key of ``page``'s fragment for this request (``version``: the
    :func:`data_version`, when the caller read it already)."""
    described = repr(
        (
            FORMAT,
            page,
            cluster.pk,
            cluster.name,
            cluster.scheduler_kind,
            version or data_version(request, cluster),
            parts,
            viewer_scope(request, cluster),
            translation.get_language(),
            timezone.get_current_timezone_name(),
            query_key(request),
        )
    )
    digest = hashlib.sha256(described.encode()).hexdigest()[:40]
    return f"gpuobs:page:{page}:{cluster.pk}:{digest}"


def cached_fragments(
    page: str,
    request: HttpRequest,
    cluster: Cluster,
    render: Callable[[], Mapping[str, Any]],
    *,
    parts: tuple[Hashable, ...] = (),
    version: tuple[Any, ...] | None = None,
) -> dict[str, Any]:
    """``render()``'s result (HTML fragments as ``SafeString`` and small picklable values by
    name), from the cache when this request's key is there."""
    seconds = settings.GPUOBS_PAGE_CACHE_SECONDS
    if seconds <= 0:
        return dict(render())
    key = fragment_key(page, request, cluster, parts, version)
    stored = _get(key)
    if stored is None:
        stored = {
            name: ("html", str(value)) if isinstance(value, SafeString) else ("value", value)
            for name, value in render().items()
        }
        _set(key, stored, seconds)
    return {
        name: mark_safe(value) if kind == "html" else value  # noqa: S308 - HTML we rendered
        for name, (kind, value) in stored.items()
    }


def cached_value(parts: tuple[Hashable, ...], compute: Callable[[], Any]) -> Any:
    """``compute()``, cached under ``parts`` alone: for a small value of stored data that is
    the same for every reader (``parts`` must name its cluster and data version)."""
    seconds = settings.GPUOBS_PAGE_CACHE_SECONDS
    if seconds <= 0:
        return compute()
    digest = hashlib.sha256(repr((FORMAT, parts)).encode()).hexdigest()[:40]
    key = f"gpuobs:value:{digest}"
    stored = _get(key)
    if stored is None:
        stored = {"value": ("value", compute())}
        _set(key, stored, seconds)
    return stored["value"][1]


def rendered_once(parts: tuple[Hashable, ...], compute: Callable[[], Any]) -> Any:
    """``compute()``, kept in the shared cache under ``parts`` (which must name the stored
    snapshot it is computed from by id, and everything else it depends on), computed once
    across processes: the first request takes a lock and computes; a concurrent one waits for
    its result (computing by itself only when the cache is down or the wait runs out)."""
    seconds = settings.GPUOBS_PAGE_CACHE_SECONDS
    if seconds <= 0:
        return _render(compute)
    digest = hashlib.sha256(repr((FORMAT, parts)).encode()).hexdigest()[:40]
    key, lock = f"gpuobs:once:{digest}", f"gpuobs:once-lock:{digest}"
    deadline = time.monotonic() + RENDER_WAIT_S
    while True:
        stored = _get(key)
        if stored is not None:
            return stored["value"][1]
        locked = _lock(lock)
        if locked or time.monotonic() >= deadline:
            break
        time.sleep(RENDER_POLL_S)  # another process is computing it: wait for its result
    try:
        value = _render(compute)
        _set(key, {"value": ("value", value)}, seconds)
    finally:
        if locked:  # a request whose wait ran out leaves the computing one's lock alone
            _unlock(lock)
    return value


def _render(compute: Callable[[], Any]) -> Any:
    global renders  # a count for the bench and the tests
    renders += 1
    return compute()


def _lock(lock: str) -> bool:
    """Whether this request took ``lock`` (True when the cache is not usable: it computes)."""
    if not _cache_usable():
        return True
    try:
        return bool(caches[CACHE].add(lock, 1, RENDER_LOCK_S))
    except Exception as error:  # any cache failure is a render, never a 500
        _failed("lock", error)
        return True


def _unlock(lock: str) -> None:
    if not _cache_usable():
        return
    try:
        caches[CACHE].delete(lock)
    except Exception as error:  # as above
        _failed("unlock", error)


def _cache_usable() -> bool:
    return _failed_at is None or time.monotonic() - _failed_at > RETRY_AFTER_S


def _failed(action: str, error: Exception) -> None:
    global _failed_at  # the process's one breaker
    _failed_at = time.monotonic()
    logger.warning("page cache %s failed (%s); rendering without it", action, error)


def _get(key: str) -> dict[str, tuple[str, Any]] | None:
    if not _cache_usable():
        return None
    try:
        return caches[CACHE].get(key)
    except Exception as error:  # any cache failure is a render, never a 500
        _failed("read", error)
        return None


def _set(key: str, value: dict[str, tuple[str, Any]], seconds: int) -> None:
    if not _cache_usable():
        return
    try:
        caches[CACHE].set(key, value, seconds)
    except Exception as error:  # as above
        _failed("write", error)
