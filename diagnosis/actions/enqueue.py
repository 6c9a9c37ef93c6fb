"""Work that actions start, sent by task name once the surrounding transaction commits.

The actions never import :mod:`diagnosis.tasks` (the tasks import the actions): this module
names each task as a string and imports nothing of the project, so the import graph has no
cycle, lazy imports included. Queues follow from the names (``gpuobs/celery.py``). In the
embedded mode (``task_always_eager``, no broker) a task runs in the sending process, as
Celery's own ``delay`` does there.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from functools import partial
from typing import Any

from celery import current_app
from django.db import transaction

DRY_RUN = "diagnosis.tasks.actuate_dry_run"
APPLY = "diagnosis.tasks.actuate_recommendation"
NOTIFY = "diagnosis.tasks.notify_cluster"
ESTIMATE_IMPACT = "diagnosis.tasks.estimate_impact"
RECORD_ALERT_BATCH = "diagnosis.tasks.record_alert_batch"

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


def impact_on_commit(recommendation_id: int) -> None:
    """Estimate a recommendation's pending impact on the ``impact`` queue, apart from the cycle.
    A send that fails (the broker down) is logged, never raised into the cycle: the impact
    stays pending and a later cycle sends it again."""
    send_robustly_on_commit(ESTIMATE_IMPACT, (recommendation_id,))


def reestimate_on_commit(recommendation_id: int) -> None:
    """Estimate a recommendation's impact again, on the cluster's latest snapshot, on the
    ``impact`` queue (at approve and at apply); a failed send is logged: the figures stay those
    of the earlier snapshot, and say so."""
    send_robustly_on_commit(ESTIMATE_IMPACT, (recommendation_id,), {"latest": True})
