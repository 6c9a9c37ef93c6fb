"""Work that actions start, sent by task name once the surrounding transaction commits.

The actions never import :mod:`diagnosis.tasks` (the tasks import the actions): this module
names each task as a string and imports nothing of the project, so the import graph has no
cycle, lazy imports included. Queues follow from the names (``gpuobs/celery.py``). In the
embedded mode (``task_always_eager``, no broker) a task runs in the sending process, as
Celery's own ``delay`` does there.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping, Sequence
from functools import partial
from typing import Any

from celery import current_app
from django.conf import settings
from django.db import connections, transaction

DRY_RUN = "diagnosis.tasks.actuate_dry_run"
APPLY = "diagnosis.tasks.actuate_recommendation"
NOTIFY = "diagnosis.tasks.notify_cluster"
ESTIMATE_IMPACT = "diagnosis.tasks.estimate_impact"
ESTIMATE_FORECASTS = "diagnosis.tasks.estimate_forecasts"
RECORD_ALERT_BATCH = "diagnosis.tasks.record_alert_batch"
AUTOPILOT = "diagnosis.tasks.run_autopilot"
RECORD_CLUSTER_BATCH = "diagnosis.tasks.record_cluster_batch"
PRERENDER_PAGES = "diagnosis.tasks.prerender_pages"

logger = logging.getLogger(__name__)


def send_task(name: str, args: Sequence[Any] = (), **options: Any) -> None:
    """Send the task called ``name`` now (raises when the broker refuses it)."""
    app = current_app
    if not app.conf.task_always_eager:
        sent = app.send_task(name, tuple(args), **options)
        # with the request id of what sent it (gpuobs/logs.py), which the task's lines carry too
        logger.info("sent %s (task %s)", name, sent.id)
        return
    # send_task ignores task_always_eager: run the registered task here, as delay() would
    if name not in app.tasks:
        app.loader.import_default_modules()  # the autodiscovered task modules
    app.tasks[name].apply_async(tuple(args), **options)


def send_on_commit(name: str, args: Sequence[Any] = (), **options: Any) -> None:
    """Send the task once the current transaction commits (at once outside of one)."""
    transaction.on_commit(partial(send_task, name, args, **options))


def send_robustly_on_commit(
    name: str, args: Sequence[Any] = (), kwargs: Mapping[str, Any] | None = None
) -> None:
    """Send the task once the current transaction commits; a send that fails (the broker down)
    is logged by Django, never raised into the committed work (``robust``). A named function,
    not a ``partial``: Django names the callback in that log line (``__qualname__``), and a
    ``partial`` has none, so its failure raised after all."""

    def send_after_commit() -> None:
        send_task(name, args, kwargs=kwargs)

    send_after_commit.__qualname__ = f"send_task({name})"
    transaction.on_commit(send_after_commit, robust=True)


def dry_run_on_commit(recommendation_id: int) -> None:
    """Ask the scheduler, on the ``actuate`` queue, what a recommendation's change would do."""
    send_on_commit(DRY_RUN, (recommendation_id,))


# A person waits for the answer: one quick retry, not Celery's default publish retries, and no
# subscription to the result (the apply records its outcome itself; subscribing retries the
# Redis result backend 20 times, a second apart, before a refused send could be answered).
APPLY_PUBLISH_RETRY = {
    "max_retries": 1,
    "interval_start": 0,
    "interval_step": 0.2,
    "interval_max": 0.2,
}


def send_apply(recommendation_id: int, apply_key: str) -> None:
    """Send the apply task now, on the ``actuate`` queue (raises when the broker refuses it):
    ``apply_key`` makes a redelivered message a no-op."""
    send_task(
        APPLY,
        (recommendation_id, apply_key),
        retry_policy=APPLY_PUBLISH_RETRY,
        ignore_result=True,
    )


def notify_on_commit(cluster_id: int) -> None:
    """Send a cluster's notifications (Alertmanager, owner notices) after its cycle commits, on
    the default queue: the cycle never waits for them. A send that fails (the broker down) is
    logged, never raised into the committed cycle: the cluster's ``notify_pending_since`` stays
    set and beat sends it again (``diagnosis.actions.notify.alertmanager``)."""
    send_robustly_on_commit(NOTIFY, (cluster_id,))


def autopilot_on_commit(cluster_id: int, cycle_id: int) -> None:
    """Run the autopilot step of a cycle once the cycle commits (docs/autopilot.md), on the
    default queue; a failed send is logged, never raised into the committed cycle (the next
    cycle's step decides afresh)."""
    send_robustly_on_commit(AUTOPILOT, (cluster_id, cycle_id))


def prerender_on_commit(cluster_id: int, snapshot_id: int) -> bool:
    """Render the pages' parts of a cycle's snapshot in a worker once the cycle commits
    (``diagnosis.pages.prerender``), on the default queue, so the first request after the cycle
    reads them from the shared page cache. Only where tasks go to a worker: in the embedded
    mode the cycle's process is not the web's and the page cache is each process's memory, so
    the first request renders them as before. A failed send is logged, never raised into the
    committed cycle (the pages then render on their first request). Whether it is sent."""
    if current_app.conf.task_always_eager or settings.GPUOBS_PAGE_CACHE_SECONDS <= 0:
        return False
    send_robustly_on_commit(PRERENDER_PAGES, (cluster_id, snapshot_id))
    return True


def impact_on_commit(recommendation_id: int) -> None:
    """Estimate a recommendation's pending impact on the ``impact`` queue, apart from the cycle.
    A send that fails (the broker down) is logged, never raised into the cycle: the impact
    stays pending and a later cycle sends it again. In the embedded mode the estimate is
    deferred instead (below)."""

    def send_after_commit() -> None:
        send_impact(recommendation_id)

    send_after_commit.__qualname__ = f"send_impact({recommendation_id})"
    transaction.on_commit(send_after_commit, robust=True)


def reestimate_on_commit(recommendation_id: int) -> None:
    """Estimate a recommendation's impact again, on the cluster's latest snapshot, on the
    ``impact`` queue (at approve and at apply); a failed send is logged: the figures stay those
    of the earlier snapshot, and say so."""
    send_robustly_on_commit(ESTIMATE_IMPACT, (recommendation_id,), {"latest": True})


# -- impact estimates in the embedded mode (docs/operations.md, "Impact estimates") -------------
# An estimate replays a proposal for seconds of CPU (2-4.5 s at 16,384 GPUs, up to
# GPUOBS_IMPACT_MAX_PER_CYCLE of them a cycle). With no worker to take them, running them in the
# process that sent them made a one-shot `snapshot import --diagnose` up to 10x slower than its
# cycle. So where tasks run in-process and GPUOBS_EMBEDDED_IMPACTS is "deferred" (the embedded
# mode's default), an estimate never runs inside the cycle: it waits in this process's list, which
# a long-running embedded process (the demo's loop) works through in its idle time between cycles
# (run_deferred_impacts, bounded by the time left) and the embedded web process in a thread of its
# own (run_impacts_in_background); a one-shot command leaves them pending and says how many
# (deferred_impacts). A pending impact is sent again by a later cycle. A cluster's start-time
# forecast (docs/forecasts.md) is an estimate of the same weight and waits in the same list.

DEFERRED_LIMIT = 64  # estimates kept waiting in one process; beyond them the impact stays pending
_deferred: list[tuple[str, tuple[int, ...]]] = []  # (task name, its arguments)
_lock = threading.Lock()
_wake = threading.Event()
_stopping = threading.Event()
_background: threading.Thread | None = None


def send_impact(recommendation_id: int) -> None:
    """Send (or, in the embedded mode, defer) the estimate of one recommendation's impact."""
    _send_or_defer(ESTIMATE_IMPACT, (recommendation_id,))


def forecast_on_commit(cluster_id: int) -> None:
    """Forecast the starts of a cluster's pending jobs on the ``impact`` queue once the cycle
    commits (deferred like an impact estimate in the embedded mode); a failed send is logged:
    the forecasts stay those of an earlier snapshot, and say so."""

    def send_after_commit() -> None:
        _send_or_defer(ESTIMATE_FORECASTS, (cluster_id,))

    send_after_commit.__qualname__ = f"send_forecast({cluster_id})"
    transaction.on_commit(send_after_commit, robust=True)


def _send_or_defer(name: str, args: tuple[int, ...]) -> None:
    if current_app.conf.task_always_eager and settings.GPUOBS_EMBEDDED_IMPACTS == "deferred":
        with _lock:
            if (name, args) not in _deferred and len(_deferred) < DEFERRED_LIMIT:
                _deferred.append((name, args))
        _wake.set()
        return
    send_task(name, args)


def deferred_impacts() -> int:
    """How many impact estimates wait in this process (the embedded mode)."""
    return len(_deferred)


def run_deferred_impacts(*, until: float | None = None) -> int:
    """Run the estimates waiting in this process, oldest first, until none is left or the
    monotonic clock passes ``until`` (checked before each: one estimate is never cut short).
    An estimate that fails is logged and dropped (its impact stays pending). How many ran."""
    ran = 0
    while until is None or time.monotonic() < until:
        with _lock:
            if not _deferred:
                break
            name, args = _deferred.pop(0)
        try:
            send_task(name, args)  # tasks run in-process here
        except Exception:
            logger.exception("deferred estimate %s%s failed", name, args)
        ran += 1
    return ran


def run_impacts_in_background() -> bool:
    """In the embedded mode's web process (which has no loop of its own), a daemon thread that
    runs each deferred estimate soon after it was sent, outside the request that sent it; its
    database connections are closed after each batch. Elsewhere nothing. Whether one runs."""
    global _background
    if not (current_app.conf.task_always_eager and settings.GPUOBS_EMBEDDED_IMPACTS == "deferred"):
        return False
    with _lock:
        if _background is None:
            _background = threading.Thread(
                target=_work_in_background, name="gpuobs-impacts", daemon=True
            )
            _background.start()
    return True


def stop_impacts_in_background(timeout: float = 30.0) -> None:
    """Stop the thread of :func:`run_impacts_in_background` once its current estimate is done
    (waiting at most ``timeout`` seconds); what is left waits for the next one."""
    global _background
    with _lock:
        thread, _background = _background, None
    if thread is not None:
        _stopping.set()
        _wake.set()
        thread.join(timeout)
        _stopping.clear()


def _work_in_background() -> None:
    while not _stopping.is_set():
        _wake.wait()
        _wake.clear()
        if _stopping.is_set():
            return
        try:
            run_deferred_impacts(until=None)
        finally:
            connections.close_all()
