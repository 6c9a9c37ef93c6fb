"""Recommendations and their append-only audit trail (docs/recommendations.md#workflow)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db import models
from django.db.models import Case, F, OuterRef, Subquery, When
from django.utils import timezone
from django.utils.translation import gettext

from diagnosis.choices import (
    RecommendationKind,
    RecommendationState,
)
from diagnosis.models.fields import user_ref
from diagnosis.models.findings import Finding
from diagnosis.models.inventory import Cluster

# A recommendation's last_proposed_as_of as readers see it (issue #35): the cluster's recommend
# clock while it follows it, else as written. A subquery, not a join: the recommend step and the
# workflow lock recommendations (SELECT ... FOR UPDATE) and must not lock their cluster's row.
LAST_PROPOSED_AS_OF = Case(
    When(
        proposed_on_clock=True,
        then=Subquery(
            Cluster.objects.filter(pk=OuterRef("cluster_id")).values("recommend_clock_at")[:1]
        ),
    ),
    default=F("written_last_proposed_as_of"),
)


class RecommendationManager(models.Manager):
    def get_queryset(self) -> models.QuerySet:
        return super().get_queryset().annotate(last_proposed_as_of=LAST_PROPOSED_AS_OF)


class Recommendation(models.Model):
    """A proposed change and its workflow. ``last_proposed_as_of`` reads the cluster's recommend
    clock (``Cluster.recommend_clock_at``) while the recommendation follows it, else the value
    last written; setting it writes it as a value of its own (no longer following the clock)."""

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="recommendations")
    kind = models.CharField(max_length=32, choices=RecommendationKind.choices)
    target = models.CharField(max_length=255, help_text="pool:, queue:, node: or job:")
    change = models.JSONField(default=dict, blank=True)
    state = models.CharField(
        max_length=16, choices=RecommendationState.choices, default=RecommendationState.PROPOSED
    )
    impact = models.JSONField(default=dict, blank=True, help_text="Simulated effect of the change.")
    motivating_findings = models.ManyToManyField(
        Finding, blank=True, related_name="recommendations"
    )
    created_by = user_ref("Empty when gpuobs proposed it.")
    approved_by = user_ref()
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    # The workflow (docs/recommendations.md#workflow; diagnosis/actions/workflow/).
    requested_by = user_ref(
        "Who asked for the change to be made; the approver must be someone else."
    )
    requested_at = models.DateTimeField(null=True, blank=True)
    approved_at = models.DateTimeField(null=True, blank=True)
    expires_at = models.DateTimeField(
        null=True, blank=True, help_text="When the approval lapses if the change is not applied."
    )
    applied_by = user_ref("Who asked for the approved change to be applied.")
    applied_at = models.DateTimeField(null=True, blank=True)
    apply_key = models.CharField(
        max_length=64,
        blank=True,
        editable=False,
        help_text="Idempotency key of the pending apply: a redelivered task applies nothing.",
    )
    apply_claimed_at = models.DateTimeField(
        null=True, blank=True, editable=False, help_text="When a worker took the apply."
    )
    dry_run_result = models.JSONField(
        default=dict, blank=True, help_text="The latest dry run: command, before, after, message."
    )
    apply_result = models.JSONField(
        default=dict, blank=True, help_text="The write: command, before, after, scheduler's answer."
    )
    verification = models.JSONField(
        default=dict, blank=True, help_text="Baseline and the cycles observed since applying."
    )
    rollback_of = models.ForeignKey(
        "self",
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="rollbacks",
        help_text="The applied recommendation this one undoes.",
    )
    status_message = models.TextField(
        blank=True, help_text="Why it is in its state (a changed target, an error, a dry run)."
    )
    proposed_as_of = models.DateTimeField(
        null=True, blank=True, help_text="Snapshot time of the cycle that proposed it."
    )
    written_last_proposed_as_of = models.DateTimeField(
        null=True,
        blank=True,
        help_text="Snapshot time of the latest cycle that proposed it, as last written (read "
        "last_proposed_as_of: the cluster's recommend clock while it follows it).",
    )
    proposed_on_clock = models.BooleanField(
        default=False,
        help_text="Proposed unchanged by every recommend step since written: "
        "last_proposed_as_of is the cluster's recommend_clock_at.",
    )

    objects = RecommendationManager()

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [
            models.Index(fields=["cluster", "state"], name="recommendation_cluster_state"),
            # the ones following the clock, which a recommend step takes off it when it does not
            # propose them again
            models.Index(
                fields=["cluster"],
                condition=models.Q(proposed_on_clock=True),
                name="recommendation_on_clock",
            ),
        ]
        constraints = [
            models.UniqueConstraint(
                fields=["cluster", "kind", "target"],
                condition=models.Q(state__in=["proposed", "approved", "applying"]),
                name="recommendation_one_open_per_target",
            )
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.target} ({self.state})"

    def save(self, *args: Any, **kwargs: Any) -> None:
        """Saving ``last_proposed_as_of`` (``update_fields``) saves the columns it is stored in."""
        fields = kwargs.get("update_fields")
        if fields is not None and "last_proposed_as_of" in fields:
            kwargs["update_fields"] = [
                *(f for f in fields if f != "last_proposed_as_of"),
                "written_last_proposed_as_of",
                "proposed_on_clock",
            ]
        super().save(*args, **kwargs)

    @property
    def last_proposed_as_of(self) -> datetime | None:
        """Snapshot time of the latest cycle that proposed it."""
        if self.proposed_on_clock:
            return self.cluster.recommend_clock_at
        return self.written_last_proposed_as_of

    @last_proposed_as_of.setter
    def last_proposed_as_of(self, value: datetime | None) -> None:
        self.written_last_proposed_as_of, self.proposed_on_clock = value, False

    @property
    def stage(self) -> str:
        """The state as its badge shows it: a proposed change someone asked for is
        ``requested`` (awaiting approval), so the badge moves with the Request button."""
        if self.state == RecommendationState.PROPOSED and self.requested_by_id is not None:
            return "requested"
        return str(self.state)

    def get_stage_display(self) -> str:
        if self.stage == "requested":
            return gettext("Requested")
        return str(self.get_state_display())


class AuditEntryImmutableError(Exception):
    """Raised on any attempt to change or delete an audit entry."""


class AuditEntryQuerySet(models.QuerySet):
    def update(self, **kwargs: Any) -> int:
        raise AuditEntryImmutableError("audit entries are append-only")

    def delete(self) -> tuple[int, dict[str, int]]:
        raise AuditEntryImmutableError("audit entries are append-only")

    def bulk_create(self, objs: Any, *args: Any, **kwargs: Any) -> list[Any]:
        """Inserts only: ``update_conflicts`` (an upsert that rewrites existing rows) is refused,
        and so is ``ignore_conflicts`` (it would hide an attempt to reuse a row's id)."""
        if kwargs.get("update_conflicts") or kwargs.get("ignore_conflicts"):
            raise AuditEntryImmutableError("audit entries are append-only")
        return super().bulk_create(objs, *args, **kwargs)

    def bulk_update(self, objs: Any, fields: Any, batch_size: int | None = None) -> int:
        raise AuditEntryImmutableError("audit entries are append-only")


class AuditEntry(models.Model):
    """Append-only record of a change made by a person or by gpuobs (before and after)."""

    actor = models.CharField(max_length=150, help_text="User name, or system:<what> for gpuobs.")
    action = models.CharField(max_length=64)
    target = models.CharField(max_length=255, blank=True)
    before = models.JSONField(null=True, blank=True)
    after = models.JSONField(null=True, blank=True)
    time = models.DateTimeField(default=timezone.now)
    # PROTECT: the trail outlives nothing it points at; disable a cluster rather than delete it.
    cluster = models.ForeignKey(
        Cluster, on_delete=models.PROTECT, null=True, blank=True, related_name="audit_entries"
    )
    recommendation = models.ForeignKey(
        Recommendation,
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="audit_entries",
    )

    objects = AuditEntryQuerySet.as_manager()

    class Meta:
        ordering = ["-time", "-id"]
        verbose_name_plural = "audit entries"
        indexes = [models.Index(fields=["cluster", "time"], name="audit_cluster_time")]

    def __str__(self) -> str:
        return f"{self.time:%Y-%m-%dT%H:%M:%SZ} {self.actor} {self.action} {self.target}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        """Only ever an INSERT: a row read back, or a new object given an existing row's ``pk``
        (which Django would otherwise save as an UPDATE of that row), is refused."""
        if not self._state.adding:
            raise AuditEntryImmutableError("audit entries are append-only")
        if self.pk is not None and type(self)._base_manager.filter(pk=self.pk).exists():
            raise AuditEntryImmutableError("audit entries are append-only")
        kwargs["force_insert"] = True
        kwargs.pop("force_update", None)
        kwargs.pop("update_fields", None)
        super().save(*args, **kwargs)

    def delete(self, *args: Any, **kwargs: Any) -> tuple[int, dict[str, int]]:
        raise AuditEntryImmutableError("audit entries are append-only")
