"""Findings (one row per fingerprint), their lifecycle history and per-cluster rule overrides."""

from __future__ import annotations

import hashlib
from typing import Any

from django.core.exceptions import ValidationError
from django.db import models
from django.utils import timezone

from diagnosis.choices import (
    FindingState,
    Severity,
)
from diagnosis.models.fields import optional_ref
from diagnosis.models.inventory import Cluster, Tenant


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
    evidence_digest = models.CharField(
        max_length=32,
        blank=True,
        default="",
        editable=False,
        help_text="Digest of severity, summary and evidence as last written: a cycle rewrites the "
        "row only when it changes (actions.findings.record_findings).",
    )
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
    tenant = optional_ref(
        Tenant,
        related_name="findings",
        help_text="The one tenant the finding concerns (its job's, its jobs', its GPU's jobs'); "
        "empty when it concerns none or several. Managers see their tenants' findings only.",
    )

    class Meta:
        ordering = ["-first_seen", "-id"]
        indexes = [
            models.Index(fields=["cluster", "state"], name="finding_cluster_state"),
            # (cluster, rule) for a cycle's open findings; with the subject, for readers that
            # look findings up by (rule, subject) (the overview's findings behind a bucket)
            # without scanning every finding of those rules, resolved ones included
            models.Index(
                fields=["cluster", "rule_id", "subject"], name="finding_cluster_rule_subject"
            ),
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
        # the rules (pandas) only where a form validates one: not at every process's start-up
        from diagnosis.core.rules.base import ThresholdError  # noqa: PLC0415 -- start-up, #35
        from diagnosis.core.rules.registry import all_rules  # noqa: PLC0415 -- start-up, #35

        rule = all_rules().get(self.rule_id)
        if rule is None:
            known = ", ".join(all_rules())
            raise ValidationError({"rule_id": f"unknown rule {self.rule_id!r} (known: {known})"})
        try:
            self.value = rule.threshold(self.threshold).parse(self.value)
        except ThresholdError as exc:
            field = "value" if self.threshold in rule.defaults() else "threshold"
            raise ValidationError({field: str(exc)}) from None
