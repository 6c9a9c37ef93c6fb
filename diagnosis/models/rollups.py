"""Per-cycle rollups the charts and fairness reports read, per pool and per tenant."""

from __future__ import annotations

from django.db import models

from diagnosis.models.cycles import ClusterCycle
from diagnosis.models.fields import optional_ref
from diagnosis.models.inventory import Cluster, Tenant


class RollupFigures(models.Model):
    """GPU-seconds of one scope over the interval one diagnosis cycle stands for (the time since
    the previous good cycle's snapshot, at most the snapshot's window). Reports over any period
    sum these; they never read raw metrics. Columns: ``diagnosis.core.fairness.HeldFigures``.
    Retention (``diagnosis.actions.upkeep.retention``) merges old rows into one per scope and
    hour."""

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="+")
    cycle = optional_ref(
        ClusterCycle,
        help_text="Empty once downsampled to an hour or once its cycle was pruned (retention).",
    )
    as_of = models.DateTimeField()
    interval_s = models.FloatField()
    allocated_gpu_s = models.FloatField(default=0)
    demanded_gpu_s = models.FloatField(default=0)
    used_gpu_s = models.FloatField(default=0, help_text="util-weighted GPU-seconds")
    util_known_gpu_s = models.FloatField(default=0)
    unavailable_gpu_s = models.FloatField(default=0)
    partial_gang_gpu_s = models.FloatField(default=0)
    hung_gpu_s = models.FloatField(default=0, help_text="held by a hung collective")
    idle_gpu_s = models.FloatField(default=0)
    data_starved_gpu_s = models.FloatField(default=0)
    busy_gpu_s = models.FloatField(default=0)
    productive_gpu_s = models.FloatField(default=0, help_text="MFU-weighted busy GPU-seconds")
    mfu_known_gpu_s = models.FloatField(default=0)
    starving_job_s = models.FloatField(default=0, help_text="starving jobs × seconds")
    preemptions = models.PositiveIntegerField(default=0)

    class Meta:
        abstract = True


class TenantFigures(models.Model):
    """A tenant's own columns besides :class:`RollupFigures`."""

    tenant_name = models.CharField(max_length=128)
    entitlement_s = models.FloatField(default=0, help_text="entitlement share × seconds")
    fair_gpu_s = models.FloatField(default=0, help_text="water-filled fair GPUs × seconds")

    class Meta:
        abstract = True


class PoolFigures(models.Model):
    """A pool's own columns besides :class:`RollupFigures`."""

    pool = models.CharField(max_length=128, blank=True)
    gpu_s = models.FloatField(default=0, help_text="every GPU × seconds")
    free_fragmented_gpu_s = models.FloatField(default=0)
    free_demand_gpu_s = models.FloatField(default=0)
    free_no_demand_gpu_s = models.FloatField(default=0)
    entitlement_basis = models.CharField(
        max_length=16, blank=True, help_text="deserved or weight (the whole-cluster row)"
    )

    class Meta:
        abstract = True


class TenantRollup(RollupFigures, TenantFigures):
    """One tenant's figures in one cycle (``tenant`` empty for jobs of no known tenant)."""

    tenant = optional_ref(Tenant, related_name="rollups")

    class Meta:
        ordering = ["cluster", "as_of", "tenant_name"]
        indexes = [models.Index(fields=["cluster", "as_of"], name="tenantrollup_cluster_as_of")]

    def __str__(self) -> str:
        return f"{self.cluster_id}/{self.tenant_name} as of {self.as_of:%Y-%m-%dT%H:%M:%SZ}"


class PoolRollup(RollupFigures, PoolFigures):
    """One pool's figures in one cycle; ``pool`` "" is the whole cluster."""

    class Meta:
        ordering = ["cluster", "as_of", "pool"]
        indexes = [
            models.Index(fields=["cluster", "pool", "as_of"], name="poolrollup_cluster_pool_as_of")
        ]

    def __str__(self) -> str:
        return f"{self.cluster_id}/{self.pool or '(cluster)'} as of {self.as_of:%Y-%m-%dT%H:%M:%SZ}"


class HourFigures(RollupFigures):
    """The cycles of one clock hour summed (issue #17): ``as_of`` is the hour's start, ``cycle``
    always empty, ``cycles`` how many cycles were added. Written at cycle time by
    ``diagnosis.actions.records.rollups_hourly`` (each cycle adds its rows), so a report over whole
    hours
    reads one row per scope and hour instead of one per cycle."""

    cycles = models.PositiveIntegerField(default=0)

    class Meta:
        abstract = True


class TenantRollupHour(HourFigures, TenantFigures):
    """One tenant's :class:`TenantRollup` rows of one hour, summed."""

    class Meta:
        ordering = ["cluster", "as_of", "tenant_name"]
        constraints = [
            models.UniqueConstraint(
                fields=["cluster", "as_of", "tenant_name"], name="tenantrolluphour_one_per_hour"
            )
        ]

    def __str__(self) -> str:
        return f"{self.cluster_id}/{self.tenant_name} hour {self.as_of:%Y-%m-%dT%H}"


class PoolRollupHour(HourFigures, PoolFigures):
    """One pool's :class:`PoolRollup` rows of one hour (and entitlement basis), summed."""

    class Meta:
        ordering = ["cluster", "as_of", "pool"]
        constraints = [
            models.UniqueConstraint(
                fields=["cluster", "as_of", "pool", "entitlement_basis"],
                name="poolrolluphour_one_per_hour",
            )
        ]

    def __str__(self) -> str:
        return f"{self.cluster_id}/{self.pool or '(cluster)'} hour {self.as_of:%Y-%m-%dT%H}"


class AccountingSlice(models.Model):
    """One good cycle's share of the overview's GPU-hour waterfall, small enough that the page
    reads an hour of them instead of an hour of accounting documents (issue #17): the buckets'
    GPUs, the window, the coverage figures, and of the finding references behind each bucket only
    those *new* since the previous good cycle (by snapshot time). The first cycle of a period
    brings its whole list (read from its ``ClusterCycle.accounting`` once); each later slice adds
    what appeared, so the union, in first-seen order, is exactly the documents' union. Written by
    ``diagnosis.actions.records.rollups_hourly``; goes with its cycle (retention)."""

    cycle = models.OneToOneField(
        ClusterCycle, on_delete=models.CASCADE, primary_key=True, related_name="accounting_slice"
    )
    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="+")
    as_of = models.DateTimeField()
    window_s = models.FloatField(null=True, blank=True)
    buckets = models.JSONField(default=dict, blank=True, help_text="bucket -> {gpus: n}")
    new_findings = models.JSONField(
        default=dict,
        blank=True,
        help_text="bucket -> refs new since the previous good cycle",
    )
    productive_gpus = models.FloatField(null=True, blank=True)
    activity_coverage = models.FloatField(null=True, blank=True)
    mfu_coverage = models.FloatField(null=True, blank=True)

    class Meta:
        ordering = ["cluster", "as_of"]
        indexes = [models.Index(fields=["cluster", "as_of"], name="accountingslice_cluster_as_of")]

    def __str__(self) -> str:
        return f"{self.cluster_id} slice as of {self.as_of:%Y-%m-%dT%H:%M:%SZ}"
