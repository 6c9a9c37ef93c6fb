"""Findings (one row per fingerprint), their lifecycle history and per-cluster rule overrides."""

from __future__ import annotations

import hashlib
from datetime import datetime
from typing import Any

from django.core.exceptions import ValidationError
from django.db import models
from django.db.models import Case, F, When
from django.utils import timezone

from diagnosis.choices import (
    FindingState,
    Severity,
)
from diagnosis.models.fields import optional_ref
from diagnosis.models.inventory import Cluster, Tenant


class RuleClock(models.Model):
    """The snapshot time of a cluster's latest evaluation of one rule (issue #35).

    A finding evaluated in every cycle since it was written follows its rule's clock
    (``Finding.clock`` and ``seen_on_clock``) instead of having its own ``last_seen`` moved each
    cycle; one that was also hit in each of them has ``hit_on_clock`` too. A cycle moves the
    clock (one row a rule) and writes only the findings whose timestamps stop following it.
    """

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="rule_clocks")
    rule_id = models.CharField(max_length=64)
    evaluated_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["cluster", "rule_id"], name="rule_clock_unique")
        ]

    def __str__(self) -> str:
        return f"{self.cluster_id}: {self.rule_id} at {self.evaluated_at}"


# A finding's timestamps as readers see them: its rule's clock while it follows it, else as
# written. The default manager annotates every finding with them, under the names the readers
# (pages, API, reports, filters, orderings) have always used.
LAST_SEEN = Case(
    When(seen_on_clock=True, then=F("clock__evaluated_at")), default=F("written_last_seen")
)
LAST_HIT_AT = Case(
    When(hit_on_clock=True, then=F("clock__evaluated_at")), default=F("written_last_hit_at")
)


class FindingManager(models.Manager):
    def get_queryset(self) -> models.QuerySet:
        return super().get_queryset().annotate(last_seen=LAST_SEEN, last_hit_at=LAST_HIT_AT)


class Finding(models.Model):
    """What a rule reported about one subject, kept across cycles (pending → firing → resolved).

    ``last_seen`` and ``last_hit_at`` read the rule's clock while the finding follows it
    (:class:`RuleClock`), else the values last written; setting either writes it as a value of
    the finding's own (no longer following the clock).
    """

    # (cluster, ...) indexes of Meta lead with it: no index of its own (issue #35)
    cluster = models.ForeignKey(
        Cluster, on_delete=models.CASCADE, related_name="findings", db_index=False
    )
    rule_id = models.CharField(max_length=64)
    subject = models.TextField(help_text="cluster:, pool:, node:, gpu:, job:, jobs: or tenant:")
    fingerprint = models.CharField(
        max_length=64, editable=False, help_text="Derived from cluster, rule, subject."
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
    written_last_seen = models.DateTimeField(
        help_text="Latest snapshot time at which it was evaluated, as last written (read "
        "last_seen: the rule's clock while it follows it)."
    )
    written_last_hit_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text="Latest snapshot time at which the rule reported it, as last written "
        "(read last_hit_at).",
    )
    clock = models.ForeignKey(
        RuleClock,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="+",
        help_text="Its rule's clock in its cluster, once a cycle wrote it.",
    )
    seen_on_clock = models.BooleanField(
        default=False, help_text="Evaluated in every cycle since written: last_seen is the clock's."
    )
    hit_on_clock = models.BooleanField(
        default=False, help_text="Hit in every cycle since written: last_hit_at is the clock's."
    )
    firing_since = models.DateTimeField(null=True, blank=True)
    resolved_at = models.DateTimeField(null=True, blank=True)
    tenant = optional_ref(
        Tenant,
        related_name="findings",
        help_text="The one tenant the finding concerns (its job's, its jobs', its GPU's jobs'); "
        "empty when it concerns none or several. Managers see their tenants' findings only.",
    )

    objects = FindingManager()

    class Meta:
        ordering = ["-first_seen", "-id"]
        # A constraint, not unique=True, which would add a second (LIKE) index on PostgreSQL:
        # no fingerprint is ever matched by a pattern, and a first cycle writes 100,000 rows.
        constraints = [models.UniqueConstraint(fields=["fingerprint"], name="finding_fingerprint")]
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

    @property
    def last_seen(self) -> datetime:
        """Latest snapshot time at which it was evaluated."""
        return self.clock.evaluated_at if self.seen_on_clock else self.written_last_seen

    @last_seen.setter
    def last_seen(self, value: datetime) -> None:
        self.written_last_seen, self.seen_on_clock = value, False

    @property
    def last_hit_at(self) -> datetime | None:
        """Latest snapshot time at which the rule reported it."""
        return self.clock.evaluated_at if self.hit_on_clock else self.written_last_hit_at

    @last_hit_at.setter
    def last_hit_at(self, value: datetime | None) -> None:
        self.written_last_hit_at, self.hit_on_clock = value, False

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
