"""What senders post, kept as it arrived until a worker has read it (docs/operations.md,
"Inbound webhooks"): the receiver validates, stores one row and answers 202; the expensive part
(the jobs a fault hit, incident windows, events stored against what is known, a topology
replacing the node's) runs in a task, never inside the request."""

from __future__ import annotations

from django.db import models
from django.utils import timezone

from diagnosis.models.fields import user_ref


class InboundState(models.TextChoices):
    PENDING = "pending", "pending"
    DONE = "done", "done"
    FAILED = "failed", "failed"


class InboundBatch(models.Model):
    """What every stored post has: who sent it, the body, and where a worker is with it."""

    sender = user_ref("The user (token) that posted it: the clusters it may write.")
    payload = models.JSONField()
    received_at = models.DateTimeField(default=timezone.now)
    state = models.CharField(
        max_length=16, choices=InboundState.choices, default=InboundState.PENDING
    )
    attempts = models.PositiveSmallIntegerField(default=0)
    claimed_at = models.DateTimeField(null=True, blank=True)
    processed_at = models.DateTimeField(null=True, blank=True)
    error = models.TextField(blank=True)

    class Meta:
        abstract = True


class InboundAlertBatch(InboundBatch):
    """One Alertmanager webhook body (version 4), validated and stored by the receiver, turned
    into incidents by ``diagnosis.tasks.record_alert_batch``. ``results`` says what each alert
    did (``opened``, ``updated``, ``ignored``, ``rejected`` ...) once it is ``done``."""

    cluster_name = models.CharField(max_length=253, blank=True, help_text="?cluster= of the URL")
    sender_clusters = models.JSONField(
        default=list,
        blank=True,
        help_text="The ids of the clusters the sender's token could write alerts to when it posted",
    )
    alerts = models.PositiveIntegerField(default=0)
    results = models.JSONField(default=list, blank=True)

    class Meta:
        indexes = [models.Index(fields=["state", "received_at"], name="inbound_alert_pending")]

    def __str__(self) -> str:
        return f"alert batch {self.pk} ({self.alerts} alerts, {self.state})"


class InboundKind(models.TextChoices):
    EVENTS = "events", "scheduler events"
    TOPOLOGY = "topology", "node topology"


class InboundClusterBatch(InboundBatch):
    """One post to a cluster's scheduler-events or node-topology endpoint, validated by the
    receiver and stored by ``diagnosis.tasks.record_cluster_batch``. ``payload``: the
    normalized events (``{"events": [...]}``) or the node's ``nvidia-smi topo -m`` text
    (``{"text": ...}``); ``result`` what storing it did (events stored and duplicates; the
    topology's GPUs, or why it was refused)."""

    cluster = models.ForeignKey(
        "diagnosis.Cluster", on_delete=models.CASCADE, related_name="inbound_batches"
    )
    kind = models.CharField(max_length=16, choices=InboundKind.choices)
    node = models.CharField(max_length=253, blank=True, help_text="The topology's node")
    items = models.PositiveIntegerField(default=0, help_text="Events in the batch (topology: 1)")
    result = models.JSONField(default=dict, blank=True)

    class Meta:
        indexes = [models.Index(fields=["state", "received_at"], name="inbound_cluster_pending")]

    def __str__(self) -> str:
        return f"{self.kind} batch {self.pk} of {self.cluster_id} ({self.items}, {self.state})"
