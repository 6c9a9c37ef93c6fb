"""Incidents: what on-call works in (an Xid or GPU alert on a GPU, per episode)."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone

from diagnosis.choices import (
    IncidentState,
)
from diagnosis.models.inventory import Cluster


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
