"""What gpuobs keeps: inventory, snapshots, findings and their history, recommendations and their
audit trail, incidents (DESIGN.md section 2, "Django around it").

Only the named functions in ``diagnosis.actions`` write these models; views, the API and tasks
read them or call an action.
"""

from __future__ import annotations

import hashlib
import json
import zlib
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import models
from django.utils import timezone

from diagnosis.choices import (
    DataSourceStatus,
    FindingState,
    GpuHealth,
    IncidentState,
    JobState,
    MetricsKind,
    NodeState,
    RecommendationKind,
    RecommendationState,
    SchedulerEventKind,
    SchedulerKind,
    Severity,
)

SNAPSHOT_FORMAT = "gpuobs.snapshot/v1"


class Cluster(models.Model):
    name = models.SlugField(max_length=63, unique=True)
    scheduler_kind = models.CharField(
        max_length=16, choices=SchedulerKind.choices, default=SchedulerKind.SIM
    )
    scheduler_config = models.JSONField(
        default=dict, blank=True, help_text="Adapter settings; secrets come from the environment."
    )
    metrics_kind = models.CharField(
        max_length=16, choices=MetricsKind.choices, default=MetricsKind.SIM
    )
    metrics_config = models.JSONField(
        default=dict, blank=True, help_text="Source settings; secrets come from the environment."
    )
    enabled = models.BooleanField(default=True, help_text="Diagnosed by the periodic cycle.")
    dry_run = models.BooleanField(
        default=True, help_text="Approved changes are shown and audited but never written."
    )
    auto_rollback = models.BooleanField(
        default=False,
        help_text="When an applied change makes its target metric worse, roll it back at once "
        "(otherwise a rollback is proposed for approval).",
    )
    last_cycle_at = models.DateTimeField(null=True, blank=True)
    status = models.CharField(
        max_length=16, choices=DataSourceStatus.choices, default=DataSourceStatus.UNKNOWN
    )
    status_message = models.TextField(blank=True)
    status_changed_at = models.DateTimeField(null=True, blank=True)
    # The embedded mode's cycle lock (diagnosis.tasks.cluster_cycle_lock): with Redis the lock
    # lives in Redis and these stay empty.
    cycle_lease_until = models.DateTimeField(null=True, blank=True, editable=False)
    cycle_lease_holder = models.CharField(max_length=32, blank=True, editable=False)
    event_cursor = models.TextField(
        blank=True, editable=False, help_text="The scheduler adapter's cursor for read_events."
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class Node(models.Model):
    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="nodes")
    name = models.CharField(max_length=253)
    pool = models.CharField(max_length=128, blank=True)
    gpu_model = models.CharField(max_length=64, blank=True)
    gpu_count = models.PositiveSmallIntegerField(default=0)
    state = models.CharField(max_length=16, choices=NodeState.choices, default=NodeState.READY)

    class Meta:
        ordering = ["cluster", "name"]
        constraints = [
            models.UniqueConstraint(fields=["cluster", "name"], name="node_unique_per_cluster")
        ]
        indexes = [models.Index(fields=["cluster", "pool"], name="node_cluster_pool")]

    def __str__(self) -> str:
        return f"{self.cluster}/{self.name}"


class Gpu(models.Model):
    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="gpus")
    index = models.PositiveSmallIntegerField()
    uuid = models.CharField(max_length=64, blank=True)
    health = models.CharField(max_length=16, choices=GpuHealth.choices, default=GpuHealth.OK)

    class Meta:
        ordering = ["node", "index"]
        constraints = [
            models.UniqueConstraint(fields=["node", "index"], name="gpu_unique_index_per_node")
        ]

    def __str__(self) -> str:
        return f"{self.node}/{self.index}"


class Tenant(models.Model):
    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="tenants")
    name = models.CharField(max_length=128)
    managers = models.ManyToManyField(
        settings.AUTH_USER_MODEL,
        blank=True,
        related_name="managed_tenants",
        help_text="Users with the manager role who see this tenant's reports, jobs and findings.",
    )

    class Meta:
        ordering = ["cluster", "name"]
        constraints = [
            models.UniqueConstraint(fields=["cluster", "name"], name="tenant_unique_per_cluster")
        ]

    def __str__(self) -> str:
        return f"{self.cluster}/{self.name}"


class Queue(models.Model):
    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="queues")
    tenant = models.ForeignKey(
        Tenant, on_delete=models.SET_NULL, null=True, blank=True, related_name="queues"
    )
    name = models.CharField(max_length=128)
    weight = models.PositiveIntegerField(default=1)
    deserved_gpus = models.PositiveIntegerField(null=True, blank=True)
    capability_gpus = models.PositiveIntegerField(null=True, blank=True)

    class Meta:
        ordering = ["cluster", "name"]
        constraints = [
            models.UniqueConstraint(fields=["cluster", "name"], name="queue_unique_per_cluster")
        ]

    def __str__(self) -> str:
        return f"{self.cluster}/{self.name}"


class Job(models.Model):
    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="jobs")
    external_id = models.CharField(max_length=255, help_text="The scheduler's id of the job.")
    name = models.CharField(max_length=255, blank=True)
    tenant = models.ForeignKey(
        Tenant, on_delete=models.SET_NULL, null=True, blank=True, related_name="jobs"
    )
    queue = models.ForeignKey(
        Queue, on_delete=models.SET_NULL, null=True, blank=True, related_name="jobs"
    )
    pool = models.CharField(max_length=128, blank=True)
    kind = models.CharField(max_length=32, blank=True, help_text="training, inference, ...")
    priority = models.IntegerField(default=0)
    state = models.CharField(max_length=16, choices=JobState.choices, default=JobState.PENDING)
    submitted_at = models.DateTimeField()
    started_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)
    pods = models.PositiveIntegerField(default=1)
    gpus_per_pod = models.PositiveIntegerField(default=1)
    gang = models.BooleanField(default=False)
    min_member = models.PositiveIntegerField(default=1)
    preemptions = models.PositiveIntegerField(default=0)
    unlisted_since = models.DateTimeField(
        null=True,
        blank=True,
        help_text="Snapshot time from which the scheduler no longer listed this unfinished job.",
    )

    class Meta:
        ordering = ["cluster", "-submitted_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["cluster", "external_id"], name="job_unique_external_id_per_cluster"
            )
        ]
        indexes = [
            models.Index(fields=["cluster", "state"], name="job_cluster_state"),
            models.Index(fields=["cluster", "tenant", "state"], name="job_cluster_tenant_state"),
            models.Index(fields=["cluster", "started_at"], name="job_cluster_started"),
        ]

    def __str__(self) -> str:
        return f"{self.cluster}/{self.external_id}"

    @property
    def gpus(self) -> int:
        """GPUs the whole job asks for."""
        return self.pods * self.gpus_per_pod


class SchedulerEvent(models.Model):
    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="events")
    time = models.DateTimeField()
    kind = models.CharField(max_length=32, choices=SchedulerEventKind.choices)
    job_external_id = models.CharField(max_length=255, blank=True)
    node = models.CharField(max_length=253, blank=True)
    reason = models.CharField(max_length=255, blank=True, help_text="The scheduler's own reason.")
    message = models.TextField(blank=True)
    dedup_key = models.CharField(
        max_length=255,
        blank=True,
        help_text="Object uid + resourceVersion, or the scheduler's own event id: one row each.",
    )

    class Meta:
        ordering = ["-time", "-id"]
        indexes = [models.Index(fields=["cluster", "time"], name="event_cluster_time")]
        constraints = [
            models.UniqueConstraint(
                fields=["cluster", "dedup_key"],
                condition=~models.Q(dedup_key=""),
                name="event_unique_dedup_key",
            )
        ]

    def __str__(self) -> str:
        return f"{self.cluster} {self.time:%Y-%m-%dT%H:%M:%SZ} {self.kind}"


class SnapshotDocumentError(ValueError):
    """A snapshot document lacks a field that storing it needs, or has it in the wrong form."""


def _document_as_of(document: dict[str, Any]) -> datetime:
    raw = document.get("as_of")
    if raw is None:
        raise SnapshotDocumentError("snapshot document has no 'as_of'")
    try:
        as_of = datetime.fromisoformat(raw)
    except (TypeError, ValueError):
        raise SnapshotDocumentError(f"snapshot 'as_of' is not an RFC 3339 time: {raw!r}") from None
    if as_of.tzinfo is None:
        raise SnapshotDocumentError(f"snapshot 'as_of' has no time zone: {raw!r}")
    return as_of


class Snapshot(models.Model):
    """One ``gpuobs.snapshot/v1`` document of a cluster, stored as zlib-compressed JSON."""

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="snapshots")
    as_of = models.DateTimeField()
    format = models.CharField(max_length=64, default=SNAPSHOT_FORMAT)
    document = models.BinaryField(help_text="zlib-compressed UTF-8 JSON")
    json_bytes = models.PositiveBigIntegerField(help_text="Size of the JSON before compression.")
    stored_bytes = models.PositiveBigIntegerField(help_text="Size of the compressed document.")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["cluster", "-as_of"]
        get_latest_by = "as_of"
        indexes = [models.Index(fields=["cluster", "-as_of"], name="snapshot_cluster_as_of")]

    def __str__(self) -> str:
        return f"{self.cluster} as of {self.as_of:%Y-%m-%dT%H:%M:%SZ}"

    @classmethod
    def store(cls, cluster: Cluster, document: dict[str, Any]) -> Snapshot:
        """Compress and save a snapshot document; its ``as_of`` and ``format`` become columns."""
        as_of = _document_as_of(document)
        encoded = json.dumps(document, separators=(",", ":"), ensure_ascii=False).encode()
        compressed = zlib.compress(encoded, level=6)
        return cls.objects.create(
            cluster=cluster,
            as_of=as_of,
            format=document.get("format", SNAPSHOT_FORMAT),
            document=compressed,
            json_bytes=len(encoded),
            stored_bytes=len(compressed),
        )

    def load_document(self) -> dict[str, Any]:
        """The document as it was stored."""
        return json.loads(zlib.decompress(bytes(self.document)))


class ClusterCycle(models.Model):
    """One diagnosis cycle of a cluster: the pre-computed rollup that pages and reports read.

    ``accounting`` is the GPU-hour breakdown (``diagnosis.accounting.Accounting.as_dict()``) of
    the cycle's snapshot; the utilization columns repeat its cluster figures for cheap trends.
    A cycle whose collection failed has ``ok=False`` and an ``error``; the last good one stays.
    """

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="cycles")
    as_of = models.DateTimeField(help_text="Snapshot time the cycle judged (null if none).")
    ran_at = models.DateTimeField(default=timezone.now)
    seconds = models.FloatField(default=0, help_text="Wall time of the whole cycle.")
    ok = models.BooleanField(default=True)
    error = models.TextField(blank=True)
    gpus = models.PositiveIntegerField(default=0)
    allocated_gpus = models.PositiveIntegerField(default=0)
    allocation_utilization = models.FloatField(null=True, blank=True)
    activity_utilization = models.FloatField(null=True, blank=True)
    accounting = models.JSONField(default=dict, blank=True)
    findings = models.JSONField(
        default=dict, blank=True, help_text="Counts of this cycle's hits: rule -> severity -> n."
    )
    rule_errors = models.JSONField(default=list, blank=True)
    not_judged = models.JSONField(default=dict, blank=True)
    data_age_s = models.FloatField(null=True, blank=True, help_text="ran_at - as_of, seconds.")
    coverage = models.FloatField(
        null=True, blank=True, help_text="GPUs the metrics source answered for ÷ GPUs expected."
    )
    source = models.JSONField(
        default=dict, blank=True, help_text="What the sources reported: queries, bytes, warnings."
    )
    recommendations = models.JSONField(
        default=dict,
        blank=True,
        help_text="What the recommend step did: proposed, kept, superseded, verified, seconds.",
    )

    class Meta:
        ordering = ["cluster", "-as_of"]
        get_latest_by = "as_of"
        indexes = [models.Index(fields=["cluster", "-as_of"], name="cycle_cluster_as_of")]

    def __str__(self) -> str:
        return f"{self.cluster} cycle as of {self.as_of:%Y-%m-%dT%H:%M:%SZ}"


class Finding(models.Model):
    """What a rule reported about one subject, kept across cycles (pending → firing → resolved)."""

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="findings")
    rule_id = models.CharField(max_length=64)
    subject = models.TextField(help_text="cluster:, pool:, node:, gpu:, job:, jobs: or tenant:")
    fingerprint = models.CharField(
        max_length=64, unique=True, editable=False, help_text="Derived from cluster, rule, subject."
    )
    state = models.CharField(
        max_length=16, choices=FindingState.choices, default=FindingState.PENDING
    )
    severity = models.CharField(max_length=16, choices=Severity.choices, default=Severity.WARNING)
    summary = models.TextField(blank=True)
    evidence = models.JSONField(default=dict, blank=True)
    first_seen = models.DateTimeField(help_text="Snapshot time when the rule first reported it.")
    active_since = models.DateTimeField(
        null=True, blank=True, help_text="Start of the current episode (the latest reopening)."
    )
    last_seen = models.DateTimeField(help_text="Latest snapshot time at which it was evaluated.")
    last_hit_at = models.DateTimeField(
        null=True, blank=True, help_text="Latest snapshot time at which the rule reported it."
    )
    firing_since = models.DateTimeField(null=True, blank=True)
    resolved_at = models.DateTimeField(null=True, blank=True)
    tenant = models.ForeignKey(
        Tenant,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="findings",
        help_text="The one tenant the finding concerns (its job's, its jobs', its GPU's jobs'); "
        "empty when it concerns none or several. Managers see their tenants' findings only.",
    )

    class Meta:
        ordering = ["-first_seen", "-id"]
        indexes = [
            models.Index(fields=["cluster", "state"], name="finding_cluster_state"),
            models.Index(fields=["cluster", "rule_id"], name="finding_cluster_rule"),
            # The cycle tags its new findings with their tenant (actions.tag_finding_tenants):
            # a small index over the untagged ones finds them without scanning the rest.
            models.Index(
                fields=["cluster", "first_seen"],
                condition=models.Q(tenant__isnull=True),
                name="finding_untagged_first_seen",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.rule_id} {self.subject} ({self.state})"

    def save(self, *args: Any, **kwargs: Any) -> None:
        self.fingerprint = self.fingerprint_of(self.cluster_id, self.rule_id, self.subject)
        super().save(*args, **kwargs)

    @staticmethod
    def fingerprint_of(cluster_id: int, rule_id: str, subject: str) -> str:
        """The fingerprint of (cluster, rule, subject); use it for bulk upserts too."""
        return hashlib.sha256(f"{cluster_id}\x1f{rule_id}\x1f{subject}".encode()).hexdigest()


class FindingEvent(models.Model):
    """One state transition of a finding."""

    finding = models.ForeignKey(Finding, on_delete=models.CASCADE, related_name="events")
    time = models.DateTimeField(default=timezone.now)
    from_state = models.CharField(max_length=16, choices=FindingState.choices, blank=True)
    to_state = models.CharField(max_length=16, choices=FindingState.choices)
    snapshot_as_of = models.DateTimeField(null=True, blank=True)
    note = models.TextField(blank=True)

    class Meta:
        ordering = ["finding", "time", "id"]

    def __str__(self) -> str:
        return f"{self.finding}: {self.from_state or 'new'} → {self.to_state}"


class RuleOverride(models.Model):
    """A per-cluster value for one threshold of one rule."""

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="rule_overrides")
    rule_id = models.CharField(max_length=64)
    threshold = models.CharField(max_length=64)
    value = models.JSONField()
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["cluster", "rule_id", "threshold"]
        constraints = [
            models.UniqueConstraint(
                fields=["cluster", "rule_id", "threshold"], name="rule_override_unique"
            )
        ]

    def __str__(self) -> str:
        return f"{self.cluster}: {self.rule_id}.{self.threshold} = {self.value!r}"

    def clean(self) -> None:
        """Refuse a rule or threshold that does not exist, or a value the threshold can't take."""
        from django.core.exceptions import ValidationError

        from diagnosis.rules.base import ThresholdError
        from diagnosis.rules.registry import all_rules

        rule = all_rules().get(self.rule_id)
        if rule is None:
            known = ", ".join(all_rules())
            raise ValidationError({"rule_id": f"unknown rule {self.rule_id!r} (known: {known})"})
        try:
            self.value = rule.threshold(self.threshold).parse(self.value)
        except ThresholdError as exc:
            field = "value" if self.threshold in rule.defaults() else "threshold"
            raise ValidationError({field: str(exc)}) from None


class Recommendation(models.Model):
    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="recommendations")
    kind = models.CharField(max_length=32, choices=RecommendationKind.choices)
    target = models.CharField(max_length=255, help_text="pool:, queue:, node: or job:")
    change = models.JSONField(default=dict, blank=True)
    state = models.CharField(
        max_length=16, choices=RecommendationState.choices, default=RecommendationState.PROPOSED
    )
    impact = models.JSONField(default=dict, blank=True, help_text="Simulated effect of the change.")
    motivating_findings = models.ManyToManyField(
        Finding, blank=True, related_name="recommendations"
    )
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
        help_text="Empty when gpuobs proposed it.",
    )
    approved_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    # The workflow (DESIGN.md section 8.2; diagnosis/workflow.py, docs/recommendations.md).
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
        help_text="Who asked for the change to be made; the approver must be someone else.",
    )
    requested_at = models.DateTimeField(null=True, blank=True)
    approved_at = models.DateTimeField(null=True, blank=True)
    expires_at = models.DateTimeField(
        null=True, blank=True, help_text="When the approval lapses if the change is not applied."
    )
    applied_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
        help_text="Who asked for the approved change to be applied.",
    )
    applied_at = models.DateTimeField(null=True, blank=True)
    apply_key = models.CharField(
        max_length=64,
        blank=True,
        editable=False,
        help_text="Idempotency key of the pending apply: a redelivered task applies nothing.",
    )
    apply_claimed_at = models.DateTimeField(
        null=True, blank=True, editable=False, help_text="When a worker took the apply."
    )
    dry_run_result = models.JSONField(
        default=dict, blank=True, help_text="The latest dry run: command, before, after, message."
    )
    apply_result = models.JSONField(
        default=dict, blank=True, help_text="The write: command, before, after, scheduler's answer."
    )
    verification = models.JSONField(
        default=dict, blank=True, help_text="Baseline and the cycles observed since applying."
    )
    rollback_of = models.ForeignKey(
        "self",
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="rollbacks",
        help_text="The applied recommendation this one undoes.",
    )
    status_message = models.TextField(
        blank=True, help_text="Why it is in its state (a changed target, an error, a dry run)."
    )
    proposed_as_of = models.DateTimeField(
        null=True, blank=True, help_text="Snapshot time of the cycle that proposed it."
    )
    last_proposed_as_of = models.DateTimeField(
        null=True, blank=True, help_text="Snapshot time of the latest cycle that proposed it."
    )

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["cluster", "state"], name="recommendation_cluster_state")]
        constraints = [
            models.UniqueConstraint(
                fields=["cluster", "kind", "target"],
                condition=models.Q(state__in=["proposed", "approved", "applying"]),
                name="recommendation_one_open_per_target",
            )
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.target} ({self.state})"


class AuditEntryImmutableError(Exception):
    """Raised on any attempt to change or delete an audit entry."""


class AuditEntryQuerySet(models.QuerySet):
    def update(self, **kwargs: Any) -> int:
        raise AuditEntryImmutableError("audit entries are append-only")

    def delete(self) -> tuple[int, dict[str, int]]:
        raise AuditEntryImmutableError("audit entries are append-only")


class AuditEntry(models.Model):
    """Append-only record of a change made by a person or by gpuobs (before and after)."""

    actor = models.CharField(max_length=150, help_text="User name, or system:<what> for gpuobs.")
    action = models.CharField(max_length=64)
    target = models.CharField(max_length=255, blank=True)
    before = models.JSONField(null=True, blank=True)
    after = models.JSONField(null=True, blank=True)
    time = models.DateTimeField(default=timezone.now)
    # PROTECT: the trail outlives nothing it points at; disable a cluster rather than delete it.
    cluster = models.ForeignKey(
        Cluster, on_delete=models.PROTECT, null=True, blank=True, related_name="audit_entries"
    )
    recommendation = models.ForeignKey(
        Recommendation,
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="audit_entries",
    )

    objects = AuditEntryQuerySet.as_manager()

    class Meta:
        ordering = ["-time", "-id"]
        verbose_name_plural = "audit entries"
        indexes = [models.Index(fields=["cluster", "time"], name="audit_cluster_time")]

    def __str__(self) -> str:
        return f"{self.time:%Y-%m-%dT%H:%M:%SZ} {self.actor} {self.action} {self.target}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        if not self._state.adding:
            raise AuditEntryImmutableError("audit entries are append-only")
        super().save(*args, **kwargs)

    def delete(self, *args: Any, **kwargs: Any) -> tuple[int, dict[str, int]]:
        raise AuditEntryImmutableError("audit entries are append-only")


class Incident(models.Model):
    """A GPU fault (typically an Xid) that on-call must act on."""

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="incidents")
    node = models.CharField(max_length=253)
    gpu_index = models.PositiveSmallIntegerField(null=True, blank=True)
    xid_code = models.PositiveIntegerField(null=True, blank=True)
    state = models.CharField(
        max_length=16, choices=IncidentState.choices, default=IncidentState.OPEN
    )
    fingerprint = models.CharField(max_length=128, unique=True)
    summary = models.TextField(blank=True)
    details = models.JSONField(
        default=dict,
        blank=True,
        help_text="Catalog meaning and action, jobs and tenants hit, the source alert's labels.",
    )
    source = models.CharField(max_length=32, blank=True, help_text="alertmanager, rule:xid, ...")
    opened_at = models.DateTimeField(default=timezone.now)
    acknowledged_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
    )
    acknowledged_at = models.DateTimeField(null=True, blank=True)
    resolved_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-opened_at", "-id"]
        indexes = [models.Index(fields=["cluster", "state"], name="incident_cluster_state")]

    def __str__(self) -> str:
        where = self.node if self.gpu_index is None else f"{self.node}/{self.gpu_index}"
        xid = f"Xid {self.xid_code} " if self.xid_code is not None else ""
        return f"{xid}{where} ({self.state})"


# -- fairness rollups and report subscriptions (DESIGN.md section 7; docs/fairness.md) ----------


class RollupFigures(models.Model):
    """GPU-seconds of one scope over the interval one diagnosis cycle stands for (the time since
    the previous good cycle's snapshot, at most the snapshot's window). Reports over any period
    sum these; they never read raw metrics. Columns: ``diagnosis.fairness.HeldFigures``."""

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="+")
    cycle = models.ForeignKey(ClusterCycle, on_delete=models.CASCADE, related_name="+")
    as_of = models.DateTimeField()
    interval_s = models.FloatField()
    allocated_gpu_s = models.FloatField(default=0)
    demanded_gpu_s = models.FloatField(default=0)
    used_gpu_s = models.FloatField(default=0, help_text="util-weighted GPU-seconds")
    util_known_gpu_s = models.FloatField(default=0)
    unavailable_gpu_s = models.FloatField(default=0)
    partial_gang_gpu_s = models.FloatField(default=0)
    idle_gpu_s = models.FloatField(default=0)
    data_starved_gpu_s = models.FloatField(default=0)
    busy_gpu_s = models.FloatField(default=0)
    productive_gpu_s = models.FloatField(default=0, help_text="MFU-weighted busy GPU-seconds")
    mfu_known_gpu_s = models.FloatField(default=0)
    starving_job_s = models.FloatField(default=0, help_text="starving jobs × seconds")
    preemptions = models.PositiveIntegerField(default=0)

    class Meta:
        abstract = True


class TenantRollup(RollupFigures):
    """One tenant's figures in one cycle (``tenant`` empty for jobs of no known tenant)."""

    tenant = models.ForeignKey(
        Tenant, on_delete=models.SET_NULL, null=True, blank=True, related_name="rollups"
    )
    tenant_name = models.CharField(max_length=128)
    entitlement_s = models.FloatField(default=0, help_text="entitlement share × seconds")
    fair_gpu_s = models.FloatField(default=0, help_text="water-filled fair GPUs × seconds")

    class Meta:
        ordering = ["cluster", "as_of", "tenant_name"]
        indexes = [models.Index(fields=["cluster", "as_of"], name="tenantrollup_cluster_as_of")]

    def __str__(self) -> str:
        return f"{self.cluster_id}/{self.tenant_name} as of {self.as_of:%Y-%m-%dT%H:%M:%SZ}"


class PoolRollup(RollupFigures):
    """One pool's figures in one cycle; ``pool`` "" is the whole cluster."""

    pool = models.CharField(max_length=128, blank=True)
    gpu_s = models.FloatField(default=0, help_text="every GPU × seconds")
    free_fragmented_gpu_s = models.FloatField(default=0)
    free_demand_gpu_s = models.FloatField(default=0)
    free_no_demand_gpu_s = models.FloatField(default=0)
    entitlement_basis = models.CharField(
        max_length=16, blank=True, help_text="deserved or weight (the whole-cluster row)"
    )

    class Meta:
        ordering = ["cluster", "as_of", "pool"]
        indexes = [
            models.Index(fields=["cluster", "pool", "as_of"], name="poolrollup_cluster_pool_as_of")
        ]

    def __str__(self) -> str:
        return f"{self.cluster_id}/{self.pool or '(cluster)'} as of {self.as_of:%Y-%m-%dT%H:%M:%SZ}"


class ReportFrequency(models.TextChoices):
    WEEKLY = "weekly", "Weekly (the last 7 days)"
    MONTHLY = "monthly", "Monthly (the last 30 days)"


class ReportSubscription(models.Model):
    """A user's standing order for a cluster's fairness report as a PDF by email."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="report_subscriptions"
    )
    cluster = models.ForeignKey(
        Cluster, on_delete=models.CASCADE, related_name="report_subscriptions"
    )
    frequency = models.CharField(max_length=16, choices=ReportFrequency.choices)
    last_sent_at = models.DateTimeField(null=True, blank=True)
    last_error = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["cluster", "user"]
        constraints = [
            models.UniqueConstraint(
                fields=["user", "cluster"], name="report_subscription_unique_per_user_cluster"
            )
        ]

    def __str__(self) -> str:
        return f"{self.user} · {self.cluster} · {self.frequency}"
