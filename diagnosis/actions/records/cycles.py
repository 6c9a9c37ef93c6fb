"""Run and record a cluster's diagnosis cycle: collect, diagnose, account, recommend; the
cluster's data-source status and the coverage guard (docs/architecture.md#one-cycle).
"""

from __future__ import annotations

import gc
import logging
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import DatabaseError, connection, transaction
from django.db.models import OuterRef, Subquery
from django.utils import timezone

from diagnosis.actions.autopilot.policies import autopilot_after_cycle
from diagnosis.actions.enqueue import prerender_on_commit
from diagnosis.actions.notify.alertmanager import notify_after_cycle
from diagnosis.actions.oncall.incidents import record_cycle_incidents
from diagnosis.actions.records.cluster_size import size_of, size_refusal
from diagnosis.actions.records.events import SchedulerEventError, record_scheduler_events
from diagnosis.actions.records.findings import cluster_overrides, record_findings
from diagnosis.actions.records.forecasts import forecast_after_cycle
from diagnosis.actions.records.rollups_hourly import add_cycle_to_hours, record_accounting_slice
from diagnosis.actions.records.tenancy import record_tenancy, sync_cycle_tenants
from diagnosis.actions.records.topology import merge_stored_topology
from diagnosis.actions.upkeep.health import database_now
from diagnosis.actions.workflow.proposals import record_recommendations
from diagnosis.choices import DataSourceStatus
from diagnosis.core import snapshot as snapshot_format
from diagnosis.core.cost import gpu_models
from diagnosis.core.diagnose import diagnose
from diagnosis.core.rules.engine import Diagnosis
from diagnosis.core.rules.registry import all_rules
from diagnosis.edge.collection import (
    PendingCollection,
    collect_snapshot,
    resume_collection,
    start_collection,
)
from diagnosis.edge.errors import (
    SCHEDULER,
    SOURCE,
    CollectError,
    ConfigError,
    IntegrationError,
    SchedulerError,
)
from diagnosis.edge.sanitize import clean_document, storable_snapshot
from diagnosis.edge.schedulers.base import EventBatch
from diagnosis.models import (
    Cluster,
    ClusterCycle,
    Snapshot,
)

logger = logging.getLogger(__name__)

ShardRunner = Callable[[list[dict[str, Any]]], list[dict[str, Any]]]


def run_cluster_cycle(cluster: Cluster, *, shard_runner: ShardRunner | None = None) -> ClusterCycle:
    """Run one diagnosis cycle of a cluster (docs/architecture.md#one-cycle): collect, then record.

    The cluster's settings are checked first against what its adapter and source declare
    (:meth:`Cluster.check_settings`). ``shard_runner`` runs the shards of a source that can fan
    out (the registry's ``shard``; a Celery group a command waits for:
    ``diagnosis.tasks.run_collect_shards``); without one, shards are collected here, one after
    another. A scheduled cycle (``diagnosis.tasks.run_cycle``, holding the cluster's cycle lock)
    runs :func:`start_cluster_cycle` instead, which never waits for shards. Bad settings or a source
    that fails leave a failed ClusterCycle row and the cluster's status saying why; the last
    good snapshot, findings and rollups stay as they were (nothing is resolved for lack of data).
    So does any other exception while loading or recording: a cycle always ends in a row.
    """

    return _run_cycle(
        cluster,
        lambda previous_as_of: collect_snapshot(
            cluster, previous_as_of=previous_as_of, shard_runner=shard_runner
        ),
    )


def start_cluster_cycle(cluster: Cluster) -> ClusterCycle | PendingCycle:
    """:func:`run_cluster_cycle` that never waits for shards: the recorded cycle, or, when the
    cluster's source fans out, the :class:`PendingCycle` whose shards the caller sends
    (``diagnosis.tasks.run_cycle``: a Celery chord) and :func:`finish_cluster_cycle` ends."""
    started_at = time.time()
    pending: list[PendingCollection] = []

    def collect(previous_as_of: datetime | None) -> dict[str, Any] | None:
        started = start_collection(cluster, previous_as_of=previous_as_of)
        if isinstance(started, PendingCollection):
            pending.append(started)
            return None
        return started

    cycle = _run_cycle(cluster, collect)
    if cycle is None:
        return PendingCycle(pending[0].payloads, pending[0].reading, started_at)
    return cycle


@dataclass(frozen=True)
class PendingCycle:
    """A cycle waiting for its collection's shards: their ``payloads``, the scheduler
    ``reading`` they finish (JSON-ready) and when the cycle started (Unix seconds)."""

    payloads: list[dict[str, Any]]
    reading: dict[str, Any]
    started_at: float


def finish_cluster_cycle(
    cluster: Cluster, reading: Mapping[str, Any], results: list[dict[str, Any]], started_at: float
) -> ClusterCycle:
    """The end of a :class:`PendingCycle`: its collection finished with the shards' ``results``
    (a failed shard: a failed cycle row), then recorded as :func:`run_cluster_cycle` does."""
    already = max(0.0, time.time() - started_at)
    return _run_cycle(
        cluster, lambda _previous: resume_collection(reading, results), already_s=already
    )


def record_unfinished_shards(cluster: Cluster, detail: str) -> ClusterCycle:
    """A cycle whose shards did not all finish by their deadline: a failed row and the status
    saying so (its late results are dropped; the last good data stays, marked stale)."""
    message = "collection shards did not finish in time; the next cycle runs"
    return _record_failed_cycle(cluster, message, 0.0, detail=f"{message}: {detail}")


def _run_cycle(
    cluster: Cluster,
    collect: Callable[[datetime | None], dict[str, Any] | None],
    *,
    already_s: float = 0.0,
) -> ClusterCycle | None:
    """Collect (``collect(previous_as_of)``: the document, or None when it went elsewhere:
    nothing is recorded yet), load and record one cycle; every failure a failed row."""
    started = time.perf_counter() - already_s
    previous = ClusterCycle.objects.filter(cluster=cluster, ok=True).order_by("-as_of").first()
    try:
        cluster.check_settings()
        document = collect(previous.as_of if previous else None)
        if document is None:
            return None
        document, repaired = clean_document(document)
        document = merge_stored_topology(cluster, document)
        snap = snapshot_format.load(document)
        collection = document.get("collection")
        if repaired:  # kept on the cycle and shown as a degraded status
            collection = {**(collection if isinstance(collection, Mapping) else {})}
            collection["repaired"] = repaired
        if isinstance(collection, Mapping) and "event_cursor" in collection:
            events = EventBatch(list(document.get("events") or []), collection["event_cursor"])
            record_scheduler_events(cluster, events)
    except (IntegrationError, SchedulerEventError, snapshot_format.SnapshotError) as exc:
        detail = f"{type(exc).__name__}: {exc}"
        return _record_failed_cycle(
            cluster, failure_summary(cluster, exc), time.perf_counter() - started, detail=detail
        )
    except Exception as exc:  # whatever the input, a cycle ends in a row (no silent stall)
        logger.exception("cycle of cluster %s failed while loading", cluster.name)
        message = f"loading the snapshot failed: {type(exc).__name__}"
        return _record_failed_cycle(
            cluster, message, time.perf_counter() - started, detail=f"{message}: {exc}"[:2000]
        )
    refusal = size_refusal(cluster, snap)
    if refusal:  # a cluster that shrank at once: its findings stay as they were
        return _record_failed_cycle(
            cluster, refusal, time.perf_counter() - started, status=DataSourceStatus.DEGRADED
        )
    try:
        return record_cycle(cluster, snap, started=started, collection=collection, storable=True)
    except Exception as exc:  # a cycle that fails is always recorded, with its error
        committed = _committed_cycle(cluster, snap, started)
        if committed is not None:  # it failed after its commit: it stays one good row
            logger.exception("cycle of cluster %s failed after its commit", cluster.name)
            return committed
        logger.exception("cycle of cluster %s failed while recording", cluster.name)
        message = f"recording the cycle failed: {type(exc).__name__}"
        return _record_failed_cycle(
            cluster, message, time.perf_counter() - started, detail=f"{message}: {exc}"
        )


def _committed_cycle(
    cluster: Cluster, snap: snapshot_format.ClusterSnapshot, started: float
) -> ClusterCycle | None:
    """This cycle's good row when its transaction committed before the failure: a cycle is
    one row, and a committed one is never recorded again as failed."""
    since = timezone.now() - timedelta(seconds=time.perf_counter() - started + 1)
    try:
        return ClusterCycle.objects.filter(
            cluster=cluster, ok=True, as_of=snap.as_of.to_pydatetime(), ran_at__gte=since
        ).first()
    except DatabaseError:  # the database is away too: the failure path says so
        return None


def failure_summary(cluster: Cluster, exc: Exception) -> str:
    """What a reader may be told of a failed collection: which integration failed and how
    (bad settings, temporary, permanent), never where (host, port, the remote's answer, a
    URL's user); the full text is the cluster's ``status_detail``, for admins, and the log."""
    if isinstance(exc, ConfigError):
        how = "its settings are invalid"
    elif isinstance(exc, IntegrationError):
        how = "permanent failure" if exc.permanent else "temporary failure, retried next cycle"
    else:
        how = "invalid data"
    side = exc.side if isinstance(exc, ConfigError) else None
    # the collection raises a scheduler's failure as a CollectError "from" it: still the
    # scheduler's (it was named "metrics source (none) failed", issue #29)
    if isinstance(exc, SchedulerError) or isinstance(exc.__cause__, SchedulerError):
        side = SCHEDULER
    if side == SCHEDULER:
        what = f"scheduler ({cluster.scheduler_kind})"
    elif isinstance(exc, CollectError) or side == SOURCE:
        what = f"metrics source ({cluster.metrics_kind})"
    elif isinstance(exc, IntegrationError):
        what = "integration"
    elif isinstance(exc, snapshot_format.SnapshotError):
        return f"collection failed: the snapshot is invalid: {exc}"[:500]
    else:
        what = "scheduler events"
    return f"{what} failed: {how}"


def _record_failed_cycle(
    cluster: Cluster,
    message: str,
    seconds: float,
    *,
    detail: str = "",
    status: str = DataSourceStatus.ERROR,
) -> ClusterCycle:
    detail = detail or message
    logger.warning("cycle of cluster %s failed: %s", cluster.name, detail)
    with transaction.atomic():
        now = timezone.now()
        _save_status(cluster, status, message, now, detail=detail, cycle_ran=True)
        last = ClusterCycle.objects.filter(cluster=cluster, ok=True).order_by("-as_of").first()
        return ClusterCycle.objects.create(
            cluster=cluster,
            as_of=last.as_of if last else now,
            ok=False,
            error=detail,  # the whole text: shown to admins only (the pages show status_message)
            seconds=seconds,
        )


def _save_status(
    cluster: Cluster,
    status: str,
    message: str,
    now: datetime,
    *,
    detail: str | None = None,
    cycle_ran: bool = False,
) -> None:
    """Save the cluster's data-source status and message (and, when given, the admins' detail;
    with ``cycle_ran``, ``now`` as its last cycle's time)."""
    fields = ["status", "status_message", "status_changed_at"]
    if cluster.status != status:
        cluster.status_changed_at = now
    cluster.status = status
    cluster.status_message = message
    if detail is not None:
        cluster.status_detail = detail
        fields.append("status_detail")
    if cycle_ran:
        cluster.last_cycle_at = now
        fields.append("last_cycle_at")
    cluster.save(update_fields=fields)


@contextmanager
def full_collections_first() -> Iterator[None]:
    """Run a cycle with one full garbage collection at its start instead of several inside it.

    A big cycle allocates about a million containers that live until it ends (frames, documents,
    findings); CPython's collector scans the whole heap each time those outnumber a quarter of
    the older objects: 3-4 full collections a 16,384-GPU cycle, ~0.6 s of it (issue #17). Here
    the heap is collected once while it is small, before the cycle, and the cycle itself runs
    with young-generation collections only (short-lived reference cycles are still freed);
    the old thresholds come back afterwards."""
    thresholds = gc.get_threshold()
    gc.collect()
    gc.set_threshold(thresholds[0], thresholds[1], NO_FULL_COLLECTION)
    try:
        yield
    finally:
        gc.set_threshold(*thresholds)


NO_FULL_COLLECTION = 1_000_000  # young collections between two full ones: never, in a cycle


def record_cycle(
    cluster: Cluster,
    snap: snapshot_format.ClusterSnapshot,
    *,
    started: float | None = None,
    collection: Mapping[str, Any] | None = None,
    storable: bool = False,
) -> ClusterCycle:
    """Store a collected snapshot, diagnose it, record the findings and the GPU-hour rollup
    (:func:`record_cycle_steps`), every value storable (a name longer than its column
    clipped with a hash, as a collection clips it, and said; ``storable``: the caller made
    it so, :func:`diagnosis.edge.sanitize.clean_document`); a big cluster's with one full
    garbage collection before instead of several inside (:func:`full_collections_first`; a
    small cycle's full collections are rare and cheap, and one before each would cost more
    than they do)."""
    snap, repaired = (snap, []) if storable else storable_snapshot(snap)
    if repaired:  # kept on the cycle and shown as a degraded status, as a collection's
        collection = dict(collection or {})
        collection["repaired"] = [*(collection.get("repaired") or []), *repaired]
    big = len(snap.gpus) >= BIG_CYCLE_GPUS
    with full_collections_first() if big else nullcontext():
        return record_cycle_steps(cluster, snap, started=started, collection=collection)


BIG_CYCLE_GPUS = 2048


def record_cycle_steps(
    cluster: Cluster,
    snap: snapshot_format.ClusterSnapshot,
    *,
    started: float | None = None,
    collection: Mapping[str, Any] | None = None,
) -> ClusterCycle:
    """Store a collected snapshot, diagnose it, record the findings and the GPU-hour rollup.

    ``collection`` is the metrics source's report (coverage, data age, queries, warnings): it is
    kept on the cycle, and when the GPU metrics are too incomplete or too old the rules that read
    them are not judged (:func:`metrics_not_judged`): they do not run, so their findings stay as
    they were, and the cycle and the cluster's status say why.
    """

    started = time.perf_counter() if started is None else started
    steps = _Steps()
    skipped = metrics_not_judged(collection)
    only = None
    if skipped:
        only = [
            r for r, rule in all_rules().items() if rule.enabled_by_default and r not in skipped
        ]
    with steps.timed("snapshot"):  # stored while the cycle diagnoses and records (#35)
        compressing = Snapshot.dumping(cluster, snap)
    with steps.timed("diagnose"):
        diagnosis, accounting = diagnose(snap, cluster_overrides(cluster), only=only)
    report = accounting.as_dict()["cluster"]
    counts: dict[str, dict[str, int]] = {}
    for finding in diagnosis.findings:
        by_severity = counts.setdefault(finding.rule, {})
        by_severity[finding.severity] = by_severity.get(finding.severity, 0) + 1
    with transaction.atomic():
        now = timezone.now()
        with steps.timed("tenancy"):
            tenants = sync_cycle_tenants(cluster, snap)
        with steps.timed("findings"):
            recorded = record_findings(cluster, diagnosis, tenant_of=tenants.finding_tenant_id)
        steps.record("findings_written", recorded.as_dict())
        as_of = snap.as_of.to_pydatetime()
        cycle = ClusterCycle.objects.create(
            cluster=cluster,
            as_of=as_of,
            ran_at=now,
            seconds=time.perf_counter() - started,
            gpus=report["gpus"],
            allocated_gpus=report["allocated_gpus"],
            allocation_utilization=report["allocation_utilization"],
            activity_utilization=report["activity_utilization"],
            # its GPU models too: what the pages price the cycle's GPU-hours by (reports/pricing.py)
            accounting={**accounting.as_dict(), "gpu_models": gpu_models(snap)},
            findings=counts,
            rule_errors=[e.as_dict() for e in diagnosis.errors],
            not_judged={
                **{k: dict(v) for k, v in diagnosis.not_judged.items()},
                **_skipped_counts(snap, skipped),
            },
            data_age_s=(now - as_of).total_seconds() + _metrics_age(collection),
            coverage=(collection or {}).get("coverage"),
            source=dict(collection or {}),
            size=size_of(snap),
        )
        with steps.timed("tenancy"):
            record_tenancy(cluster, snap, diagnosis, accounting, cycle, recorded.hit_rows, tenants)
            record_accounting_slice(cycle)  # the overview's waterfall rows
            add_cycle_to_hours(cycle)  # the fairness report's hourly rows
        with steps.timed("snapshot"):  # its row; its bytes at the end: the dump runs on (#35)
            stored = compressing.create()
        with steps.timed("incidents"):
            record_cycle_incidents(cluster, snap, diagnosis, stored)  # on-call's (#16)
        problems = [f"rule {e.rule} failed: {e.message}" for e in diagnosis.errors]
        problems += _collection_problems(collection, skipped)
        _save_status(
            cluster,
            DataSourceStatus.DEGRADED if problems else DataSourceStatus.OK,
            "; ".join(problems),
            now,
            detail="",
            cycle_ran=True,
        )
        with steps.timed("snapshot"):  # as late as it can, in the cycle's transaction
            compressing.finish(stored)
    cycle.steps = steps.values
    finding_ids = {key: pk for key, (pk, _tenant) in recorded.hit_rows.items()}
    record_recommendation_step(cluster, snap, diagnosis, cycle, finding_ids)
    autopilot_after_cycle(cluster, cycle)  # after the commit: policies act on what it stored
    notify_after_cycle(cluster)  # step 5, enqueued on commit: the cycle never waits for it
    prerender_on_commit(cluster.pk, stored.pk)  # the pages' parts, in a worker (#35)
    pending = int((snap.jobs["state"] == "pending").sum())
    forecast_after_cycle(cluster, as_of, pending)  # the impact queue's, like impact estimates
    return cycle


class _Steps:
    """Seconds each step of a recorded cycle took, kept on the cycle (``ClusterCycle.steps``)."""

    def __init__(self) -> None:
        self.values: dict[str, Any] = {}

    @contextmanager
    def timed(self, name: str) -> Iterator[None]:
        started = time.perf_counter()
        try:
            yield
        finally:
            seconds = time.perf_counter() - started + self.values.get(f"{name}_s", 0.0)
            self.values[f"{name}_s"] = round(seconds, 4)  # a step timed in parts: their sum

    def record(self, name: str, value: Any) -> None:
        self.values[name] = value


def record_recommendation_step(
    cluster: Cluster,
    snap: snapshot_format.ClusterSnapshot,
    diagnosis: Diagnosis,
    cycle: ClusterCycle,
    finding_ids: Mapping[tuple[str, str], int] | None = None,
) -> None:
    """docs/architecture.md#one-cycle, step 4: propose, verify and expire recommendations from the
    cycle's diagnosis (:func:`diagnosis.workflow.record_recommendations`), and keep what it did and
    how long it took on the cycle. A failure here is recorded on the cycle and never fails it.
    ``finding_ids``: the stored finding of each hit ``(rule, subject)``, as the cycle wrote it."""

    started = time.perf_counter()
    try:
        with transaction.atomic():  # a failed step leaves nothing half-written behind
            stats = record_recommendations(
                cluster, snap, diagnosis, cycle.accounting, finding_ids=finding_ids
            )
    except Exception as exc:  # the cycle's findings and rollups stand without recommendations
        logger.exception("recommend step of cluster %s failed", cluster.name)
        stats = {"error": f"{type(exc).__name__}: {exc}"[:2000]}
        _record_step_failure(cluster, f"recommend step failed: {type(exc).__name__}", exc)
    cycle.recommendations = stats
    elapsed = time.perf_counter() - started
    cycle.seconds += elapsed
    cycle.steps = {**(cycle.steps or {}), "recommend_s": round(elapsed, 4)}
    cycle.save(update_fields=["recommendations", "seconds", "steps"])


def _record_step_failure(cluster: Cluster, message: str, exc: Exception) -> None:
    """A step after the findings failed: the cluster's status says so (degraded, the message
    added to the cycle's own), so the overview, the cluster list and the API show it; the whole
    error is the admins' ``status_detail``."""
    status = DataSourceStatus.DEGRADED if cluster.status == DataSourceStatus.OK else cluster.status
    text = "; ".join(part for part in (cluster.status_message, message) if part)
    _save_status(cluster, status, text[:1000], timezone.now(), detail=f"{message}: {exc}"[:4000])


def metrics_not_judged(collection: Mapping[str, Any] | None) -> dict[str, str]:
    """Rule id -> why it is not judged this cycle (empty when the metrics can be judged by):
    when the GPU metrics cover too few GPUs or are too old, the rules that read them
    (``Rule.reads_gpu_metrics``) are "not judged" -- never "healthy"."""
    if not isinstance(collection, Mapping) or collection.get("judgeable", True):
        return {}
    reason = "; ".join(collection.get("problems") or []) or "GPU metrics incomplete"
    return {rule_id: reason for rule_id, rule in all_rules().items() if rule.reads_gpu_metrics}


def _skipped_counts(
    snap: snapshot_format.ClusterSnapshot, skipped: Mapping[str, str]
) -> dict[str, dict[str, int]]:
    """The subjects each skipped rule would have judged: running jobs for job rules, GPUs for
    GPU rules."""
    if not skipped:
        return {}
    rules = all_rules()
    running = int((snap.jobs["state"] == "running").sum())
    counts = {"job": running, "gpu": len(snap.gpus)}
    return {
        rule_id: {reason: counts.get(rules[rule_id].subject_kind.rstrip(":"), 1)}
        for rule_id, reason in skipped.items()
    }


def _metrics_age(collection: Mapping[str, Any] | None) -> float:
    """How much older than the snapshot's time its newest metrics are."""
    age = (collection or {}).get("data_age_s") if isinstance(collection, Mapping) else None
    return float(age) if isinstance(age, int | float) else 0.0


def _collection_problems(
    collection: Mapping[str, Any] | None, skipped: Mapping[str, str]
) -> list[str]:
    if not isinstance(collection, Mapping):
        return []
    problems = []
    if skipped:
        reason = next(iter(skipped.values()))
        problems.append(f"{reason}: {', '.join(skipped)} not judged")
    problems += [f"Prometheus warned: {w}" for w in collection.get("warnings") or []]
    problems += [str(reason) for reason in collection.get("degraded") or []]
    repaired = collection.get("repaired") or []
    if repaired:
        problems.append(f"scheduler data repaired to be stored: {'; '.join(repaired[:3])}")
    refused = [str(r) for r in collection.get("refused") or []]
    if refused:
        problems.append(f"{len(refused)} scheduler record(s) left out: {'; '.join(refused[:3])}")
    return problems


def record_skipped_cycle(
    cluster: Cluster, reason: str, *, status_message: str = ""
) -> ClusterCycle:
    """A cycle that was due but did not run (issue #18: its lock held by a running cycle, the
    worker's clock refused): a failed cycle row with the reason, the last good ``as_of`` kept, so
    the pages and the API show the missed cycle. ``status_message`` also sets the cluster's
    status to error with it (a refusal needs someone to act; a lock held does not)."""
    with transaction.atomic():
        now = database_now()
        if status_message:
            _save_status(cluster, DataSourceStatus.ERROR, status_message, now)
        last = ClusterCycle.objects.filter(cluster=cluster, ok=True).order_by("-as_of").first()
        return ClusterCycle.objects.create(
            cluster=cluster, as_of=last.as_of if last else now, ran_at=now, ok=False, error=reason
        )


def record_missed_intervals(
    cluster_ids: list[int], period_s: float, *, running: frozenset[int] = frozenset()
) -> list[int]:
    """At a fan-out (``diagnosis.tasks.run_cycles``): each of these clusters whose last cycle
    attempt, good or not, is more than two periods old missed the intervals between: its
    previous cycle is still running (its id in ``running``: the cycle lock is held), or nothing
    sent or took them (beat, Redis or every worker was away). One skipped-cycle row says how
    long, how many and which; returns those clusters' ids. A cluster without any cycle yet has
    none."""
    now = database_now()
    # the newest row by id (the primary key's index), not Max(ran_at) over 30 days of cycles
    newest = ClusterCycle.objects.filter(cluster=OuterRef("pk")).order_by("-id")
    late = (
        Cluster.objects.filter(pk__in=cluster_ids)
        .annotate(last_attempt=Subquery(newest.values("ran_at")[:1]))
        .filter(last_attempt__lt=now - timedelta(seconds=2 * period_s))
    )
    missed = []
    for cluster in late:
        gap_s = (now - cluster.last_attempt).total_seconds()
        why = (
            "the previous cycle is still running"
            if cluster.pk in running
            else "none was sent or taken (beat, Redis or every worker away)"
        )
        record_skipped_cycle(
            cluster,
            f"skipped: no cycle for {gap_s:.0f} s ({int(gap_s // period_s) - 1} intervals): {why}",
        )
        missed.append(cluster.pk)
    return missed


def record_cycle_lost(
    cluster: Cluster, exc: Exception, *, attempts: int = 5
) -> ClusterCycle | None:
    """A cycle killed by a database error (PostgreSQL restarted mid-cycle): once the database
    answers again, a failed cycle row and the cluster's status say so (``attempts`` tries,
    1, 2, 4, 8 s apart: a restart of up to ~15 s is recorded; None when it never came back: the
    log says so)."""
    reason = (
        f"failed: the database connection was lost mid-cycle ({type(exc).__name__}); "
        "the next cycle runs again"
    )
    for attempt in range(attempts):
        connection.close()  # a broken connection is not reused; the next query reconnects
        try:
            return record_skipped_cycle(cluster, reason, status_message=reason)
        except DatabaseError:
            if attempt < attempts - 1:
                time.sleep(min(2**attempt, 8))
    logger.error("cycle of cluster %s lost to the database and not recorded", cluster.name)
    return None
