"""Incidents: what on-call works in (an Xid or GPU alert on a GPU, per episode), and each
incident's history (state changes with who and when, notes, drains, evictions)."""

from __future__ import annotations

from django.db import models
from django.utils import timezone

from diagnosis.choices import (
    IncidentState,
)
from diagnosis.models.fields import optional_ref, user_ref
from diagnosis.models.findings import Finding
from diagnosis.models.inventory import Cluster
from diagnosis.models.recommendations import Recommendation


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
    acknowledged_by = user_ref()
    acknowledged_at = models.DateTimeField(null=True, blank=True)
    resolved_at = models.DateTimeField(null=True, blank=True)
    resolved_by = user_ref("Empty when gpuobs resolved it (healthy period, or the alert resolved).")
    healthy_since = models.DateTimeField(
        null=True,
        blank=True,
        help_text="Snapshot time from which the GPU was healthy and its node not cordoned.",
    )
    finding = optional_ref(
        Finding,
        related_name="incidents",
        help_text="The xid finding of the GPU, where the rule reported it.",
    )
    drain = optional_ref(
        Recommendation,
        related_name="incidents",
        help_text="The drain-node recommendation on-call started from this incident.",
    )

    class Meta:
        ordering = ["-opened_at", "-id"]
        indexes = [models.Index(fields=["cluster", "state"], name="incident_cluster_state")]

    def __str__(self) -> str:
        where = self.node if self.gpu_index is None else f"{self.node}/{self.gpu_index}"
        xid = f"Xid {self.xid_code} " if self.xid_code is not None else ""
        return f"{xid}{where} ({self.state})"


class IncidentEvent(models.Model):
    """One entry of an incident's history: a state change (with who), a note, an Xid, a health
    change, a drain or the jobs it evicted. Append-only, like the audit trail."""

    incident = models.ForeignKey(Incident, on_delete=models.CASCADE, related_name="history")
    time = models.DateTimeField(default=timezone.now)
    actor = models.CharField(max_length=150, help_text="User name, or system:<what> for gpuobs.")
    kind = models.CharField(
        max_length=32, help_text="opened, acknowledged, mitigating, resolved, reopened, note, ..."
    )
    state_before = models.CharField(max_length=16, blank=True)
    state_after = models.CharField(max_length=16, blank=True)
    text = models.TextField(blank=True)
    details = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["time", "id"]
        indexes = [models.Index(fields=["incident", "time"], name="incident_event_time")]

    def __str__(self) -> str:
        return f"{self.time:%Y-%m-%dT%H:%M:%SZ} {self.actor} {self.kind}"
