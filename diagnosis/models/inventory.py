"""The inventory of a cluster as its scheduler reports it: the cluster and its data sources,
nodes, GPUs, tenants, queues, jobs and scheduler events.
"""

from __future__ import annotations

from collections.abc import Mapping

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models

from diagnosis.choices import (
    DataSourceStatus,
    GpuHealth,
    JobState,
    MetricsKind,
    NodeState,
    SchedulerEventKind,
    SchedulerKind,
)
from diagnosis.edge.errors import ConfigError, IntegrationError
from diagnosis.edge.schedulers.registry import adapter_spec
from diagnosis.edge.sources.registry import source_spec
from diagnosis.models.fields import optional_ref


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
    gpu_hour_prices = models.JSONField(
        default=dict,
        blank=True,
        help_text='Price per GPU-hour per GPU model ({"A100-SXM4-80GB": "2.10", "*": "1.00"}), '
        "over GPUOBS_GPU_HOUR_PRICES; empty: the setting's (docs/accounting.md, Cost).",
    )
    last_cycle_at = models.DateTimeField(null=True, blank=True)
    recommend_clock_at = models.DateTimeField(
        null=True,
        blank=True,
        editable=False,  # moved by the recommend step only: no form may write back a stale one
        help_text="Snapshot time of the latest recommend step: a recommendation proposed in "
        "every step since it was written reads it as its last_proposed_as_of (issue #35).",
    )
    status = models.CharField(
        max_length=16, choices=DataSourceStatus.choices, default=DataSourceStatus.UNKNOWN
    )
    status_message = models.TextField(
        blank=True, help_text="What failed, for every reader: the integration and how, not where."
    )
    status_detail = models.TextField(
        blank=True,
        editable=False,
        help_text="The full error of the last failed cycle (host, port, remote answer): "
        "admins only.",
    )
    status_changed_at = models.DateTimeField(null=True, blank=True)
    # The embedded mode's cycle lock (diagnosis.tasks.cluster_cycle_lock): with Redis the lock
    # lives in Redis and these stay empty.
    cycle_lease_until = models.DateTimeField(null=True, blank=True, editable=False)
    cycle_lease_holder = models.CharField(max_length=32, blank=True, editable=False)
    event_cursor = models.TextField(
        blank=True, editable=False, help_text="The scheduler adapter's cursor for read_events."
    )
    notify_pending_since = models.DateTimeField(
        null=True,
        blank=True,
        editable=False,
        help_text="A cycle's notify step not taken yet (its send refused): beat sends it again.",
    )
    size_hold = models.JSONField(
        default=dict,
        blank=True,
        editable=False,
        help_text="A drop in size not judged yet: the size, since when, for how many cycles, "
        "and a person's confirmation (diagnosis/actions/records/cluster_size.py).",
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def check_settings(self) -> None:
        """Check ``scheduler_config`` and ``metrics_config`` against the settings the cluster's
        adapter and source declare (one validator, ``ConfigSpec.parse``: when an admin saves the
        cluster and when a cycle starts). Raises :class:`ConfigError` naming every bad key, or
        the :class:`IntegrationError` of an integration that is unknown or cannot load."""
        for kind_field, config_field, spec_of in INTEGRATIONS:
            spec_of(getattr(self, kind_field)).config_spec().parse(getattr(self, config_field))

    def clean(self) -> None:
        """The integration settings are checked as a cycle checks them, each error on its field
        and naming the key (``scheduler_config.timeout_s: expected a number``)."""
        super().clean()
        errors: dict[str, list[str]] = {}
        for kind_field, config_field, spec_of in INTEGRATIONS:
            try:
                spec_of(getattr(self, kind_field)).config_spec().parse(getattr(self, config_field))
            except ConfigError as exc:
                raw = getattr(self, config_field)
                keyed = raw is None or isinstance(raw, Mapping)  # else: not an object at all
                errors[config_field] = [
                    f"{config_field}.{p}" if keyed else f"{config_field}: {p}" for p in exc.problems
                ]
            except IntegrationError as exc:
                errors[kind_field] = [str(exc)]
        if errors:
            raise ValidationError(errors)


# A cluster's integrations: the field naming each, the field holding its settings, and how the
# registry finds its declaration (diagnosis/edge/schedulers/registry.py, .../sources/registry.py).
INTEGRATIONS = (
    ("scheduler_kind", "scheduler_config", adapter_spec),
    ("metrics_kind", "metrics_config", source_spec),
)


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
    tenant = optional_ref(Tenant, related_name="queues")
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
    # the unique (cluster, external_id) and the (cluster, ...) indexes lead with it
    cluster = models.ForeignKey(
        Cluster, on_delete=models.CASCADE, related_name="jobs", db_index=False
    )
    external_id = models.CharField(max_length=255, help_text="The scheduler's id of the job.")
    name = models.CharField(max_length=255, blank=True)
    tenant = optional_ref(Tenant, related_name="jobs")
    queue = optional_ref(Queue, related_name="jobs")
    pool = models.CharField(max_length=128, blank=True)
    kind = models.CharField(max_length=32, blank=True, help_text="training, inference, ...")
    priority = models.BigIntegerField(default=0)  # Slurm priorities are uint32
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
            # the job list, newest first, paged (diagnosis/pages/jobs.py; issue 19)
            models.Index(fields=["cluster", "-submitted_at", "-id"], name="job_cluster_submitted"),
            # a name in a text a manager reads, looked up (diagnosis/access.py, TextScope)
            models.Index(fields=["cluster", "name"], name="job_cluster_name"),
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
