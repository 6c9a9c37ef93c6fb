"""People's steps of the recommendation workflow: request, approve, reject, ask for a dry run or
an apply, request a rollback, and turn a cluster's writes on or off; and who may approve what is
waiting (the approver queue: :func:`awaiting_approval_by`, :func:`eligible_approvers`).
"""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.base_user import AbstractBaseUser
from django.db import transaction
from django.db.models import Q, QuerySet
from django.utils import timezone

from diagnosis import roles
from diagnosis.actions.enqueue import dry_run_on_commit, notify_on_commit
from diagnosis.actions.workflow.apply import publish_apply_on_commit
from diagnosis.actions.workflow.base import (
    APPLIED_STATES,
    OPEN_STATES,
    SYSTEM_CYCLE,
    HarmNotConfirmed,
    WorkflowDenied,
    WorkflowError,
    actor_name,
    audit,
    lock_recommendation,
    require_change,
    require_state,
    save_fields,
)
from diagnosis.actions.workflow.impact import request_reestimate
from diagnosis.choices import RecommendationKind, RecommendationState
from diagnosis.edge.schedulers.base import observed_value
from diagnosis.models import (
    AuditEntry,
    Cluster,
    Recommendation,
)

State = RecommendationState


def request_recommendation(rec: Recommendation, user: AbstractBaseUser) -> Recommendation:
    """An SRE asks for a proposed change to be made (someone else then approves it)."""
    with transaction.atomic():
        rec = lock_recommendation(rec)
        if not roles.can_apply(user, rec.kind):
            raise WorkflowDenied("requesting a change needs the sre role (or oncall, for a drain)")
        require_change(rec, "request")
        require_state(rec, State.PROPOSED, doing="request")
        if rec.requested_by_id is not None:
            raise WorkflowError(f"already requested by {rec.requested_by.get_username()}")
        rec.requested_by = user
        rec.requested_at = timezone.now()
        rec.status_message = ""
        save_fields(rec, "requested_by", "requested_at", "status_message")
        audit(rec, actor_name(user), "request", after={"change": rec.change})
        if settings.GPUOBS_ALERTMANAGER_URL:  # tell the approvers now, not at the next cycle
            notify_on_commit(rec.cluster_id)
    return rec


def awaiting_approval_by(
    user: AbstractBaseUser, recommendations: QuerySet[Recommendation]
) -> QuerySet[Recommendation]:
    """Of ``recommendations``, the requested changes ``user`` may approve now (someone else's
    request; an on-call drain of their own): "awaiting my approval"."""
    if not roles.has_role(user, roles.Role.SRE, roles.Role.ONCALL):
        return recommendations.none()
    waiting = recommendations.filter(
        state=State.PROPOSED, requested_by__isnull=False
    ).select_related("requested_by")
    mine = [
        rec.pk
        for rec in waiting
        if roles.can_approve(
            user, rec.kind, rec.requested_by, rollback=rec.rollback_of_id is not None
        )[0]
    ]
    return recommendations.filter(pk__in=mine)


def eligible_approvers(rec: Recommendation) -> list[AbstractBaseUser]:
    """The active people who may approve ``rec`` as requested (sorted by user name)."""
    people = get_user_model().objects.filter(is_active=True)
    wanted = [roles.Role.SRE, roles.Role.ADMIN]
    if rec.kind == RecommendationKind.DRAIN_NODE:
        wanted.append(roles.Role.ONCALL)
    candidates = people.filter(
        Q(groups__name__in=[r.value for r in wanted]) | Q(is_superuser=True)
    ).distinct()
    rollback = rec.rollback_of_id is not None
    return sorted(
        (
            person
            for person in candidates
            if roles.can_approve(person, rec.kind, rec.requested_by, rollback=rollback)[0]
        ),
        key=lambda person: person.get_username(),
    )


def predicted_harm(rec: Recommendation) -> list[str]:
    """The harms the recommendation's current impact estimate predicts (empty: none)."""
    impact = rec.impact or {}
    harm = [str(h) for h in impact.get("harm") or ()]
    if not harm and impact.get("verdict") == "harms":
        harm = [str(impact.get("headline") or "the simulated impact says it harms")]
    return harm


def approve_recommendation(
    rec: Recommendation, user: AbstractBaseUser, *, confirm_harm: bool = False
) -> Recommendation:
    """Approve a requested change: the ``sre`` role (``oncall`` for a drain) and, except for an
    on-call drain, someone other than the requester. On-call may approve a drain nobody
    requested (it then counts as their own request). A change whose impact estimate predicts
    harm needs ``confirm_harm`` (else :class:`HarmNotConfirmed`, nothing written); the harm
    confirmed is in the audit row. The approval lapses after ``GPUOBS_APPROVAL_TTL_SECONDS``;
    a dry run is sent on commit so the diff is shown."""

    with transaction.atomic():
        rec = lock_recommendation(rec)
        rollback = rec.rollback_of_id is not None
        allowed, why = roles.can_approve(user, rec.kind, requested_by=None, rollback=rollback)
        if not allowed:
            raise WorkflowDenied(why)
        require_change(rec, "approve")
        require_state(rec, State.PROPOSED, doing="approve")
        requester = rec.requested_by
        if requester is None:
            allowed, _ = roles.can_approve(user, rec.kind, requested_by=user, rollback=rollback)
            if not allowed:
                raise WorkflowDenied(
                    "nobody has requested this change yet: an SRE requests it, another approves it"
                )
            requester = user
        allowed, why = roles.can_approve(user, rec.kind, requested_by=requester, rollback=rollback)
        if not allowed:
            raise WorkflowDenied(why)
        harm = predicted_harm(rec)
        if harm and not confirm_harm:
            raise HarmNotConfirmed(harm)
        _mark_approved(rec, requested_by=requester, approved_by=user, message="")
        audit(
            rec,
            actor_name(user),
            "approve",
            before={"state": State.PROPOSED},
            after={
                "state": State.APPROVED,
                "expires_at": rec.expires_at.isoformat(),
                **({"harm_confirmed": harm} if harm else {}),
            },
        )
        dry_run_on_commit(rec.pk)
        request_reestimate(rec)  # today's figures: a material change asks the approver again
    return rec


def _mark_approved(
    rec: Recommendation,
    *,
    requested_by: AbstractBaseUser | None,
    approved_by: AbstractBaseUser | None,
    message: str,
) -> None:
    """Write a change's approval (the caller holds its lock and writes the audit row); it
    lapses after ``GPUOBS_APPROVAL_TTL_SECONDS``."""
    now = timezone.now()
    rec.requested_by = requested_by
    rec.requested_at = rec.requested_at or now
    rec.state = State.APPROVED
    rec.approved_by = approved_by
    rec.approved_at = now
    rec.expires_at = now + timedelta(seconds=settings.GPUOBS_APPROVAL_TTL_SECONDS)
    rec.status_message = message
    save_fields(
        rec,
        "requested_by",
        "requested_at",
        "state",
        "approved_by",
        "approved_at",
        "expires_at",
        "status_message",
    )


def approve_by_policy(
    rec: Recommendation,
    *,
    actor: str,
    written_by: AbstractBaseUser | None,
    approved_by: AbstractBaseUser | None,
    policy: dict[str, Any],
) -> Recommendation:
    """A remediation policy's standing approval (docs/autopilot.md): the proposed change is
    approved as if its writer had requested it and its approver approved it -- two people, who
    agreed on the policy -- audited ``approve-by-policy`` by ``actor`` (``policy:<name>``) with
    the policy's id, version and both names. The caller has checked the guards; the apply then
    goes the way of every apply (:func:`request_apply`)."""
    with transaction.atomic():
        rec = lock_recommendation(rec)
        require_change(rec, "approve")
        require_state(rec, State.PROPOSED, doing="approve")
        if rec.requested_by_id is not None:  # a person asked: a person approves
            raise WorkflowError(
                f"requested by {rec.requested_by.get_username()}: it awaits a person's approval"
            )
        _mark_approved(
            rec, requested_by=written_by, approved_by=approved_by, message=f"approved by {actor}"
        )
        audit(
            rec,
            actor,
            "approve-by-policy",
            before={"state": State.PROPOSED},
            after={"state": State.APPROVED, **policy},
        )
    return rec


def reject_recommendation(
    rec: Recommendation, user: AbstractBaseUser, reason: str = ""
) -> Recommendation:
    """Reject a proposed or approved recommendation (advice too: dismissed)."""
    with transaction.atomic():
        rec = lock_recommendation(rec)
        if not roles.can_apply(user, rec.kind):
            raise WorkflowDenied("rejecting needs the sre role (or oncall, for a drain)")
        require_state(rec, State.PROPOSED, State.APPROVED, doing="reject")
        before = rec.state
        rec.state = State.REJECTED
        rec.status_message = reason.strip()[:2000]
        save_fields(rec, "state", "status_message")
        audit(
            rec,
            actor_name(user),
            "reject",
            before={"state": before},
            after={"state": State.REJECTED, "reason": rec.status_message},
        )
    return rec


def request_dry_run(rec: Recommendation, user: AbstractBaseUser) -> Recommendation:
    """Ask the scheduler, without changing anything, what the change would do (shown as the
    recommendation's diff); runs on the ``actuate`` queue."""

    with transaction.atomic():
        rec = lock_recommendation(rec)
        if not roles.can_apply(user, rec.kind):
            raise WorkflowDenied("a dry run needs the sre role (or oncall, for a drain)")
        require_change(rec, "dry-run")
        require_state(rec, State.PROPOSED, State.APPROVED, doing="dry-run")
        dry_run_on_commit(rec.pk)
    return rec


def lapse_reason(rec: Recommendation) -> str:
    return f"the approval lapsed at {rec.expires_at:%Y-%m-%d %H:%M} UTC"


def expire(rec: Recommendation, actor: str, why: str) -> None:
    before = rec.state
    rec.state = State.EXPIRED
    rec.status_message = why
    save_fields(rec, "state", "status_message")
    if before == State.APPROVED:  # an approval lapsing is a decision undone: on the record
        audit(rec, actor, "expire", before={"state": before}, after={"state": State.EXPIRED})


def request_apply(
    rec: Recommendation, user: AbstractBaseUser | None, *, actor: str | None = None
) -> Recommendation:
    """Apply an approved change: ``approved → applying`` with a fresh idempotency key, and the
    apply task (``actuate`` queue) sent on commit. ``user`` None: gpuobs itself (an automatic
    rollback; a remediation policy, named by ``actor`` in the audit trail)."""

    lapsed = False
    with transaction.atomic():
        rec = lock_recommendation(rec)
        if user is not None and not roles.can_apply(user, rec.kind):
            raise WorkflowDenied("applying needs the sre role (or oncall, for a drain)")
        require_change(rec, "apply")
        require_state(rec, State.APPROVED, doing="apply")
        now = timezone.now()
        if rec.expires_at is not None and rec.expires_at <= now:
            expire(rec, actor_name(user), lapse_reason(rec))
            lapsed = True
        else:
            rec.state = State.APPLYING
            rec.apply_key = uuid.uuid4().hex
            rec.apply_claimed_at = None
            rec.applied_by = user
            rec.status_message = ""
            save_fields(
                rec, "state", "apply_key", "apply_claimed_at", "applied_by", "status_message"
            )
            audit(
                rec,
                actor or actor_name(user),
                "apply-requested",
                before={"state": State.APPROVED},
                after={"state": State.APPLYING, "key": rec.apply_key},
            )
            publish_apply_on_commit(rec.pk, rec.apply_key)
            request_reestimate(rec)
    if lapsed:
        raise WorkflowError(rec.status_message)
    return rec


def request_rollback(rec: Recommendation, user: AbstractBaseUser) -> Recommendation:
    """Ask to undo an applied change: a new recommendation back to the value before, requested
    by the person asking. A rollback is a change like any other (docs/recommendations.md#workflow):
    someone else approves it, then it is applied -- putting a drained node back in service included.
    Only a cluster's ``auto_rollback`` (gpuobs itself, verification.py) skips the second person.
    Returns the rollback."""
    if not roles.can_apply(user, rec.kind):
        raise WorkflowDenied("rolling back needs the sre role (or oncall, for a drain)")
    return create_rollback(
        rec, user=user, reason="requested by " + user.get_username(), approved=False
    )


def create_rollback(
    rec: Recommendation, *, user: AbstractBaseUser | None, reason: str, approved: bool = True
) -> Recommendation:
    with transaction.atomic():
        rec = lock_recommendation(rec)
        require_change(rec, "roll back")
        require_state(rec, *APPLIED_STATES, doing="roll back")
        if rec.rollbacks.filter(state__in=OPEN_STATES).exists():
            raise WorkflowError("a rollback of this change is already under way")
        before = observed_value((rec.apply_result or {}).get("before"))
        if before is None:
            before = rec.change.get("from")
        if before is None:
            raise WorkflowError("the value before the change is unknown: nothing to roll back to")
        if rec.kind == RecommendationKind.DRAIN_NODE:
            before = "ready"
        for other in Recommendation.objects.select_for_update().filter(
            cluster_id=rec.cluster_id, kind=rec.kind, target=rec.target, state__in=OPEN_STATES
        ):
            if other.state == State.APPLYING:
                raise WorkflowError(f"recommendation #{other.pk} is being applied to this target")
            other.state = State.SUPERSEDED
            other.status_message = f"superseded by the rollback of #{rec.pk}"
            save_fields(other, "state", "status_message")
        now = timezone.now()
        undo = Recommendation.objects.create(
            cluster_id=rec.cluster_id,
            kind=rec.kind,
            target=rec.target,
            change={"from": rec.change.get("to"), "to": before},
            impact={
                "method": "none",
                "verdict": "not simulated",
                "headline": f"restores {rec.target} to {before!r}",
                "summary": f"Roll back #{rec.pk}: set {rec.target} back to {before!r} ({reason}).",
            },
            rollback_of=rec,
            created_by=user,
            requested_by=user,  # a person's rollback waits for another's approval
            requested_at=now if user else None,
            state=State.APPROVED if approved else State.PROPOSED,
            approved_by=user if approved else None,
            approved_at=now if approved else None,
            expires_at=(
                now + timedelta(seconds=settings.GPUOBS_APPROVAL_TTL_SECONDS) if approved else None
            ),
            status_message=reason,
        )
        undo.motivating_findings.set(rec.motivating_findings.all())
        audit(
            undo,
            actor_name(user) if user else SYSTEM_CYCLE,
            "rollback-approved"
            if approved
            else "rollback-requested"
            if user
            else "rollback-proposed",
            before={"recommendation": rec.pk, "value": rec.change.get("to")},
            after={"value": before, "reason": reason},
        )
    return undo


def set_cluster_writes(cluster: Cluster, user: AbstractBaseUser, *, enabled: bool) -> Cluster:
    """The per-cluster write switch: ``enabled`` lets approved changes be written to the
    scheduler (``Cluster.dry_run`` False). Only an admin may turn it either way; audited."""
    if not roles.can_administer(user):
        raise WorkflowDenied("only an admin may turn a cluster's writes on or off")
    with transaction.atomic():
        cluster = Cluster.objects.select_for_update().get(pk=cluster.pk)
        before = not cluster.dry_run
        cluster.dry_run = not enabled
        cluster.save(update_fields=["dry_run"])
        AuditEntry.objects.create(
            actor=user.get_username(),
            action="writes-enabled" if enabled else "writes-disabled",
            target=f"cluster:{cluster.name}",
            before={"writes_enabled": before},
            after={"writes_enabled": enabled},
            cluster=cluster,
        )
    return cluster
