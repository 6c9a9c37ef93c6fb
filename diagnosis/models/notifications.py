"""What gpuobs sends out (docs/architecture.md#one-cycle, step 5 "notify"): the delivery state of
each outbound channel of a cluster, the owner-notice policy of a cluster, and the log of notices
sent to job owners (at most one per job, rule and day).
"""

from __future__ import annotations

from django.db import models

from diagnosis.models.fields import optional_ref
from diagnosis.models.findings import Finding
from diagnosis.models.inventory import Cluster


class NotifyChannel(models.TextChoices):
    ALERTMANAGER = "alertmanager", "Alertmanager (findings and incidents)"
    OWNER_EMAIL = "owner-email", "Email to job owners"
    OWNER_ALERTMANAGER = "owner-alertmanager", "Alertmanager alert with an owner label"


class DeliveryState(models.Model):
    """How one outbound channel of a cluster is doing: counters for ``/metrics`` and the cluster
    page, the last success (the resend cursor: everything resolved since is sent again), the
    last error."""

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="deliveries")
    channel = models.CharField(max_length=32, choices=NotifyChannel.choices)
    attempts_total = models.PositiveBigIntegerField(default=0, help_text="HTTP requests made")
    deliveries_total = models.PositiveBigIntegerField(default=0, help_text="successful sends")
    failures_total = models.PositiveBigIntegerField(default=0, help_text="sends that gave up")
    alerts_sent_total = models.PositiveBigIntegerField(default=0)
    consecutive_failures = models.PositiveIntegerField(default=0)
    pending = models.PositiveIntegerField(
        default=0, help_text="Alerts of the last send that did not get through."
    )
    last_attempt_at = models.DateTimeField(null=True, blank=True)
    last_success_at = models.DateTimeField(null=True, blank=True)
    last_error = models.TextField(blank=True)

    class Meta:
        ordering = ["cluster", "channel"]
        constraints = [
            models.UniqueConstraint(fields=["cluster", "channel"], name="delivery_state_unique")
        ]

    def __str__(self) -> str:
        return f"{self.cluster} → {self.channel}"


class OwnerNoticePolicy(models.Model):
    """Whether and how a cluster's job owners get notices about their jobs' findings. Off by
    default (no row, or ``enabled`` false)."""

    cluster = models.OneToOneField(
        Cluster, on_delete=models.CASCADE, related_name="owner_notice_policy"
    )
    enabled = models.BooleanField(default=False)
    rules = models.JSONField(
        default=list,
        blank=True,
        help_text="Rule ids that notify owners; empty: idle-allocation, idle-held, low-mfu, "
        "data-starvation, hung-collective.",
    )
    grace_s = models.PositiveIntegerField(
        default=3600, help_text="A finding must have fired this long before its owner is told."
    )
    channel = models.CharField(
        max_length=32,
        choices=[c for c in NotifyChannel.choices if c[0] != NotifyChannel.ALERTMANAGER],
        default=NotifyChannel.OWNER_EMAIL,
    )
    owners = models.JSONField(
        default=dict,
        blank=True,
        help_text="The scheduler's owner name (Slurm account or user, Kubernetes namespace) -> "
        'email address, e.g. {"team-a": "alice@example.org"}.',
    )
    email_domain = models.CharField(
        max_length=253,
        blank=True,
        help_text="Owners not in the map get <owner>@<domain>; empty: they get no notice.",
    )

    class Meta:
        verbose_name_plural = "owner notice policies"

    def __str__(self) -> str:
        return f"{self.cluster} owner notices ({'on' if self.enabled else 'off'})"


class OwnerNotice(models.Model):
    """One notice sent to a job's owner: at most one per (cluster, job, rule, day)."""

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="owner_notices")
    finding = optional_ref(Finding, related_name="owner_notices")
    job_external_id = models.CharField(max_length=255)
    rule_id = models.CharField(max_length=64)
    day = models.DateField(help_text="UTC day the notice was sent on.")
    sent_at = models.DateTimeField()
    channel = models.CharField(max_length=32, choices=NotifyChannel.choices)
    owner = models.CharField(max_length=255)
    recipient = models.CharField(max_length=320, blank=True)
    subject = models.CharField(max_length=255)
    body = models.TextField()

    class Meta:
        ordering = ["-sent_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["cluster", "job_external_id", "rule_id", "day"],
                name="owner_notice_once_per_job_rule_day",
            )
        ]

    def __str__(self) -> str:
        return f"{self.rule_id} {self.job_external_id} → {self.recipient or self.owner}"
