"""Fairness-report e-mail subscriptions."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from diagnosis.models.inventory import Cluster


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
