"""What senders post, kept as it arrived until a worker has read it (docs/operations.md,
"Inbound webhooks"): the receiver validates, stores one row and answers 202; the expensive part
(the jobs a fault hit, incident windows) runs in a task, never inside the request."""

from __future__ import annotations

from django.db import models
from django.utils import timezone

from diagnosis.models.fields import user_ref


class InboundState(models.TextChoices):
    PENDING = "pending", "pending"
    DONE = "done", "done"
    FAILED = "failed", "failed"


class InboundAlertBatch(models.Model):
    """One Alertmanager webhook body (version 4), validated and stored by the receiver, turned
    into incidents by ``diagnosis.tasks.record_alert_batch``. ``results`` says what each alert
    did (``opened``, ``updated``, ``ignored``, ``rejected`` ...) once it is ``done``."""

    sender = user_ref("The user (token) that posted it: the clusters it may write.")
    cluster_name = models.CharField(max_length=253, blank=True, help_text="?cluster= of the URL")
    sender_clusters = models.JSONField(
        default=list,
        blank=True,
        help_text="The ids of the clusters the sender's token could write alerts to when it posted",
    )
    payload = models.JSONField()
    alerts = models.PositiveIntegerField(default=0)
    received_at = models.DateTimeField(default=timezone.now)
    state = models.CharField(
        max_length=16, choices=InboundState.choices, default=InboundState.PENDING
    )
    attempts = models.PositiveSmallIntegerField(default=0)
    claimed_at = models.DateTimeField(null=True, blank=True)
    processed_at = models.DateTimeField(null=True, blank=True)
    results = models.JSONField(default=list, blank=True)
    error = models.TextField(blank=True)

    class Meta:
        indexes = [models.Index(fields=["state", "received_at"], name="inbound_alert_pending")]

    def __str__(self) -> str:
        return f"alert batch {self.pk} ({self.alerts} alerts, {self.state})"
