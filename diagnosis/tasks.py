"""Celery tasks: thin wrappers over actions (queues and routing: gpuobs/celery.py).

Beat sends ``run_cycles`` every GPUOBS_CYCLE_SECONDS; it fans out one ``run_cycle`` per enabled
cluster. ``run_cycle`` holds the cluster's cycle lock while it runs, so two beats, two workers or a
redelivered message never run one cluster's cycle twice at the same time.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from enum import StrEnum
from functools import lru_cache

import redis
from celery import group, shared_task
from celery.exceptions import TimeoutError as CeleryTimeoutError
from django.conf import settings
from django.db.models import Q
from django.utils import timezone
from redis.exceptions import LockError

from diagnosis.actions.apply import perform_apply, run_dry_run
from diagnosis.actions.cycles import run_cluster_cycle
from diagnosis.actions.impact import estimate_recommendation_impact
from diagnosis.actions.notifications import alertmanager_configured, deliver_to_alertmanager
from diagnosis.actions.owner_notices import send_owner_notices
from diagnosis.actions.subscriptions import send_due_report_subscriptions
from diagnosis.actions.workflow import TransientApplyError
from diagnosis.edge.sources.prometheus import collect_shard
from diagnosis.models import Cluster

logger = logging.getLogger(__name__)


class CycleOutcome(StrEnum):
    """What ``run_cycle`` did: ran the cycle, or skipped it and why."""

    RAN = "ran"
    LOCKED = "locked"  # another cycle of this cluster holds the lock
    NO_CLUSTER = "no-cluster"  # no enabled cluster with this id


def cycle_lock_key(cluster_id: int) -> str:
    return f"gpuobs:cycle:{cluster_id}"


@lru_cache(maxsize=4)
def _redis_client(url: str) -> redis.Redis:
    return redis.Redis.from_url(url)


@contextmanager
def cluster_cycle_lock(cluster_id: int) -> Iterator[bool]:
    """Try once to take the cycle lock of a cluster; yield whether this caller holds it.

    With ``REDIS_URL`` the lock is a Redis lock (``gpuobs:cycle:<id>``); in the embedded mode it
    is a lease on the cluster's row, which also holds between processes sharing the SQLite file.
    Either expires after GPUOBS_CYCLE_LOCK_SECONDS, longer than a cycle may run, so the lock of a
    killed worker frees itself.
    """
    ttl_seconds = settings.GPUOBS_CYCLE_LOCK_SECONDS
    if settings.REDIS_URL:
        lock = _redis_client(settings.REDIS_URL).lock(
            cycle_lock_key(cluster_id), timeout=ttl_seconds, blocking=False
        )
        acquired = lock.acquire()
        try:
            yield acquired
        finally:
            if acquired:
                try:
                    lock.release()
                except LockError:
                    logger.warning("cycle lock of cluster %s expired before release", cluster_id)
        return

    holder = uuid.uuid4().hex
    now = timezone.now()
    acquired = (
        Cluster.objects.filter(pk=cluster_id)
        .filter(Q(cycle_lease_until__isnull=True) | Q(cycle_lease_until__lte=now))
        .update(cycle_lease_until=now + timedelta(seconds=ttl_seconds), cycle_lease_holder=holder)
        == 1
    )
    try:
        yield acquired
    finally:
        if acquired:
            Cluster.objects.filter(pk=cluster_id, cycle_lease_holder=holder).update(
                cycle_lease_until=None, cycle_lease_holder=""
            )


@shared_task(name="diagnosis.tasks.run_cycles")
def run_cycles() -> list[int]:
    """Start one cycle per enabled cluster; returns their ids."""
    cluster_ids = list(Cluster.objects.filter(enabled=True).values_list("pk", flat=True))
    for cluster_id in cluster_ids:
        # A cycle still queued when the next fan-out comes is stale: drop it.
        run_cycle.apply_async((cluster_id,), expires=settings.GPUOBS_CYCLE_SECONDS)
    return cluster_ids


@shared_task(name="diagnosis.tasks.run_cycle")
def run_cycle(cluster_id: int) -> dict[str, int | str]:
    """Run one cycle of one cluster unless another is running; says which happened."""
    cluster = Cluster.objects.filter(pk=cluster_id, enabled=True).first()
    if cluster is None:
        outcome = CycleOutcome.NO_CLUSTER
    else:
        with cluster_cycle_lock(cluster_id) as acquired:
            if acquired:
                run_cluster_cycle(cluster, shard_runner=run_collect_shards)
                outcome = CycleOutcome.RAN
            else:
                outcome = CycleOutcome.LOCKED
    if outcome is not CycleOutcome.RAN:
        logger.info("cycle of cluster %s skipped: %s", cluster_id, outcome)
    return {"cluster_id": cluster_id, "outcome": str(outcome)}


@shared_task(name="diagnosis.tasks.ping")
def ping() -> str:
    """Answers "pong": shows that a worker takes tasks and returns results."""
    return "pong"


# -- sharded collection (the Prometheus source of a large cluster) -------------------------------

SHARD_WAIT_S = 120.0


@shared_task(name="diagnosis.tasks.collect_metrics_shard")
def collect_metrics_shard(payload: dict) -> dict:
    """One node pool's GPU metrics for a cycle's collection (the ``collect`` queue). A source
    failure comes back as ``{"error", "permanent"}``, never as an exception."""

    return collect_shard(payload)


def run_collect_shards(payloads: list[dict]) -> list[dict]:
    """Run a collection's shards as a Celery group and wait for them (in the embedded mode the
    group runs in-process, one shard after another). Shards not finished within
    ``SHARD_WAIT_S`` (no free worker on the ``collect`` queue) are revoked and run here instead,
    so a busy pool slows a cycle down but never deadlocks it."""

    result = group(collect_metrics_shard.s(payload) for payload in payloads).apply_async()
    wait = min(SHARD_WAIT_S, settings.CELERY_TASK_SOFT_TIME_LIMIT / 2)
    try:
        outcomes = result.get(timeout=wait, propagate=False, disable_sync_subtasks=False)
    except CeleryTimeoutError:
        outcomes = [r.result if r.ready() else None for r in result.results]
        result.revoke()
        logger.warning("collect shards unfinished after %.0f s: running them in the cycle", wait)
    merged = []
    for payload, outcome in zip(payloads, outcomes, strict=True):
        if outcome is None:
            outcome = collect_shard(payload)
        elif isinstance(outcome, BaseException):
            outcome = {"error": f"collect shard failed: {outcome!r}", "permanent": False}
        merged.append(outcome)
    return merged


# -- the recommendation workflow (the ``actuate`` queue; diagnosis/workflow.py) ------------------

APPLY_RETRIES = 3
APPLY_RETRY_BACKOFF_S = 30


@shared_task(bind=True, name="diagnosis.tasks.actuate_recommendation", max_retries=APPLY_RETRIES)
def actuate_recommendation(self, recommendation_id: int, key: str) -> dict[str, str]:
    """Apply an approved recommendation once: ``key`` is the idempotency key that
    ``request_apply`` stored, so a redelivered message applies nothing. A scheduler
    that cannot be reached is retried (with backoff) before the recommendation fails."""

    final = self.request.retries >= self.max_retries
    try:
        outcome = perform_apply(recommendation_id, key, final_attempt=final)
    except TransientApplyError as exc:
        countdown = APPLY_RETRY_BACKOFF_S * 2**self.request.retries
        raise self.retry(exc=exc, countdown=countdown) from exc
    logger.info("apply of recommendation %s: %s", recommendation_id, outcome.outcome)
    return {"recommendation": str(recommendation_id), "outcome": outcome.outcome}


@shared_task(name="diagnosis.tasks.actuate_dry_run")
def actuate_dry_run(recommendation_id: int) -> dict[str, str]:
    """Ask the scheduler what a recommendation's change would do, writing nothing (the diff a
    recommendation's page shows)."""

    return {"recommendation": str(recommendation_id), **run_dry_run(recommendation_id)}


@shared_task(name="diagnosis.tasks.send_report_subscriptions")
def send_report_subscriptions() -> int:
    """Beat, hourly: email the fairness reports whose weekly or monthly turn has come."""
    return send_due_report_subscriptions()


@shared_task(name="diagnosis.tasks.notify_cluster")
def notify_cluster(cluster_id: int) -> dict[str, str]:
    """The notify step of one cluster after its cycle (DESIGN.md section 3, step 5): its
    alerts to Alertmanager when GPUOBS_ALERTMANAGER_URL is set, its owner notices when its
    policy is on. Failures are recorded, never raised (the next cycle sends again)."""
    cluster = Cluster.objects.filter(pk=cluster_id).first()
    if cluster is None:
        return {"cluster_id": str(cluster_id), "outcome": "no-cluster"}
    outcome = {"cluster_id": str(cluster_id)}
    if alertmanager_configured():
        outcome["alertmanager"] = deliver_to_alertmanager(cluster).last_error or "ok"
    sent = send_owner_notices(cluster)
    if sent is not None:
        outcome["owner_notices"] = str(sent)
    return outcome


@shared_task(name="diagnosis.tasks.estimate_impact")
def estimate_impact(recommendation_id: int) -> dict:
    """The impact estimate of one recommendation, on the ``impact`` queue: the cycle stores it
    pending and sends this after it commits (``diagnosis.actions.impact``)."""
    return estimate_recommendation_impact(recommendation_id)
