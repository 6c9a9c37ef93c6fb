"""Named actions: the only code that writes diagnosis models (STYLE.md habit 2).

An action owns its transaction and its side effects. A task it starts after a write is sent with
``task.delay_on_commit(...)``, so no worker ever sees a row that was rolled back. Tasks and views
stay thin and call these.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pandas as pd
from django.db import transaction
from django.utils import timezone

from diagnosis import lifecycle
from diagnosis import snapshot as snapshot_format
from diagnosis.choices import DataSourceStatus, SchedulerEventKind
from diagnosis.models import (
    AuditEntry,
    Cluster,
    ClusterCycle,
    Finding,
    FindingEvent,
    Job,
    Queue,
    RuleOverride,
    SchedulerEvent,
    Snapshot,
    Tenant,
)
from diagnosis.rules.base import Rule, ThresholdError
from diagnosis.rules.engine import Diagnosis, run_rules
from diagnosis.rules.facts import SnapshotFacts
from diagnosis.rules.registry import all_rules
from diagnosis.schedulers.base import EventBatch

logger = logging.getLogger(__name__)


def run_cluster_cycle(cluster: Cluster) -> ClusterCycle:
    """Run one diagnosis cycle of a cluster (DESIGN.md section 3): collect, then record.

    The caller (``diagnosis.tasks.run_cycle``) holds the cluster's cycle lock. A source that
    fails leaves a failed ClusterCycle row and the cluster's status saying why; the last good
    snapshot, findings and rollups stay as they were (nothing is resolved for lack of data).
    """
    from diagnosis.sources import CollectError, collector_for

    started = time.perf_counter()
    previous = ClusterCycle.objects.filter(cluster=cluster, ok=True).order_by("-as_of").first()
    try:
        collector = collector_for(cluster)
        options: dict[str, Any] = {}
        if getattr(collector, "shards", False):  # the collector can fan out (Celery group)
            from diagnosis.tasks import run_collect_shards

            options["shard_runner"] = run_collect_shards
        document = collector(
            cluster, previous_as_of=previous.as_of if previous else None, **options
        )
        snap = snapshot_format.load(document)
        collection = document.get("collection")
        if isinstance(collection, Mapping) and "event_cursor" in collection:
            events = EventBatch(list(document.get("events") or []), collection["event_cursor"])
            record_scheduler_events(cluster, events)
    except (CollectError, SchedulerEventError, snapshot_format.SnapshotError) as exc:
        message = f"{type(exc).__name__}: {exc}"
        return _record_failed_cycle(cluster, message, time.perf_counter() - started)
    return record_cycle(cluster, snap, started=started, collection=collection)


def _record_failed_cycle(cluster: Cluster, message: str, seconds: float) -> ClusterCycle:
    with transaction.atomic():
        now = timezone.now()
        _set_status(cluster, DataSourceStatus.ERROR, message, now)
        cluster.last_cycle_at = now
        cluster.save(
            update_fields=["status", "status_message", "status_changed_at", "last_cycle_at"]
        )
        last = ClusterCycle.objects.filter(cluster=cluster, ok=True).order_by("-as_of").first()
        return ClusterCycle.objects.create(
            cluster=cluster,
            as_of=last.as_of if last else now,
            ok=False,
            error=message,
            seconds=seconds,
        )


def _set_status(cluster: Cluster, status: str, message: str, now: datetime) -> None:
    if cluster.status != status:
        cluster.status_changed_at = now
    cluster.status = status
    cluster.status_message = message


def record_cycle(
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
    from diagnosis.diagnose import diagnose

    started = time.perf_counter() if started is None else started
    skipped = metrics_not_judged(collection)
    only = None
    if skipped:
        only = [
            r for r, rule in all_rules().items() if rule.enabled_by_default and r not in skipped
        ]
    diagnosis, accounting = diagnose(snap, cluster_overrides(cluster), only=only)
    report = accounting.as_dict()["cluster"]
    counts: dict[str, dict[str, int]] = {}
    for finding in diagnosis.findings:
        by_severity = counts.setdefault(finding.rule, {})
        by_severity[finding.severity] = by_severity.get(finding.severity, 0) + 1
    with transaction.atomic():
        now = timezone.now()
        Snapshot.store(cluster, snapshot_format.dump(snap))
        record_findings(cluster, diagnosis)
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
            accounting=accounting.as_dict(),
            findings=counts,
            rule_errors=[e.as_dict() for e in diagnosis.errors],
            not_judged={
                **{k: dict(v) for k, v in diagnosis.not_judged.items()},
                **_skipped_counts(snap, skipped),
            },
            data_age_s=(now - as_of).total_seconds() + _metrics_age(collection),
            coverage=(collection or {}).get("coverage"),
            source=dict(collection or {}),
        )
        record_tenancy(cluster, snap, diagnosis, accounting, cycle)
        problems = [f"rule {e.rule} failed: {e.message}" for e in diagnosis.errors]
        problems += _collection_problems(collection, skipped)
        _set_status(
            cluster,
            DataSourceStatus.DEGRADED if problems else DataSourceStatus.OK,
            "; ".join(problems),
            now,
        )
        cluster.last_cycle_at = now
        cluster.save(
            update_fields=["status", "status_message", "status_changed_at", "last_cycle_at"]
        )
    record_recommendation_step(cluster, snap, diagnosis, cycle)
    return cycle


# -- thresholds ----------------------------------------------------------------------------------


def cluster_overrides(cluster: Cluster) -> dict[str, dict[str, float | int]]:
    """The cluster's stored threshold overrides, rule id -> threshold -> value.

    Rows that no longer fit a rule (a rule or threshold removed since) are skipped: the rule then
    runs on its default, which is safer than not running at all.
    """
    rules = all_rules()
    overrides: dict[str, dict[str, float | int]] = {}
    for row in RuleOverride.objects.filter(cluster=cluster):
        rule = rules.get(row.rule_id)
        if rule is None:
            continue
        try:
            value = rule.threshold(row.threshold).parse(row.value)
        except ThresholdError:
            continue
        overrides.setdefault(row.rule_id, {})[row.threshold] = value
    return overrides


def set_rule_override(cluster: Cluster, rule_id: str, threshold: str, value: Any) -> RuleOverride:
    """Store a per-cluster threshold; a bad rule, threshold or value raises ValidationError."""
    row = RuleOverride.objects.filter(cluster=cluster, rule_id=rule_id, threshold=threshold).first()
    row = row or RuleOverride(cluster=cluster, rule_id=rule_id, threshold=threshold)
    row.value = value
    row.full_clean()
    row.save()
    return row


# -- findings ------------------------------------------------------------------------------------


@dataclass
class RecordedFindings:
    created: int = 0
    transitions: dict[str, int] = field(default_factory=dict)
    skipped_rules: tuple[str, ...] = ()

    def count(self, from_state: str | None, to_state: str) -> None:
        key = f"{from_state or 'new'}->{to_state}"
        self.transitions[key] = self.transitions.get(key, 0) + 1


def _tracked(finding: Finding) -> lifecycle.Tracked:
    return lifecycle.Tracked(
        state=finding.state,
        active_since=finding.active_since or finding.first_seen,
        last_hit_at=finding.last_hit_at,
        last_evaluated_at=finding.last_seen,
        firing_since=finding.firing_since,
        resolved_at=finding.resolved_at,
    )


def _apply_tracked(finding: Finding, tracked: lifecycle.Tracked) -> None:
    finding.state = tracked.state
    finding.active_since = tracked.active_since
    finding.last_hit_at = tracked.last_hit_at
    finding.last_seen = tracked.last_evaluated_at
    finding.firing_since = tracked.firing_since
    finding.resolved_at = tracked.resolved_at


@transaction.atomic
def record_findings(
    cluster: Cluster, diagnosis: Diagnosis, rules: Mapping[str, Rule] | None = None
) -> RecordedFindings:
    """Upsert a diagnosis's findings by fingerprint ``(cluster, rule, subject)`` and move each
    through its lifecycle (:mod:`diagnosis.lifecycle`); every transition is a FindingEvent row.

    Findings of a rule that failed in this diagnosis (an error value) are left as they are.
    Recording the same snapshot twice changes nothing.
    """
    rules = rules if rules is not None else all_rules()
    as_of: datetime = diagnosis.snapshot.as_of.to_pydatetime()
    failed = {error.rule for error in diagnosis.errors}
    judged = {rule_id for rule_id in diagnosis.seconds if rule_id not in failed}
    result = RecordedFindings(skipped_rules=tuple(sorted(failed)))

    hits = {(f.rule, f.subject): f for f in diagnosis.findings if f.rule in judged}
    existing = {
        (f.rule_id, f.subject): f
        for f in Finding.objects.select_for_update().filter(cluster=cluster, rule_id__in=judged)
    }
    events: list[FindingEvent] = []
    to_update: list[Finding] = []
    open_keys = {k for k, f in existing.items() if f.state != lifecycle.RESOLVED}
    for key in sorted(hits.keys() | open_keys):
        rule_id, subject = key
        rule = rules[rule_id]
        hit = hits.get(key)
        finding = existing.get(key)
        step = lifecycle.advance(
            _tracked(finding) if finding else None,
            hit=hit is not None,
            as_of=as_of,
            for_s=rule.for_s,
            keep_firing_for_s=rule.keep_firing_for_s,
        )
        if step is None:
            continue
        if finding is None:
            finding = Finding(cluster=cluster, rule_id=rule_id, subject=subject, first_seen=as_of)
            result.created += 1
        _apply_tracked(finding, step.tracked)
        if hit is not None:
            finding.severity = hit.severity
            finding.summary = hit.summary
            finding.evidence = dict(hit.evidence)
        if finding.pk is None:
            finding.save()
        else:
            to_update.append(finding)
        if step.changed:
            result.count(step.from_state, step.to_state)
            events.append(
                FindingEvent(
                    finding=finding,
                    time=timezone.now(),
                    from_state=step.from_state or "",
                    to_state=step.to_state,
                    snapshot_as_of=as_of,
                )
            )
    Finding.objects.bulk_update(
        to_update,
        [
            "state",
            "active_since",
            "last_hit_at",
            "last_seen",
            "firing_since",
            "resolved_at",
            "severity",
            "summary",
            "evidence",
        ],
        batch_size=500,
    )
    FindingEvent.objects.bulk_create(events, batch_size=500)
    return result


# -- snapshots -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class ImportedSnapshot:
    cluster: Cluster
    snapshot: Snapshot
    cluster_created: bool
    findings: RecordedFindings | None = None

    def describe(self) -> str:
        text = (
            f"stored snapshot of cluster {self.cluster.name} as of "
            f"{self.snapshot.as_of.isoformat()} ({self.snapshot.json_bytes} bytes of JSON, "
            f"{self.snapshot.stored_bytes} stored)"
        )
        if self.cluster_created:
            text += f"; created cluster {self.cluster.name} (dry-run)"
        if self.findings is not None:
            changes = ", ".join(f"{k}: {v}" for k, v in sorted(self.findings.transitions.items()))
            text += f"; findings: {changes or 'no change'}"
        return text


def import_snapshot(
    snap: snapshot_format.ClusterSnapshot,
    *,
    cluster_name: str | None = None,
    diagnose: bool = False,
) -> ImportedSnapshot:
    """Store a validated snapshot as its cluster's latest (creating the cluster, disabled for
    cycles and in dry-run, when it is new) and, if asked, diagnose it and record the findings."""
    name = cluster_name or snap.cluster
    with transaction.atomic():
        cluster, created = Cluster.objects.get_or_create(
            name=name, defaults={"enabled": False, "dry_run": True}
        )
        document = snapshot_format.dump(snap)
        document["cluster"] = name
        stored = Snapshot.store(cluster, document)
        findings = None
        if diagnose:
            diagnosis = run_rules(snap, cluster_overrides(cluster))
            findings = record_findings(cluster, diagnosis)
    return ImportedSnapshot(cluster, stored, created, findings)


# -- changes to the simulated scheduler -----------------------------------------------------------


@transaction.atomic
def apply_sim_change(cluster: Cluster, change: dict[str, Any], *, actor: str) -> AuditEntry:
    """Apply a placement-policy, queue-weight or drain change to a simulated cluster, effective
    from its next scheduling pass, and record it (the cluster's replayable change log and an
    audit row with the value before and after). A change the simulator refuses raises
    :class:`diagnosis.schedulers.sim.ChangeError` and records nothing.

    (The approval workflow, ``diagnosis.workflow``, writes through :func:`write_sim_change`;
    this is the demo cluster's direct path.)
    """
    cluster, before = write_sim_change(cluster, change)
    return AuditEntry.objects.create(
        actor=actor,
        action=f"sim:{change['kind']}",
        target=str(change.get("target", "")),
        before={"value": before},
        after={"value": change.get("to", "drained" if change["kind"] == "drain-node" else None)},
        cluster=cluster,
    )


def current_sim_value(cluster: Cluster, change: Mapping[str, Any]) -> Any:
    """The value a change's target has in a simulated cluster now: this process's simulator,
    brought up to the cluster's recorded changes first (another process may have written them)."""
    from diagnosis.schedulers import sim as sim_scheduler
    from diagnosis.sources import sim as sim_source

    runtime = sim_source.runtime_for(cluster)
    with runtime.lock:
        now = runtime.simulator.now
        sim_source.catch_up_changes(cluster, runtime, now)
        runtime.simulator.run_until(now)  # the caught-up changes take effect (a pass at now)
    return sim_scheduler.current_value(cluster, change)


@transaction.atomic
def write_sim_change(
    cluster: Cluster, change: Mapping[str, Any], *, check: Callable[[Any], None] | None = None
) -> tuple[Cluster, Any]:
    """Apply a change to a simulated cluster and append it to its replayable change log, under
    the cluster's row lock; ``check(value before)`` may refuse it by raising. Records no audit
    row (the caller does). Returns the locked cluster and the value before."""
    from diagnosis.schedulers import sim as sim_scheduler

    if cluster.scheduler_kind != "sim":
        raise sim_scheduler.ChangeError(f"cluster {cluster.name} is not a simulated cluster")
    cluster = Cluster.objects.select_for_update().get(pk=cluster.pk)
    before = current_sim_value(cluster, change)
    if check is not None:
        check(before)
    sim_scheduler.apply(cluster, change, dry_run=True)
    record = sim_scheduler.apply(cluster, change, dry_run=False)
    config = dict(cluster.scheduler_config)
    config["changes"] = [*config.get("changes", []), record]
    cluster.scheduler_config = config
    cluster.save(update_fields=["scheduler_config"])
    return cluster, before


# -- recommendations: the cycle's recommend step (the workflow: diagnosis/workflow.py) ----------


def record_recommendation_step(
    cluster: Cluster,
    snap: snapshot_format.ClusterSnapshot,
    diagnosis: Diagnosis,
    cycle: ClusterCycle,
) -> None:
    """DESIGN.md section 3, step 4: propose, verify and expire recommendations from the cycle's
    diagnosis (:func:`diagnosis.workflow.record_recommendations`), and keep what it did and how
    long it took on the cycle. A failure here is recorded on the cycle and never fails it."""
    from diagnosis.workflow import record_recommendations

    started = time.perf_counter()
    try:
        stats = record_recommendations(cluster, snap, diagnosis, cycle.accounting)
    except Exception as exc:  # the cycle's findings and rollups stand without recommendations
        logger.exception("recommend step of cluster %s failed", cluster.name)
        stats = {"error": f"{type(exc).__name__}: {exc}"}
    cycle.recommendations = stats
    cycle.seconds += time.perf_counter() - started
    cycle.save(update_fields=["recommendations", "seconds"])


# -- scheduler events ----------------------------------------------------------------------------


class SchedulerEventError(ValueError):
    """A normalized scheduler event lacks a field or has it in the wrong form (names the field)."""


@dataclass(frozen=True)
class RecordedEvents:
    """What :func:`record_scheduler_events` did: rows added, events already stored, the cursor."""

    stored: int
    duplicates: int
    cursor: str


def _event_time(value: Any, where: str) -> datetime:
    if isinstance(value, datetime):
        moment = value
    else:
        try:
            moment = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
        except ValueError:
            raise SchedulerEventError(f"{where}.time is not an RFC 3339 time: {value!r}") from None
    if moment.tzinfo is None:
        raise SchedulerEventError(f"{where}.time has no time zone: {value!r}")
    return moment


def _event_dedup_key(event: Mapping[str, Any], moment: datetime) -> str:
    """The adapter's own key, or (when it gives none) a digest of what the event says."""
    key = str(event.get("dedup_key") or "")
    if not key:
        fields = [moment.isoformat(), *(str(event.get(f) or "") for f in _EVENT_TEXT_FIELDS)]
        key = "sha256:" + hashlib.sha256("\x1f".join(fields).encode()).hexdigest()
    if len(key) > 255:  # keep it unique but within the column
        key = "sha256:" + hashlib.sha256(key.encode()).hexdigest()
    return key


_EVENT_TEXT_FIELDS = ("kind", "job", "node", "reason", "message")


def _scheduler_event(cluster: Cluster, event: Mapping[str, Any], where: str) -> SchedulerEvent:
    if not isinstance(event, Mapping):
        raise SchedulerEventError(f"{where} is not an object: {event!r}")
    if event.get("time") in (None, ""):
        raise SchedulerEventError(f"{where}.time is missing")
    moment = _event_time(event["time"], where)
    kind = event.get("kind")
    if kind not in SchedulerEventKind.values:
        known = ", ".join(SchedulerEventKind.values)
        raise SchedulerEventError(f"{where}.kind {kind!r} is not one of: {known}")
    return SchedulerEvent(
        cluster=cluster,
        time=moment,
        kind=kind,
        job_external_id=str(event.get("job") or "")[:255],
        node=str(event.get("node") or "")[:253],
        reason=str(event.get("reason") or "")[:255],
        message=str(event.get("message") or ""),
        dedup_key=_event_dedup_key(event, moment),
    )


def record_scheduler_events(cluster: Cluster, batch: EventBatch) -> RecordedEvents:
    """Store a scheduler adapter's normalized events and advance the cluster's event cursor,
    in one transaction.

    Idempotent on ``(cluster, dedup_key)``: an event already stored (or repeated in the batch)
    changes nothing, so a redelivered batch or a cursor that re-reads does no harm. Each event is
    stored at its own ``time``, so events that arrive out of order still sort right. An event
    without a ``dedup_key`` is keyed by a digest of its content. A batch whose cursor is None
    leaves the stored cursor as it was. A malformed event raises :class:`SchedulerEventError`
    naming it and stores nothing.
    """
    rows: dict[str, SchedulerEvent] = {}
    for number, event in enumerate(batch.events):
        row = _scheduler_event(cluster, event, f"events[{number}]")
        rows.setdefault(row.dedup_key, row)
    with transaction.atomic():
        locked = Cluster.objects.select_for_update().get(pk=cluster.pk)
        known = set(
            SchedulerEvent.objects.filter(cluster=locked, dedup_key__in=list(rows)).values_list(
                "dedup_key", flat=True
            )
        )
        new = [row for key, row in rows.items() if key not in known]
        SchedulerEvent.objects.bulk_create(new, batch_size=500, ignore_conflicts=True)
        if batch.cursor is not None and batch.cursor != locked.event_cursor:
            locked.event_cursor = batch.cursor
            locked.save(update_fields=["event_cursor"])
        cluster.event_cursor = locked.event_cursor
    return RecordedEvents(
        stored=len(new),
        duplicates=len(batch.events) - len(new),
        cursor=locked.event_cursor,
    )


# -- metrics coverage and freshness (the Prometheus source's report) ---------------------------

# Rules whose verdicts rest on the GPUs' metrics (util, memory, tensor activity, Xids). When the
# metrics cover too few GPUs or are too old, these are "not judged" -- never "healthy".
GPU_METRIC_RULES = ("idle-allocation", "data-starvation", "low-mfu", "xid")


def metrics_not_judged(collection: Mapping[str, Any] | None) -> dict[str, str]:
    """Rule id -> why it is not judged this cycle (empty when the metrics can be judged by)."""
    if not isinstance(collection, Mapping) or collection.get("judgeable", True):
        return {}
    reason = "; ".join(collection.get("problems") or []) or "GPU metrics incomplete"
    rules = all_rules()
    return {rule_id: reason for rule_id in GPU_METRIC_RULES if rule_id in rules}


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
    return problems


def create_prometheus_demo_cluster(
    name: str, *, prometheus_url: str, scenario: str = "seed", seed: int = 0
) -> Cluster:
    """A simulated cluster whose GPU metrics come from Prometheus (the demo with
    ``serve_exporter``): the scenario in real time (``speed`` 1, so the simulator's clock is
    Prometheus's), enabled for cycles, in dry-run."""
    from diagnosis.sources.prometheus import PrometheusConfig

    metrics_config = {"url": prometheus_url, "scrape_interval_s": 15}
    PrometheusConfig.parse(metrics_config)
    return Cluster.objects.create(
        name=name,
        scheduler_kind="sim",
        scheduler_config={
            "scenario": scenario,
            "seed": seed,
            "speed": 1,
            "clock": "wall",
            "started_at": timezone.now().replace(microsecond=0).isoformat(),
            "changes": [],
        },
        metrics_kind="prometheus",
        metrics_config=metrics_config,
        dry_run=True,
    )


# -- incidents from Alertmanager -----------------------------------------------------------------


@dataclass(frozen=True)
class AlertOutcome:
    """What one Alertmanager alert did: ``opened``, ``updated``, ``reopened``, ``resolved``,
    ``already-resolved`` or ``stale`` (a redelivery of an episode that is over)."""

    outcome: str
    incident: Any  # diagnosis.models.Incident


def _incident_fingerprint(cluster: Cluster, alert_fingerprint: str) -> str:
    return f"alertmanager:{cluster.pk}:{alert_fingerprint}"


def jobs_on_gpu(
    document: Mapping[str, Any] | None, node: str | None, gpu_index: int | None
) -> list[dict[str, Any]]:
    """The jobs of a snapshot document holding a GPU (or, with no index, any GPU of the node)."""
    if not document or not node:
        return []
    hits = []
    for job in document.get("jobs") or ():
        for pod in job.get("allocation") or ():
            if pod.get("node") == node and (gpu_index is None or gpu_index in pod.get("gpus", ())):
                hits.append(
                    {k: job.get(k) for k in ("id", "name", "tenant", "queue", "state", "pool")}
                )
                break
    return hits


def _incident_summary(gpu_alert: Any, alert: Any, info: Any) -> str:
    where = gpu_alert.node or "an unknown node"
    if gpu_alert.gpu_index is not None:
        where += f" GPU {gpu_alert.gpu_index}"
    if info is not None:
        return f"Xid {info.code} on {where}: {info.name}: {info.meaning}"
    text = alert.annotations.get("summary") or alert.annotations.get("description") or alert.name
    kind = "Xid" if gpu_alert.kind == "xid" else "GPU health failure"
    return f"{kind} on {where}: {text}"


@transaction.atomic
def open_or_update_incident_from_alert(
    cluster: Cluster, alert: Any, gpu_alert: Any, *, snapshot_document: Mapping[str, Any] | None
) -> AlertOutcome:
    """Open, update or reopen the incident of a firing Xid or GPU-health alert.

    Deduplicated by the alert's fingerprint (Alertmanager delivers at least once): a repeated
    delivery updates the incident (labels, delivery count); a delivery of an episode that is
    already resolved (same ``startsAt``) changes nothing; a later episode reopens it. The
    incident names the node and GPU, the jobs and tenants on it (from ``snapshot_document``, the
    cluster's latest snapshot) and, for an Xid, the catalog's meaning and action.
    ``alert``/``gpu_alert``: :class:`diagnosis.sources.alertmanager.Alert` and ``GpuAlert``.
    """
    from diagnosis import xid_catalog
    from diagnosis.choices import IncidentState
    from diagnosis.models import Incident

    info = xid_catalog.lookup(gpu_alert.xid) if gpu_alert.xid is not None else None
    jobs = jobs_on_gpu(snapshot_document, gpu_alert.node, gpu_alert.gpu_index)
    if gpu_alert.hpc_job and not any(j["id"] == gpu_alert.hpc_job for j in jobs):
        jobs.append({"id": gpu_alert.hpc_job})
    details = {
        "kind": gpu_alert.kind,
        "alert": alert.as_dict(),
        "xid": info.as_dict() if info else None,
        "gpu_uuid": gpu_alert.gpu_uuid,
        "pods": list(gpu_alert.pods),
        "jobs": jobs,
        "tenants": sorted({j["tenant"] for j in jobs if j.get("tenant")}),
    }
    incident, created = Incident.objects.select_for_update().get_or_create(
        fingerprint=_incident_fingerprint(cluster, alert.fingerprint),
        defaults={
            "cluster": cluster,
            "node": gpu_alert.node or "",
            "gpu_index": gpu_alert.gpu_index,
            "xid_code": gpu_alert.xid,
            "summary": _incident_summary(gpu_alert, alert, info),
            "details": {**details, "deliveries": 1, "episodes": [_episode(alert)]},
            "source": "alertmanager",
            "opened_at": alert.starts_at,
        },
    )
    if created:
        return AlertOutcome("opened", incident)
    episodes = list(incident.details.get("episodes") or [])
    current_start = episodes[-1]["starts_at"] if episodes else None
    later = current_start is None or alert.starts_at > datetime.fromisoformat(current_start)
    if incident.state == IncidentState.RESOLVED and not later:
        return AlertOutcome("stale", incident)
    outcome = "updated"
    if incident.state == IncidentState.RESOLVED:
        outcome = "reopened"
        incident.state = IncidentState.OPEN
        incident.opened_at = alert.starts_at
        incident.resolved_at = None
        incident.acknowledged_at = None
        incident.acknowledged_by = None
        episodes.append(_episode(alert))
    incident.node = gpu_alert.node or incident.node
    incident.gpu_index = (
        gpu_alert.gpu_index if gpu_alert.gpu_index is not None else incident.gpu_index
    )
    incident.xid_code = gpu_alert.xid if gpu_alert.xid is not None else incident.xid_code
    incident.summary = _incident_summary(gpu_alert, alert, info)
    incident.details = {
        **details,
        "deliveries": int(incident.details.get("deliveries") or 0) + 1,
        "episodes": episodes,
    }
    incident.save()
    return AlertOutcome(outcome, incident)


def _episode(alert: Any) -> dict[str, Any]:
    return {"starts_at": alert.starts_at.isoformat(), "resolved_at": None}


@transaction.atomic
def resolve_incident(incident: Any, *, at: datetime, note: str = "") -> Any:
    """Mark an incident resolved at ``at`` (idempotent: a resolved incident stays as it was)."""
    from diagnosis.choices import IncidentState
    from diagnosis.models import Incident

    incident = Incident.objects.select_for_update().get(pk=incident.pk)
    if incident.state == IncidentState.RESOLVED:
        return incident
    incident.state = IncidentState.RESOLVED
    incident.resolved_at = at
    episodes = list(incident.details.get("episodes") or [])
    if episodes:
        episodes[-1] = {**episodes[-1], "resolved_at": at.isoformat()}
    incident.details = {**incident.details, "episodes": episodes}
    if note:
        incident.details["resolution"] = note
    incident.save()
    return incident


@transaction.atomic
def resolve_incident_from_alert(
    cluster: Cluster, alert: Any, gpu_alert: Any, *, snapshot_document: Mapping[str, Any] | None
) -> AlertOutcome:
    """A ``resolved`` alert resolves its incident's current episode. A resolution that arrives
    before its firing (or for an alert never seen) records the incident as resolved, so the late
    firing delivery of the same episode cannot open it; one for an older episode is stale."""
    from diagnosis.choices import IncidentState
    from diagnosis.models import Incident

    ended = alert.ends_at or timezone.now()
    incident = (
        Incident.objects.select_for_update()
        .filter(fingerprint=_incident_fingerprint(cluster, alert.fingerprint))
        .first()
    )
    if incident is None:
        opened = open_or_update_incident_from_alert(
            cluster, alert, gpu_alert, snapshot_document=snapshot_document
        )
        return AlertOutcome("resolved", resolve_incident(opened.incident, at=ended))
    episodes = incident.details.get("episodes") or []
    if episodes and alert.starts_at < datetime.fromisoformat(episodes[-1]["starts_at"]):
        return AlertOutcome("stale", incident)
    if incident.state == IncidentState.RESOLVED:
        return AlertOutcome("already-resolved", incident)
    return AlertOutcome("resolved", resolve_incident(incident, at=ended, note="alert resolved"))


# -- tenants, jobs and fairness rollups (DESIGN.md section 7; docs/fairness.md) -----------------

# The Job columns a snapshot sets, compared to decide whether a stored job changed.
JOB_SYNC_FIELDS = (
    "name",
    "tenant_id",
    "queue_id",
    "pool",
    "kind",
    "priority",
    "state",
    "submitted_at",
    "started_at",
    "ended_at",
    "pods",
    "gpus_per_pod",
    "gang",
    "min_member",
    "preemptions",
)
# The columns that change during a job's life: a stored unfinished job is compared on these
# only (its name, shape and submission do not change), which keeps the per-cycle read small.
JOB_CHANGING_FIELDS = (
    "tenant_id",
    "queue_id",
    "priority",
    "state",
    "started_at",
    "ended_at",
    "preemptions",
)
LIVE_JOB_STATES = ("pending", "running")


@dataclass(frozen=True)
class RecordedTenancy:
    """What :func:`record_tenancy` wrote for one cycle."""

    tenants_created: int
    jobs_written: int
    jobs_unlisted: int
    findings_tagged: int
    interval_s: float
    tenant_rows: int
    pool_rows: int


def record_tenancy(
    cluster: Cluster,
    snap: snapshot_format.ClusterSnapshot,
    diagnosis: Diagnosis,
    accounting: Any,
    cycle: ClusterCycle,
) -> RecordedTenancy:
    """The tenant side of a cycle, inside its transaction: sync Tenant and Queue rows from the
    snapshot's queues (so managers can be assigned in the admin), sync Job rows (only the jobs
    that changed), tag the cycle's findings with their tenant, and store the cycle's per-tenant
    and per-pool rollups (:func:`diagnosis.fairness.cycle_rollup`).

    The rollups stand for the time since the previous good cycle's snapshot, at most the
    snapshot's window; a snapshot already rolled up (the same ``as_of`` again) adds nothing.
    """
    from diagnosis import fairness
    from diagnosis.models import PoolRollup, TenantRollup

    as_of = snap.as_of.to_pydatetime()
    tenant_of_job = fairness.job_tenants(snap)
    tenant_ids, created = sync_tenants_and_queues(cluster, snap)
    queue_ids = dict(Queue.objects.filter(cluster=cluster).values_list("name", "pk"))
    previous = (
        ClusterCycle.objects.filter(cluster=cluster, ok=True, as_of__lt=as_of)
        .exclude(pk=cycle.pk)
        .order_by("-as_of")
        .values_list("as_of", flat=True)
        .first()
    )
    synced = sync_jobs(cluster, snap, tenant_of_job, tenant_ids, queue_ids, previous)
    job_tenant = dict(zip(tenant_of_job.index, tenant_of_job.to_numpy(), strict=True))
    tagged = tag_finding_tenants(cluster, diagnosis, job_tenant, tenant_ids)
    if PoolRollup.objects.filter(cluster=cluster, pool="", as_of=as_of).exists():
        return RecordedTenancy(created, synced.written, synced.unlisted, tagged, 0.0, 0, 0)
    interval = float(snap.window_s)
    if previous is not None:
        interval = min(interval, (as_of - previous).total_seconds())
    rollup = fairness.cycle_rollup(
        snap,
        accounting,
        diagnosis.facts or SnapshotFacts(snap),
        diagnosis.findings,
        interval_s=interval,
        preemptions=synced.preemptions,
    )
    common = {"cluster": cluster, "cycle": cycle, "as_of": as_of, "interval_s": interval}
    tenant_rows = [
        TenantRollup(
            **common,
            **figures.held_figures(),
            tenant_id=tenant_ids.get(name),
            tenant_name=name[:128],
            entitlement_s=figures.entitlement * interval,
            fair_gpu_s=figures.fair_gpu_s,
        )
        for name, figures in rollup.tenants.items()
    ]
    pool_rows = [
        PoolRollup(
            **common,
            **figures.held_figures(),
            pool=pool,
            gpu_s=figures.gpu_s,
            free_fragmented_gpu_s=figures.free_fragmented_gpu_s,
            free_demand_gpu_s=figures.free_demand_gpu_s,
            free_no_demand_gpu_s=figures.free_no_demand_gpu_s,
            entitlement_basis=rollup.entitlement_basis if pool == "" else "",
        )
        for pool, figures in rollup.pools.items()
    ]
    TenantRollup.objects.bulk_create(tenant_rows, batch_size=500)
    PoolRollup.objects.bulk_create(pool_rows, batch_size=500)
    return RecordedTenancy(
        created,
        synced.written,
        synced.unlisted,
        tagged,
        interval,
        len(tenant_rows),
        len(pool_rows),
    )


def sync_tenants_and_queues(
    cluster: Cluster, snap: snapshot_format.ClusterSnapshot
) -> tuple[dict[str, int], int]:
    """Create the Tenant rows of the snapshot's queues and jobs, and create or update its Queue
    rows; nothing is deleted (a queue that disappears keeps its history). Returns tenant name ->
    id and how many tenants were created. Costs two reads when nothing changed."""
    from diagnosis import fairness

    queues = snap.queues
    names = set(queues["tenant"].astype(str)) | set(fairness.job_tenants(snap).astype(str))
    # A name longer than the column is left without a Tenant row (its jobs show no tenant).
    names = {n for n in names if n != fairness.NO_TENANT and len(n) <= 128}
    tenant_ids = dict(Tenant.objects.filter(cluster=cluster).values_list("name", "pk"))
    missing = sorted(names - set(tenant_ids))
    if missing:
        Tenant.objects.bulk_create(
            [Tenant(cluster=cluster, name=name) for name in missing], ignore_conflicts=True
        )
        tenant_ids = dict(Tenant.objects.filter(cluster=cluster).values_list("name", "pk"))
    stored = {
        row[0]: row[1:]
        for row in Queue.objects.filter(cluster=cluster).values_list(
            "name", "pk", "tenant_id", "weight", "deserved_gpus", "capability_gpus"
        )
    }
    create, update = [], []
    for name, row in queues.iterrows():
        if len(name) > 128:
            continue
        wanted = (
            tenant_ids.get(str(row["tenant"])),
            _whole(row["weight"]) if _whole(row["weight"]) is not None else 1,
            _whole(row["deserved_gpus"]),
            _whole(row["capability_gpus"]),
        )
        known = stored.get(name)
        if known is not None and tuple(known[1:]) == wanted:
            continue
        queue = Queue(
            pk=known[0] if known else None,
            cluster=cluster,
            name=name,
            tenant_id=wanted[0],
            weight=wanted[1],
            deserved_gpus=wanted[2],
            capability_gpus=wanted[3],
        )
        (update if known else create).append(queue)
    Queue.objects.bulk_create(create, ignore_conflicts=True)
    Queue.objects.bulk_update(update, ["tenant_id", "weight", "deserved_gpus", "capability_gpus"])
    return tenant_ids, len(missing)


def _whole(value: Any) -> int | None:
    return None if value is None or value != value else max(0, round(float(value)))


def _objects(column: pd.Series) -> np.ndarray:
    """A text column as plain Python values (None where missing): fast to iterate."""
    return column.to_numpy(dtype=object, na_value=None)


def _moments(times: pd.Series) -> list[datetime | None]:
    """Aware UTC datetimes (None for NaT) of a UTC datetime column, without a Timestamp each."""
    naive = times.to_numpy(dtype="datetime64[us]", na_value=np.datetime64("NaT")).astype(object)
    return [None if moment is None else moment.replace(tzinfo=UTC) for moment in naive]


@dataclass(frozen=True)
class SyncedJobs:
    written: int
    unlisted: int
    preemptions: dict[str, int]  # job id -> preemptions since the previous cycle


def sync_jobs(
    cluster: Cluster,
    snap: snapshot_format.ClusterSnapshot,
    tenant_of_job: pd.Series,
    tenant_ids: Mapping[str, int],
    queue_ids: Mapping[str, int],
    previous_as_of: datetime | None,
) -> SyncedJobs:
    """Bring the cluster's Job rows up to date with a snapshot, writing only what changed.

    Reads the stored unfinished jobs (one query); writes the jobs that are new or changed, the
    jobs that ended since the previous cycle, and marks unfinished jobs the scheduler no longer
    lists as ``unlisted_since`` this snapshot. Ended jobs that ended before the previous cycle
    were written then and are skipped, so the cost follows the churn, not the cluster's size.
    """
    jobs = snap.jobs
    as_of = snap.as_of.to_pydatetime()
    live = {
        row[0]: row[1:]
        for row in Job.objects.filter(
            cluster=cluster, state__in=LIVE_JOB_STATES, unlisted_since__isnull=True
        ).values_list("external_id", "pk", *JOB_CHANGING_FIELDS)
    }
    columns = {
        "name": [n[:255] if isinstance(n, str) else "" for n in _objects(jobs["name"])],
        "tenant_id": [tenant_ids.get(t) for t in tenant_of_job.reindex(jobs.index).tolist()],
        "queue_id": [queue_ids.get(q) for q in _objects(jobs["queue"])],
        "pool": [p[:128] if isinstance(p, str) else "" for p in _objects(jobs["pool"])],
        "kind": [k[:32] if isinstance(k, str) else "" for k in _objects(jobs["kind"])],
        "priority": jobs["priority"].astype(int).tolist(),
        "state": jobs["state"].astype(object).where(jobs["state"].notna(), "pending").tolist(),
        "submitted_at": _moments(jobs["submitted"]),
        "started_at": _moments(jobs["started"]),
        "ended_at": _moments(jobs["ended"]),
        "pods": jobs["pods"].astype(int).tolist(),
        "gpus_per_pod": jobs["gpus_per_pod"].astype(int).tolist(),
        "gang": jobs["gang"].astype(bool).tolist(),
        "min_member": jobs["min_member"].astype(int).tolist(),
        "preemptions": jobs["preemptions"].astype(int).tolist(),
    }
    upsert: list[Job] = []
    unknown: list[str] = []  # upserted jobs that were not among the stored unfinished ones
    preemptions: dict[str, int] = {}
    for i, job_id in enumerate(jobs.index.tolist()):
        known = live.pop(job_id, None)
        if known is not None:
            now = tuple(columns[f][i] for f in JOB_CHANGING_FIELDS)
            if tuple(known[1:]) == now:
                continue
            if now[-1] > known[-1]:
                preemptions[job_id] = now[-1] - known[-1]
        values = tuple(columns[f][i] for f in JOB_SYNC_FIELDS)
        if known is None:
            ended = columns["ended_at"][i]
            if (
                values[6] not in LIVE_JOB_STATES
                and previous_as_of is not None
                and ended is not None
                and ended <= previous_as_of
            ):
                continue  # written when it ended (or before gpuobs knew the cluster)
            unknown.append(job_id)
        upsert.append(
            Job(
                cluster=cluster,
                external_id=job_id,
                unlisted_since=None,
                **dict(zip(JOB_SYNC_FIELDS, values, strict=True)),
            )
        )
    if unknown:
        unknown_set = set(unknown)
        before = dict(
            Job.objects.filter(cluster=cluster, external_id__in=unknown).values_list(
                "external_id", "preemptions"
            )
        )
        for job in upsert:
            if job.external_id in unknown_set and job.preemptions > before.get(job.external_id, 0):
                preemptions[job.external_id] = job.preemptions - before.get(job.external_id, 0)
    # INSERT ... ON CONFLICT DO UPDATE: one statement for new and changed jobs alike.
    Job.objects.bulk_create(
        upsert,
        batch_size=1000,
        update_conflicts=True,
        unique_fields=["cluster", "external_id"],
        update_fields=[*JOB_SYNC_FIELDS, "unlisted_since"],
    )
    unlisted = 0
    if live:
        unlisted = Job.objects.filter(pk__in=[row[0] for row in live.values()]).update(
            unlisted_since=as_of
        )
    return SyncedJobs(len(upsert), unlisted, preemptions)


def tag_finding_tenants(
    cluster: Cluster,
    diagnosis: Diagnosis,
    tenant_of_job: Mapping[str, str],
    tenant_ids: Mapping[str, int],
) -> int:
    """Set ``Finding.tenant`` on the findings first seen in this cycle that concern exactly one
    tenant (:func:`diagnosis.fairness.finding_tenant`); one UPDATE per tenant. Findings seen
    before keep the tenant they got then, so the cost follows the new findings, not all hits."""
    from diagnosis import fairness

    as_of = diagnosis.snapshot.as_of.to_pydatetime()
    new = Finding.objects.filter(cluster=cluster, tenant__isnull=True, first_seen=as_of)
    rows = list(new.values_list("pk", "rule_id", "subject"))
    if not rows:
        return 0
    hits = {(hit.rule, hit.subject): hit for hit in diagnosis.findings}
    by_tenant: dict[int, list[int]] = {}
    for pk, rule_id, subject in rows:
        hit = hits.get((rule_id, subject))
        name = fairness.finding_tenant(hit, tenant_of_job) if hit is not None else None
        if name is not None and name in tenant_ids:
            by_tenant.setdefault(tenant_ids[name], []).append(pk)
    return sum(
        Finding.objects.filter(pk__in=pks).update(tenant_id=tid) for tid, pks in by_tenant.items()
    )


# -- fairness report subscriptions (docs/fairness.md, "Scheduled delivery") ---------------------


def subscribe_to_report(user: Any, cluster: Cluster, frequency: str) -> Any:
    """Create or change a user's standing order for a cluster's fairness report (``weekly`` or
    ``monthly``); an empty ``frequency`` cancels it (returns None). The caller has checked that
    the user may read the cluster."""
    from diagnosis.models import ReportFrequency, ReportSubscription

    if not frequency:
        ReportSubscription.objects.filter(user=user, cluster=cluster).delete()
        return None
    if frequency not in ReportFrequency.values:
        known = ", ".join(ReportFrequency.values)
        raise ValueError(f"frequency: {frequency!r} is not one of: {known}")
    subscription, _ = ReportSubscription.objects.update_or_create(
        user=user, cluster=cluster, defaults={"frequency": frequency}
    )
    return subscription


def send_report_subscription(subscription: Any, *, now: datetime | None = None) -> bool:
    """Email one subscriber their fairness report as a PDF (the period ending now, or at the
    newest rollup of a cluster whose clock runs ahead), through Django's mail backend.

    The report is built for the subscriber, through the same access checks as the page: a
    manager gets their tenants only, and a user who may no longer read the cluster gets nothing
    (the subscription records why). Returns whether a mail was sent.
    """
    from django.conf import settings
    from django.core.mail import EmailMessage
    from django.http import Http404

    from diagnosis.access import get_cluster_for_user
    from diagnosis.reports.fairness import build_fairness_report, default_end, subscription_period
    from diagnosis.reports.pdf import render_pdf

    now = now or timezone.now()
    user = subscription.user
    problem = ""
    if not user.email:
        problem = "the user has no email address"
    else:
        try:
            cluster = get_cluster_for_user(user, subscription.cluster.name)
        except Http404:
            problem = "the user may no longer read this cluster"
    if problem:
        subscription.last_error = problem
        subscription.save(update_fields=["last_error"])
        return False
    period = subscription_period(subscription.frequency, default_end(cluster, now))
    data = build_fairness_report(user, cluster, period, now=now)
    start, end = period.as_dict()["from"][:10], period.as_dict()["to"][:10]
    message = EmailMessage(
        subject=f"[gpuobs] {cluster.name}: tenant fairness report {start} – {end}",
        body=(
            f"Your {subscription.get_frequency_display().lower()} tenant fairness report of "
            f"cluster {cluster.name} for {start} – {end} is attached as a PDF.\n\n"
            "To change or cancel this email, open the cluster's fairness report in gpuobs.\n"
        ),
        from_email=settings.DEFAULT_FROM_EMAIL,
        to=[user.email],
    )
    message.attach(
        f"fairness-{cluster.name}-{start}-{end}.pdf", render_pdf(data), "application/pdf"
    )
    message.send()
    subscription.last_sent_at = now
    subscription.last_error = ""
    subscription.save(update_fields=["last_sent_at", "last_error"])
    return True


# An hourly beat checks; a subscription is due this much before its full interval is over, so
# a weekly report goes out on the same hour each week rather than an hour later every time.
SUBSCRIPTION_SLACK = timedelta(minutes=30)


def send_due_report_subscriptions(*, now: datetime | None = None) -> int:
    """Send every subscription whose interval (7 or 30 days) has passed since it was last sent
    (or that was never sent). Returns how many mails went out."""
    from django.db.models import Q

    from diagnosis.models import ReportSubscription
    from diagnosis.reports.fairness import SUBSCRIPTION_EVERY

    now = now or timezone.now()
    due = Q(last_sent_at__isnull=True)
    for frequency, every in SUBSCRIPTION_EVERY.items():
        due |= Q(frequency=frequency, last_sent_at__lte=now - every + SUBSCRIPTION_SLACK)
    sent = 0
    for subscription in ReportSubscription.objects.filter(due).select_related("user", "cluster"):
        sent += send_report_subscription(subscription, now=now)
    return sent
