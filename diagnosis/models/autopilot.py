"""Remediation policies (the autopilot, docs/autopilot.md): a policy two people agreed on, what it
applied, would have applied or was held back from, and the admins' kill switch."""

from __future__ import annotations

from django.db import models
from django.utils.translation import gettext_lazy as _

from diagnosis.models.fields import optional_ref, user_ref
from diagnosis.models.inventory import Cluster
from diagnosis.models.recommendations import Recommendation


class PolicyKind(models.TextChoices):
    DRAIN_NODE = "drain-node", _("Drain node")
    GANG_RELEASE = "gang-release", _("Gang release")


class PolicyMode(models.TextChoices):
    DRY_RUN = "dry-run", _("Dry run")
    ENFORCE = "enforce", _("Enforce")


class PolicyState(models.TextChoices):
    PROPOSED = "proposed", _("Awaiting approval")
    APPROVED = "approved", _("Approved")
    REJECTED = "rejected", _("Rejected")
    RETIRED = "retired", _("Retired")


class RemediationPolicy(models.Model):
    """A standing approval: recommendations of ``kind`` that meet ``condition`` inside the scope
    are applied by gpuobs within the budgets. Written by one person, approved by another; an
    edit makes it ``proposed`` again (a new ``version``) until someone else approves it."""

    name = models.SlugField(max_length=64, unique=True)
    kind = models.CharField(max_length=32, choices=PolicyKind.choices)
    condition = models.JSONField(default=dict, blank=True)
    clusters = models.ManyToManyField(
        Cluster, blank=True, related_name="remediation_policies", help_text="Empty: every cluster."
    )
    pools = models.JSONField(default=list, blank=True, help_text="Pool names; empty: every pool.")
    per_pool_per_hour = models.PositiveIntegerField(default=1)
    pool_out_share = models.FloatField(default=0.1)
    per_hour = models.PositiveIntegerField(default=2)
    quiet_start_minute = models.PositiveSmallIntegerField(null=True, blank=True)
    quiet_end_minute = models.PositiveSmallIntegerField(null=True, blank=True)
    mode = models.CharField(max_length=16, choices=PolicyMode.choices, default=PolicyMode.DRY_RUN)
    mode_reason = models.TextField(blank=True, help_text="Why gpuobs put it in its mode.")
    state = models.CharField(
        max_length=16, choices=PolicyState.choices, default=PolicyState.PROPOSED
    )
    version = models.PositiveIntegerField(default=1)
    written_by = user_ref("Who wrote this version; its approver must be someone else.")
    approved_by = user_ref()
    approved_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["id"]
        verbose_name_plural = "remediation policies"

    def __str__(self) -> str:
        return f"{self.name} ({self.kind}, {self.mode}, {self.state})"


class AutopilotOutcome(models.TextChoices):
    APPLIED = "applied", _("Applied")
    WOULD_APPLY = "would-apply", _("Would apply (dry run)")
    HELD = "held", _("Held back")
    DEMOTED = "demoted", _("Policy turned to dry run")


class AutopilotDecision(models.Model):
    """One thing the autopilot did or held back, with why, attributed to a policy version and
    the two people behind it. Written by the autopilot step only; never changed."""

    policy = models.ForeignKey(
        RemediationPolicy, on_delete=models.CASCADE, related_name="decisions"
    )
    policy_version = models.PositiveIntegerField()
    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="+")
    recommendation = optional_ref(Recommendation, related_name="autopilot_decisions")
    as_of = models.DateTimeField(help_text="The cycle's snapshot time.")
    time = models.DateTimeField(auto_now_add=True)
    outcome = models.CharField(max_length=16, choices=AutopilotOutcome.choices)
    guard = models.CharField(max_length=32, blank=True, help_text="The guard that held it back.")
    reason = models.TextField(blank=True)
    kind = models.CharField(max_length=32)
    target = models.CharField(max_length=255)
    pool = models.CharField(max_length=253, blank=True)
    gpus_out = models.PositiveIntegerField(default=0)
    written_by = models.CharField(max_length=150, blank=True)
    approved_by = models.CharField(max_length=150, blank=True)

    class Meta:
        ordering = ["-time", "-id"]
        indexes = [
            models.Index(fields=["policy", "as_of"], name="autopilot_policy_as_of"),
            models.Index(fields=["cluster", "as_of"], name="autopilot_cluster_as_of"),
        ]

    def __str__(self) -> str:
        return f"{self.policy.name} {self.outcome} {self.target}"


class AutopilotSwitch(models.Model):
    """The admins' kill switch, one row: ``stopped`` holds every policy back at the next cycle."""

    stopped = models.BooleanField(default=False)
    changed_by = user_ref()
    changed_at = models.DateTimeField(null=True, blank=True)
    reason = models.TextField(blank=True)

    def __str__(self) -> str:
        return "autopilot stopped" if self.stopped else "autopilot running"
