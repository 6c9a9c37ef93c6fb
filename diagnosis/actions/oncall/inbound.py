"""Alertmanager's webhook, received cheaply and read into incidents apart from the request
(docs/operations.md, "Inbound webhooks").

The receiver validates the body (pure parsing, no query per alert), stores one
:class:`~diagnosis.models.InboundAlertBatch` holding the GPU alerts it may store, answers 202,
and sends ``diagnosis.tasks.record_alert_batch`` once the row commits. The task finds the jobs
each fault hit and opens, updates or resolves incidents; a batch is claimed before it is read, so
two deliveries of the task read it once, and every incident is keyed by the alert's fingerprint,
so reading one alert twice (a worker killed mid-batch) still makes one incident. A batch whose
task was never sent (Redis away at commit) or never finished is read by the sweep beat sends
every period (:func:`record_pending_alert_batches`). In the embedded mode the task runs in the
sending process, right after the commit."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import (
    DatabaseError,
    InterfaceError,
    OperationalError,
    connection,
    transaction,
)
from django.db.models import QuerySet
from django.utils import timezone

from diagnosis.actions.enqueue import RECORD_ALERT_BATCH, send_robustly_on_commit, send_task
from diagnosis.actions.oncall.alerts import (
    open_or_update_incident_from_alert,
    resolve_incident_from_alert,
)
from diagnosis.actions.records.inbound import SWEEP_AFTER_S, claim_batch
from diagnosis.edge.sources import alertmanager
from diagnosis.models import Cluster, InboundAlertBatch, InboundState

logger = logging.getLogger(__name__)

# what a task has read is saved this often; a batch stopped this many times is failed
SAVE_EVERY = 10
MAX_ATTEMPTS = 5


def alert_rules() -> alertmanager.AlertRules:
    return alertmanager.AlertRules.of(
        settings.GPUOBS_ALERTMANAGER_XID_ALERTS,
        settings.GPUOBS_ALERTMANAGER_HEALTH_ALERTS,
        settings.GPUOBS_ALERTMANAGER_CLUSTER_LABEL,
    )


@dataclass(frozen=True)
class ReceivedBatch:
    """What the receiver answers: the stored batch (None when nothing needed storing) and, per
    alert in the order received, ``queued`` or what was decided at once (``ignored``,
    ``rejected`` with its errors)."""

    batch: InboundAlertBatch | None
    alerts: list[dict[str, Any]]


def receive_alert_batch(
    sender: Any,
    message: alertmanager.WebhookMessage,
    *,
    clusters: QuerySet[Cluster],
    cluster_name: str = "",
) -> ReceivedBatch:
    """Store a parsed webhook's GPU alerts in one row and send the task that reads them: a
    bounded cost whatever the cluster's size or the batch's alerts. ``sender``: the posting
    user; ``clusters``: those its credential may write alerts to (``clusters_for_sender``), the
    only ones the task writes to."""

    rules = alert_rules()
    results: list[dict[str, Any]] = []
    queued: list[dict[str, Any]] = []
    for alert in message.alerts:
        result: dict[str, Any] = {
            "fingerprint": alertmanager.shown(alert.fingerprint),
            "alertname": alertmanager.shown(alert.name, 200),
        }
        results.append(result)
        gpu_alert = alertmanager.classify(alert, rules)
        problems = alertmanager.alert_problems(alert, gpu_alert)
        if problems:
            result.update(outcome="rejected", errors=problems)
        elif gpu_alert is None:
            result["outcome"] = "ignored"
        else:
            result.update(outcome="queued", item=len(queued))
            queued.append(alert.as_webhook())
    if not queued:
        return ReceivedBatch(None, results)
    with transaction.atomic():
        batch = InboundAlertBatch.objects.create(
            sender=sender,
            sender_clusters=sorted(clusters.values_list("pk", flat=True)),
            cluster_name=cluster_name[:253],
            payload={
                "version": alertmanager.WEBHOOK_VERSION,
                "status": message.status,
                "receiver": "",
                "groupKey": "",
                "alerts": queued,
            },
            alerts=len(queued),
            results=results,
        )
        # a broker that refuses the send leaves the batch pending for the sweep
        send_robustly_on_commit(RECORD_ALERT_BATCH, (batch.pk,))
    return ReceivedBatch(batch, results)


def record_alert_batch(batch_id: int, *, budget_s: float | None = None) -> dict[str, Any]:
    """Read one stored batch into incidents (the task's body); says what it did. Each alert has
    its own transaction: one that cannot be stored is recorded as ``rejected`` and the batch goes
    on. A task reads for at most ``budget_s`` (half the soft time limit): what is left is saved
    and sent to the next task (``continued``), which goes on where this one stopped, so no time
    limit cuts a batch mid-query. What is read is saved every :data:`SAVE_EVERY` alerts too: a
    task that dies (an error, a lost database) leaves the rest pending for the next task or the
    sweep; after :data:`MAX_ATTEMPTS` such stops the batch is ``failed`` with the error.
    Idempotent: a batch already read, or held by a live task, is left alone."""

    if not claim_batch(InboundAlertBatch, batch_id):
        return {"batch": batch_id, "outcome": "taken"}
    if budget_s is None:
        budget_s = settings.CELERY_TASK_SOFT_TIME_LIMIT / 2
    batch = InboundAlertBatch.objects.select_related("sender").get(pk=batch_id)
    results = [dict(r) for r in batch.results]
    try:
        finished = _record_alerts(batch, results, deadline=time.monotonic() + budget_s)
    except Exception as exc:  # saved, released, never a silent stall
        gave_up = batch.attempts >= MAX_ATTEMPTS
        stopped = {
            "state": InboundState.FAILED if gave_up else InboundState.PENDING,
            "claimed_at": None,
            "processed_at": timezone.now() if gave_up else None,
            "results": results,
            "error": f"{type(exc).__name__}: {exc}"[:2000],
        }
        try:
            InboundAlertBatch.objects.filter(pk=batch_id).update(**stopped)
        except DatabaseError:  # the connection broke under it: once more on a new one
            connection.close()
            InboundAlertBatch.objects.filter(pk=batch_id).update(**stopped)
        if not gave_up:
            _send_record_task(batch_id)
        raise
    if not finished:
        InboundAlertBatch.objects.filter(pk=batch_id).update(
            claimed_at=None, attempts=0, results=results
        )
        _send_record_task(batch_id)
        return {"batch": batch_id, "outcome": "continued"}
    InboundAlertBatch.objects.filter(pk=batch_id).update(
        state=InboundState.DONE, processed_at=timezone.now(), results=results
    )
    return {"batch": batch_id, "outcome": "recorded", "alerts": batch.alerts}


def _send_record_task(batch_id: int) -> None:
    try:
        send_task(RECORD_ALERT_BATCH, (batch_id,))
    except Exception:  # the broker away: the sweep reads it later
        logger.warning("alert batch %s not read now: the sweep reads it", batch_id, exc_info=True)


def _record_alerts(
    batch: InboundAlertBatch, results: list[dict[str, Any]], *, deadline: float
) -> bool:
    """Read the alerts of ``batch`` still ``queued`` in ``results``, updating ``results``, until
    ``deadline`` (``time.monotonic()``); whether every alert was read."""
    message = alertmanager.parse_webhook(batch.payload)
    rules = alert_rules()
    clusters = Cluster.objects.filter(pk__in=batch.sender_clusters or [])
    by_name: dict[str, Any] = {}
    done = 0
    for result in results:
        if result.get("outcome") != "queued":
            continue
        if time.monotonic() > deadline:
            return False
        alert = message.alerts[result["item"]]
        gpu_alert = alertmanager.classify(alert, rules)
        name = batch.cluster_name or (gpu_alert.cluster if gpu_alert else None) or ""
        if name not in by_name:
            by_name[name] = clusters.filter(name=name).first() if name else None
        cluster = by_name[name]
        if gpu_alert is None or cluster is None:
            result.update(outcome="unknown-cluster", cluster=name or None)
        else:
            _record_one(cluster, alert, gpu_alert, result)
        done += 1
        if done % SAVE_EVERY == 0:
            InboundAlertBatch.objects.filter(pk=batch.pk).update(results=results)
    return True


def _record_one(cluster: Any, alert: Any, gpu_alert: Any, result: dict[str, Any]) -> None:
    record = (
        open_or_update_incident_from_alert
        if alert.status == "firing"
        else resolve_incident_from_alert
    )
    try:
        outcome = record(cluster, alert, gpu_alert, snapshot_document=None)
    except (OperationalError, InterfaceError):  # the connection, not the alert: stop here
        raise
    except DatabaseError:  # its own transaction rolled back; the batch goes on
        logger.exception("alert %s could not be stored", result["fingerprint"])
        result.update(outcome="rejected", errors=["could not be stored"])
        return
    result.update(outcome=outcome.outcome, incident=outcome.incident.pk, cluster=cluster.name)


def record_pending_alert_batches(limit: int = 50) -> list[int]:
    """The sweep (beat, every period): read the batches no task has taken for a while (a send
    lost with Redis, a task stopped mid-batch), oldest first, for at most half a task's soft time
    limit; returns the ids of those it finished. A batch that fails again is left as its
    attempt recorded it (pending, or failed after :data:`MAX_ATTEMPTS`)."""
    began = time.monotonic()
    before = timezone.now() - timedelta(seconds=SWEEP_AFTER_S)
    ids = list(
        InboundAlertBatch.objects.filter(state=InboundState.PENDING, received_at__lt=before)
        .order_by("received_at")
        .values_list("pk", flat=True)[:limit]
    )
    budget_s = settings.CELERY_TASK_SOFT_TIME_LIMIT / 2
    finished = []
    for pk in ids:
        left_s = budget_s - (time.monotonic() - began)
        if left_s <= 0:
            break
        try:
            if record_alert_batch(pk, budget_s=left_s)["outcome"] == "recorded":
                finished.append(pk)
        except Exception:  # recorded on the batch by record_alert_batch
            logger.exception("alert batch %s not read", pk)
            break
    return finished
