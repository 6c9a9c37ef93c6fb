"""Celery tasks: thin wrappers over actions (queues and routing: gpuobs/celery.py).

Beat sends ``run_cycles`` every GPUOBS_CYCLE_SECONDS; it fans out one ``run_cycle`` per enabled
cluster. ``run_cycle`` starts at most one beat-sent cycle per cluster and interval (a Redis key set
``NX`` with expiry), and holds the cluster's cycle lock (renewed while it runs) so two beats, two
workers or a redelivered message never run one cluster's cycle twice, at the same time or in
the same interval. A large cluster's collection shards go as a chord: ``run_cycle`` ends after
sending them and hands the lock to the callback, ``run_cycle_after_shards``, which ends the
cycle (no task waits for another). Beat also sends the worker heartbeat and the stuck-apply
sweep every period.
"""

# long module: every Celery task, each a few lines over its action, and run_cycle's lock and chord;
# a task's name is diagnosis.tasks.<name> and its module this one (tests/app/upkeep/test_celery.py).
from __future__ import annotations

import json
import logging
import threading
import uuid
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from enum import StrEnum
from typing import TypeVar

import redis
from celery import chord, current_app, group, shared_task, signature
from celery.exceptions import TimeoutError as CeleryTimeoutError
from celery.result import AsyncResult
from django.conf import settings
from django.db import DatabaseError
from django.db.models import Q
from django.utils import timezone
from redis.exceptions import LockError

from diagnosis.actions.autopilot.step import run_autopilot as autopilot_step
from diagnosis.actions.notify.alertmanager import (
    alertmanager_configured,
    deliver_to_alertmanager,
    send_pending_notifications,
    take_pending_notify,
)
from diagnosis.actions.notify.owner_notices import send_owner_notices
from diagnosis.actions.notify.subscriptions import send_due_report_subscriptions
from diagnosis.actions.oncall.inbound import record_alert_batch as read_alert_batch
from diagnosis.actions.oncall.inbound import record_pending_alert_batches
from diagnosis.actions.records.cycles import (
    PendingCycle,
    finish_cluster_cycle,
    record_cycle_lost,
    record_missed_intervals,
    record_skipped_cycle,
    record_unfinished_shards,
    start_cluster_cycle,
)
from diagnosis.actions.records.forecasts import record_forecasts
from diagnosis.actions.records.inbound import record_cluster_batch as store_cluster_batch
from diagnosis.actions.records.inbound import record_pending_cluster_batches
from diagnosis.actions.upkeep.health import (
    clock_skew_s,
    count_same_interval_skip,
    database_now,
    redis_client,
    skew_refusal,
    write_heartbeat,
)
from diagnosis.actions.upkeep.retention import prune
from diagnosis.actions.workflow.apply import perform_apply, run_dry_run, sweep_stuck_applies
from diagnosis.actions.workflow.base import TransientApplyError
from diagnosis.actions.workflow.impact import (
    estimate_recommendation_impact,
    reestimate_recommendation_impact,
)
from diagnosis.edge.schedulers.registry import is_mirrored
from diagnosis.edge.sources.registry import run_shard
from diagnosis.models import Cluster
from gpuobs.celery import cycle_queue

T = TypeVar("T")

logger = logging.getLogger(__name__)


class CycleOutcome(StrEnum):
    """What ``run_cycle`` did: ran the cycle, or skipped it and why."""

    RAN = "ran"
    LOCKED = "locked"  # another cycle of this cluster holds the lock (a skipped-cycle row)
    # a cycle of this cluster already started this interval (a second beat's send: counted, shown
    # by /healthz?deep=1, no row, since the interval's cycle did run)
    SAME_INTERVAL = "same-interval"
    STALE = "stale"  # its fan-out is more than a cycle period old, database time (a row)
    CLOCK_SKEW = "clock-skew"  # this worker's clock is too far off the database's (a row)
    NO_CLUSTER = "no-cluster"  # no enabled cluster with this id
    # its collection's shards went as a chord: run_cycle_after_shards ends the cycle
    SHARDS_SENT = "shards-sent"


def cycle_lock_key(cluster_id: int) -> str:
    return f"gpuobs:cycle:{cluster_id}"


def cycle_interval_key(cluster: Cluster) -> str:
    """Per cluster row: a cluster deleted and made again under the same id starts afresh."""
    return f"gpuobs:cycle-interval:{cluster.pk}:{cluster.created_at.timestamp():.0f}"


def _redis_client(url: str) -> redis.Redis:
    return redis_client(url)


def interval_gap_ms() -> int:
    """Two beat-sent cycles of one cluster start at least this far apart: three quarters of a
    cycle period. A second beat (or a redelivered fan-out) falls inside it and is skipped, while
    one beat's own sends, a period apart give or take a quarter, always pass."""
    return int(settings.GPUOBS_CYCLE_SECONDS * 750)


def take_cycle_interval(cluster: Cluster) -> bool:
    """Claim this interval's cycle of a cluster (``SET NX`` with expiry, so it needs no release
    and a dead holder's claim lapses by itself); False when another beat's cycle took it."""
    if not settings.REDIS_URL:
        return True  # the embedded mode has one process and one loop: no second beat
    return bool(
        _redis_client(settings.REDIS_URL).set(
            cycle_interval_key(cluster), uuid.uuid4().hex, nx=True, px=interval_gap_ms()
        )
    )


class RenewedLock:
    """A Redis lock renewed by a thread while its holder lives: it lives
    GPUOBS_CYCLE_LOCK_SECONDS (one cycle period) and is renewed every third of that, so a cycle
    as long as it takes keeps it, and a killed worker's lock frees itself within one period."""

    def __init__(self, client: redis.Redis, key: str, ttl_s: float) -> None:
        # thread_local=False: the renewal thread must see the token the holder's thread took
        self.lock = client.lock(key, timeout=ttl_s, blocking=False, thread_local=False)
        self.ttl_s = ttl_s
        self.stop = threading.Event()
        self.thread: threading.Thread | None = None
        self.lost = False
        self.handed_over = False

    def acquire(self) -> bool:
        if not self.lock.acquire():
            return False
        self._start_renewal()
        return True

    def _start_renewal(self) -> None:
        self.thread = threading.Thread(target=self._renew, name="cycle-lock-renewal", daemon=True)
        self.thread.start()

    def hand_over(self, ttl_s: float) -> str:
        """Stop renewing and keep the lock ``ttl_s`` more for another task to take over with
        the token returned (:meth:`take_over`); this holder's release then leaves it held.
        Unless taken over, it lapses by itself after ``ttl_s``."""
        self._stop_renewal()
        self.lock.extend(ttl_s, replace_ttl=True)
        self.handed_over = True
        return self.lock.local.token.decode()

    def take_back(self) -> None:
        """Undo :meth:`hand_over` (nobody will take it over): release releases it again."""
        self.handed_over = False

    def take_over(self, token: str) -> bool:
        """Hold a lock another holder handed over with ``token`` (renewed from now on); False
        when it lapsed meanwhile or someone else holds it."""
        self.lock.local.token = token.encode()
        try:
            self.lock.reacquire()
        except LockError:
            return False
        self._start_renewal()
        return True

    def _renew(self) -> None:
        while not self.stop.wait(self.ttl_s / 3):
            try:
                self.lock.reacquire()
            except (LockError, redis.RedisError) as exc:
                # Redis restarted or unreachable: the lock may be gone; the cycle goes on (its
                # interval key and the database's row locks still keep it single).
                self.lost = True
                logger.warning("cycle lock %s not renewed: %s", self.lock.name, exc)

    def _stop_renewal(self) -> None:
        self.stop.set()
        if self.thread is not None:
            self.thread.join(timeout=5)

    def release(self) -> None:
        self._stop_renewal()
        if self.handed_over:
            return
        try:
            self.lock.release()
        except (LockError, redis.RedisError):
            logger.warning("cycle lock %s was gone at release", self.lock.name)


def redis_cycle_lock(cluster_id: int) -> RenewedLock:
    """The cycle lock of a cluster with ``REDIS_URL`` (not taken yet)."""
    return RenewedLock(
        _redis_client(settings.REDIS_URL),
        cycle_lock_key(cluster_id),
        settings.GPUOBS_CYCLE_LOCK_SECONDS,
    )


@contextmanager
def cluster_cycle_lock(cluster_id: int) -> Iterator[bool]:
    """Try once to take the cycle lock of a cluster; yield whether this caller holds it.

    With ``REDIS_URL`` the lock is a :class:`RenewedLock` (``gpuobs:cycle:<id>``); in the
    embedded mode it is a lease on the cluster's row, which also holds between processes sharing
    the SQLite file and expires after the task time limit and 30 s.
    """
    if settings.REDIS_URL:
        lock = redis_cycle_lock(cluster_id)
        acquired = lock.acquire()
        try:
            yield acquired
        finally:
            if acquired:
                lock.release()
        return

    holder = uuid.uuid4().hex
    now = timezone.now()
    lease_s = settings.CELERY_TASK_TIME_LIMIT + 30
    acquired = (
        Cluster.objects.filter(pk=cluster_id)
        .filter(Q(cycle_lease_until__isnull=True) | Q(cycle_lease_until__lte=now))
        .update(cycle_lease_until=now + timedelta(seconds=lease_s), cycle_lease_holder=holder)
        == 1
    )
    try:
        yield acquired
    finally:
        if acquired:
            Cluster.objects.filter(pk=cluster_id, cycle_lease_holder=holder).update(
                cycle_lease_until=None, cycle_lease_holder=""
            )


def cycles_running(cluster_ids: list[int]) -> frozenset[int]:
    """The clusters whose cycle lock is held now (a cycle of theirs is running): the Redis lock,
    or the embedded mode's lease. Redis away: none known."""
    if not settings.REDIS_URL:
        held = Cluster.objects.filter(pk__in=cluster_ids, cycle_lease_until__gt=timezone.now())
        return frozenset(held.values_list("pk", flat=True))
    try:
        client = _redis_client(settings.REDIS_URL)
        pipe = client.pipeline()
        for cluster_id in cluster_ids:
            pipe.exists(cycle_lock_key(cluster_id))
        found = pipe.execute()
    except redis.RedisError:
        return frozenset()
    return frozenset(c for c, held in zip(cluster_ids, found, strict=True) if held)


@shared_task(name="diagnosis.tasks.run_cycles")
def run_cycles() -> list[int]:
    """Start one cycle per enabled cluster; returns their ids. Each carries the fan-out's
    database time: a cycle still queued a period later is dropped by the worker (by the
    database's clock, not an absolute ``expires`` a skewed worker clock would misread). A
    cluster with no cycle attempt for more than two periods gets a row saying so first, and a
    cycle's notify step that its commit could not send (Redis down) is sent again."""
    clusters = dict(Cluster.objects.filter(enabled=True).values_list("pk", "scheduler_kind"))
    cluster_ids = list(clusters)
    send_pending_notifications()  # a cycle's notify step its commit could not send
    record_missed_intervals(
        cluster_ids, settings.GPUOBS_CYCLE_SECONDS, running=cycles_running(cluster_ids)
    )
    fanned_out_at = database_now().isoformat()
    for cluster_id, scheduler_kind in clusters.items():
        queue = cycle_queue(
            cluster_id,
            mirrored=is_mirrored(scheduler_kind),
            mirror_queue_count=settings.GPUOBS_MIRROR_QUEUES,
        )
        run_cycle.apply_async((cluster_id,), {"fanned_out_at": fanned_out_at}, queue=queue)
    return cluster_ids


@shared_task(name="diagnosis.tasks.run_cycle")
def run_cycle(cluster_id: int, fanned_out_at: str | None = None) -> dict[str, int | str]:
    """Run one cycle of one cluster; says whether it ran or why not. A beat-sent cycle
    (``fanned_out_at`` set) is dropped when stale and runs at most once per interval whatever the
    number of beats; any cycle needs this worker's clock to agree with the database's and the
    cluster's lock. A stale, refused or locked cycle leaves a cycle row saying why; a second
    beat's send in an interval already taken is counted (``/healthz?deep=1``). A cycle whose
    collection fans out ends here with its shards sent (``"shards-sent"``): the chord's callback
    records it (:func:`run_cycle_after_shards`)."""
    cluster = Cluster.objects.filter(pk=cluster_id, enabled=True).first()
    outcome = _cycle_gate(cluster, fanned_out_at)
    if outcome is None:
        outcome = _run_locked_cycle(cluster) if settings.REDIS_URL else _run_embedded_cycle(cluster)
    if outcome not in (CycleOutcome.RAN, CycleOutcome.SHARDS_SENT):
        logger.info("cycle of cluster %s skipped: %s", cluster_id, outcome)
    return {"cluster_id": cluster_id, "outcome": str(outcome)}


def _run_embedded_cycle(cluster: Cluster) -> CycleOutcome:
    """The embedded mode's cycle (no Redis): under the row lease, shards in this process, one
    after another."""
    with cluster_cycle_lock(cluster.pk) as acquired:
        if not acquired:
            return _locked(cluster)
        started = _recorded(cluster, lambda: start_cluster_cycle(cluster))
        if isinstance(started, PendingCycle):
            results = [run_shard(payload) for payload in started.payloads]
            _recorded(
                cluster,
                lambda: finish_cluster_cycle(cluster, started.reading, results, started.started_at),
            )
        return CycleOutcome.RAN


def _run_locked_cycle(cluster: Cluster) -> CycleOutcome:
    """A cycle under the cluster's Redis lock. When its source fans out, its shards go as a
    chord whose callback (``run_cycle_after_shards``) ends the cycle: this task ends, and hands
    the lock over to that callback for at most GPUOBS_SHARD_DEADLINE_SECONDS."""
    lock = redis_cycle_lock(cluster.pk)
    if not lock.acquire():
        return _locked(cluster)
    try:
        record_abandoned_shards(cluster)
        started = _recorded(cluster, lambda: start_cluster_cycle(cluster))
        if not isinstance(started, PendingCycle):
            return CycleOutcome.RAN
        try:
            send_shards(cluster, started, lock)
        except Exception as exc:  # Redis or the broker away: a row says so, the lock goes
            lock.take_back()
            _forget_pending_shards(cluster.pk)
            record_unfinished_shards(cluster, f"sending them failed: {exc!r}")
            raise
        return CycleOutcome.SHARDS_SENT
    finally:
        lock.release()


def _locked(cluster: Cluster) -> CycleOutcome:
    record_skipped_cycle(cluster, "skipped: the previous cycle of this cluster is still running")
    return CycleOutcome.LOCKED


def _recorded(cluster: Cluster, run: Callable[[], T]) -> T:
    try:
        return run()
    except DatabaseError as exc:  # PostgreSQL lost mid-cycle: a row says so
        record_cycle_lost(cluster, exc)
        raise


def _cycle_gate(cluster: Cluster | None, fanned_out_at: str | None) -> CycleOutcome | None:
    """Why this cycle does not run (None: it may take the lock)."""
    if cluster is None:
        return CycleOutcome.NO_CLUSTER
    if fanned_out_at is not None:
        age = (database_now() - datetime.fromisoformat(fanned_out_at)).total_seconds()
        if age > settings.GPUOBS_CYCLE_SECONDS:  # the next fan-out replaces it
            record_skipped_cycle(cluster, stale_reason(age))
            return CycleOutcome.STALE
    refusal = skew_refusal(clock_skew_s())
    if refusal:
        record_skipped_cycle(cluster, refusal, status_message=refusal)
        return CycleOutcome.CLOCK_SKEW
    if fanned_out_at is not None and not take_cycle_interval(cluster):
        count_same_interval_skip(cluster.pk)
        return CycleOutcome.SAME_INTERVAL
    return None


def stale_reason(age_s: float) -> str:
    """Why a beat-sent cycle queued too long was dropped (no worker free, or none running)."""
    return (
        f"skipped: queued {age_s:.0f} s, more than a cycle period "
        f"({settings.GPUOBS_CYCLE_SECONDS} s), before a worker took it; the next cycle runs"
    )


@shared_task(name="diagnosis.tasks.record_worker_heartbeat")
def record_worker_heartbeat() -> str:
    """Beat, every cycle period: a worker that runs this takes tasks (``/healthz?deep=1``)."""
    write_heartbeat("worker")
    return "ok"


@shared_task(name="diagnosis.tasks.ping")
def ping() -> str:
    """Answers "pong": shows that a worker takes tasks and returns results."""
    return "pong"


# -- sharded collection (a metrics source of a large cluster) ------------------------------------

SHARD_WAIT_S = 120.0


@shared_task(bind=True, name="diagnosis.tasks.collect_metrics_shard")
def collect_metrics_shard(self, payload: dict) -> dict:
    """One shard of a cycle's collection (the ``collect`` queue; a node pool's GPU metrics), run
    by the source its payload names (``run_shard``), with the ``worker`` (Celery hostname) that
    read it. A failure (an unknown source, a soft time limit too) comes back as
    ``{"error", "permanent"}``, never as an exception: the chord's callback always runs."""
    try:
        outcome = run_shard(payload)
    except Exception as exc:  # a chord whose part raised would never call its callback
        outcome = {"error": f"collect shard failed: {exc!r}", "permanent": False}
    return {**outcome, "worker": self.request.hostname or "in-process"}


def pending_shards_key(cluster_id: int) -> str:
    """What a cycle whose shards are out needs to end (the scheduler reading, the shard ids):
    one per cluster, as its cycle lock is."""
    return f"gpuobs:cycle-shards:{cluster_id}"


def send_shards(cluster: Cluster, pending: PendingCycle, lock: RenewedLock) -> None:
    """Send a cycle's shards as a chord on the ``collect`` queue whose callback
    (``run_cycle_after_shards``, the ``diagnose`` queue) ends the cycle; the cycle lock is handed
    over to it for GPUOBS_SHARD_DEADLINE_SECONDS. What the callback needs is kept in Redis
    (:func:`pending_shards_key`, written before the shards go), not in the messages: each shard's
    message carries the callback's signature."""
    deadline_s = settings.GPUOBS_SHARD_DEADLINE_SECONDS
    token = lock.hand_over(deadline_s)
    shard_ids = [uuid.uuid4().hex for _ in pending.payloads]
    kept = {
        "token": token,
        "started_at": pending.started_at,
        "sent_at": timezone.now().isoformat(),
        "shard_ids": shard_ids,
        "reading": pending.reading,
    }
    # kept past the deadline (by the longer of it and two periods): the cycle after the
    # deadline finds it and records this one as failed
    keep_s = deadline_s + max(deadline_s, 2 * settings.GPUOBS_CYCLE_SECONDS)
    _redis_client(settings.REDIS_URL).set(
        pending_shards_key(cluster.pk),
        zlib.compress(json.dumps(kept).encode(), 1),
        px=int(keep_s * 1000),
    )
    header = [
        collect_metrics_shard.s(payload).set(task_id=shard_id)
        for payload, shard_id in zip(pending.payloads, shard_ids, strict=True)
    ]
    callback = signature("diagnosis.tasks.run_cycle_after_shards", args=(cluster.pk, token))
    chord(header)(callback)
    logger.info("cycle of cluster %s: %d collect shards sent", cluster.pk, len(shard_ids))


def _take_pending_shards(cluster_id: int, token: str | None = None) -> dict | None:
    """The kept state of the cluster's cycle whose shards are out (deleted: read once); with
    ``token``, only that cycle's (another's stays)."""
    client = _redis_client(settings.REDIS_URL)
    key = pending_shards_key(cluster_id)
    raw = client.get(key)
    if raw is None:
        return None
    kept = json.loads(zlib.decompress(raw))
    if token is not None and kept.get("token") != token:
        return None
    client.delete(key)
    return kept


def _forget_pending_shards(cluster_id: int) -> None:
    try:
        _redis_client(settings.REDIS_URL).delete(pending_shards_key(cluster_id))
    except redis.RedisError:  # it expires by itself
        logger.warning("kept collection of cluster %s not deleted", cluster_id, exc_info=True)


def record_abandoned_shards(cluster: Cluster) -> None:
    """A previous cycle whose shards were still out when its lock lapsed (the deadline): a
    failed cycle row saying so, its shards revoked and their results deleted."""
    kept = _take_pending_shards(cluster.pk)
    if kept is None:
        return
    shard_ids = kept["shard_ids"]
    results = [AsyncResult(shard_id) for shard_id in shard_ids]
    done = sum(1 for result in results if result.ready())
    current_app.control.revoke(shard_ids)
    _forget_shards(shard_ids)
    detail = (
        f"{done} of {len(shard_ids)} shards sent at {kept['sent_at']} were back after "
        f"{settings.GPUOBS_SHARD_DEADLINE_SECONDS} s (no free worker on the collect queue, "
        "or a shard's worker died)"
    )
    logger.warning("cycle of cluster %s: %s", cluster.pk, detail)
    record_unfinished_shards(cluster, detail)


@shared_task(name="diagnosis.tasks.run_cycle_after_shards", ignore_result=True)
def run_cycle_after_shards(results: list, cluster_id: int, token: str) -> dict[str, int | str]:
    """The chord callback of a cycle's shards (``results``, in the order of their payloads):
    takes the cycle lock over (``token``), deletes the shards' results from Redis and ends the
    cycle (:func:`finish_cluster_cycle`). Shards back after the deadline find the lock lapsed:
    the next cycle records theirs as a failed cycle, and they are dropped."""
    lock = redis_cycle_lock(cluster_id)
    if not lock.take_over(token):
        logger.warning("collect shards of cluster %s back after the deadline: dropped", cluster_id)
        return {"cluster_id": cluster_id, "outcome": "late"}
    try:
        kept = _take_pending_shards(cluster_id, token)
        if kept is not None:
            _forget_shards(kept["shard_ids"])  # a shard's result (0.8-1.9 MB at 16k GPUs)
        cluster = Cluster.objects.filter(pk=cluster_id).first()
        if cluster is None:
            return {"cluster_id": cluster_id, "outcome": str(CycleOutcome.NO_CLUSTER)}
        if kept is None:  # Redis lost it (a restart): the cycle cannot end, and says so
            record_unfinished_shards(cluster, "the cycle's kept collection was gone from Redis")
            return {"cluster_id": cluster_id, "outcome": "lost"}
        outcomes = [_shard_outcome(result) for result in results]
        _recorded(
            cluster,
            lambda: finish_cluster_cycle(cluster, kept["reading"], outcomes, kept["started_at"]),
        )
    finally:
        lock.release()
    return {"cluster_id": cluster_id, "outcome": str(CycleOutcome.RAN)}


def _shard_outcome(result: object) -> dict:
    if isinstance(result, dict):
        return result
    return {"error": f"collect shard failed: {result!r}", "permanent": False}


def _forget_shards(shard_ids: list[str]) -> None:
    """Delete shards' results from the result backend (a late shard's, written after this,
    expires after CELERY_RESULT_EXPIRES)."""
    try:
        for shard_id in shard_ids:
            AsyncResult(shard_id).forget()
    except Exception:  # Redis away: the keys expire by themselves
        logger.warning("collect shard results not deleted", exc_info=True)


def run_collect_shards(payloads: list[dict]) -> list[dict]:
    """Run a collection's shards as a Celery group and wait for them, for a caller that is not
    a task (``manage.py collect`` and ``demo``; a cycle task sends a chord, never waits). In the
    embedded mode the group runs in-process, one shard after another. Shards not finished within
    ``SHARD_WAIT_S`` (no free worker on the ``collect`` queue) are revoked and run here instead."""

    result = group(collect_metrics_shard.s(payload) for payload in payloads).apply_async()
    wait = min(SHARD_WAIT_S, settings.CELERY_TASK_SOFT_TIME_LIMIT / 2)
    try:
        outcomes = result.get(timeout=wait, propagate=False)
    except CeleryTimeoutError:
        outcomes = [r.result if r.ready() else None for r in result.results]
        result.revoke()
        logger.warning("collect shards unfinished after %.0f s: running them here", wait)
    finally:
        _forget(result)  # a shard's result (0.8-1.9 MB at 16k GPUs) lives no longer than its cycle
    merged = []
    for payload, outcome in zip(payloads, outcomes, strict=True):
        if outcome is None:
            outcome = run_shard(payload)
        elif isinstance(outcome, BaseException):
            outcome = {"error": f"collect shard failed: {outcome!r}", "permanent": False}
        merged.append(outcome)
    workers = sorted({str(outcome.get("worker", "the cycle's worker")) for outcome in merged})
    logger.info("%d collect shards read by %s", len(merged), ", ".join(workers))
    return merged


def _forget(result: object) -> None:
    """Delete a group's results from the result backend (a late shard's result, written after
    this, expires after CELERY_RESULT_EXPIRES)."""
    try:
        result.forget()  # type: ignore[attr-defined]
    except Exception:  # Redis away: the keys expire by themselves
        logger.warning("collect shard results not deleted", exc_info=True)


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


@shared_task(name="diagnosis.tasks.sweep_stuck_applies")
def sweep_applies() -> list[int]:
    """Beat, every cycle period: re-drive applies stuck in ``applying`` (a killed worker, a
    message lost with Redis) through the re-read / dry-run path; returns their ids."""
    return sweep_stuck_applies()


@shared_task(name="diagnosis.tasks.record_alert_batch")
def record_alert_batch(batch_id: int) -> dict:
    """Read one stored Alertmanager batch into incidents (the receiver sends this after it
    stores the batch; ``diagnosis.actions.oncall.inbound``)."""
    return read_alert_batch(batch_id)


@shared_task(name="diagnosis.tasks.sweep_alert_batches")
def sweep_alert_batches() -> list[int]:
    """Beat, every cycle period: read the stored alert batches no task took (a send lost with
    Redis, a killed worker); returns their ids."""
    return record_pending_alert_batches()


@shared_task(name="diagnosis.tasks.record_cluster_batch")
def record_cluster_batch(batch_id: int) -> dict:
    """Store one received batch of scheduler events or a node's topology (the receiver sends
    this after it stores the batch; ``diagnosis.actions.records.inbound``)."""
    return store_cluster_batch(batch_id)


@shared_task(name="diagnosis.tasks.sweep_cluster_batches")
def sweep_cluster_batches() -> list[int]:
    """Beat, every cycle period: store the received event and topology batches no task took
    (a send lost with Redis, a killed worker); returns their ids."""
    return record_pending_cluster_batches()


@shared_task(name="diagnosis.tasks.actuate_dry_run")
def actuate_dry_run(recommendation_id: int) -> dict[str, str]:
    """Ask the scheduler what a recommendation's change would do, writing nothing (the diff a
    recommendation's page shows)."""

    return {"recommendation": str(recommendation_id), **run_dry_run(recommendation_id)}


@shared_task(name="diagnosis.tasks.send_report_subscriptions")
def send_report_subscriptions() -> int:
    """Beat, hourly: email the fairness reports whose weekly or monthly turn has come."""
    return send_due_report_subscriptions()


@shared_task(name="diagnosis.tasks.run_autopilot")
def run_autopilot(cluster_id: int, cycle_id: int) -> dict[str, object]:
    """The autopilot step of one cycle, after it commits (docs/autopilot.md)."""
    return autopilot_step(cluster_id, cycle_id)


@shared_task(name="diagnosis.tasks.notify_cluster")
def notify_cluster(cluster_id: int) -> dict[str, str]:
    """The notify step of one cluster after its cycle (docs/architecture.md#one-cycle, step 5): its
    alerts to Alertmanager when GPUOBS_ALERTMANAGER_URL is set, its owner notices when its
    policy is on. Failures are recorded, never raised (the next cycle sends again)."""
    take_pending_notify(cluster_id)
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
def estimate_impact(recommendation_id: int, latest: bool = False) -> dict:
    """The impact estimate of one recommendation, on the ``impact`` queue: the cycle stores it
    pending and sends this after it commits; ``latest``: again on the cluster's latest snapshot
    (at approve and apply) (``diagnosis.actions.workflow.impact``)."""
    if latest:
        return reestimate_recommendation_impact(recommendation_id)
    return estimate_recommendation_impact(recommendation_id)


@shared_task(name="diagnosis.tasks.estimate_forecasts")
def estimate_forecasts(cluster_id: int) -> dict:
    """The start-time forecasts of one cluster's pending jobs, on the ``impact`` queue: the cycle
    sends this after it commits (``diagnosis.actions.records.forecasts``)."""
    return record_forecasts(cluster_id)


@shared_task(name="diagnosis.tasks.prerender_pages", soft_time_limit=60, time_limit=90)
def prerender_pages(cluster_id: int, snapshot_id: int) -> dict:
    """The pages' parts of a cycle's snapshot rendered into the shared page cache, on the default
    queue: the cycle sends this after it commits (``diagnosis.pages.prerender``)."""
    # the pages and their chart library when a worker takes this, not at every start-up (#35)
    from diagnosis.pages.prerender import prerender_pages as render  # noqa: PLC0415

    return render(cluster_id, snapshot_id)


@shared_task(name="diagnosis.tasks.prune_retention")
def prune_retention() -> dict:
    """Beat, every GPUOBS_RETENTION_SECONDS: delete and downsample what retention no longer
    keeps, in short batches (``diagnosis.actions.upkeep.retention``)."""
    return prune()
