"""The recommendation workflow (DESIGN.md section 8.2): the named actions that move a
:class:`~diagnosis.models.Recommendation` through its states, push approved changes to the
scheduler, verify them over the next cycles and roll them back.

::

    proposed ──request──▶ proposed (requested_by) ──approve──▶ approved ──apply──▶ applying
        │                                                        │  (lapses: expired)  │
        ├─ reject ──▶ rejected                                   └─ reject ─▶ rejected │
        ├─ a newer, different proposal for the target ──▶ superseded                   │
        └─ its findings resolved, not proposed again ──▶ expired                       ▼
    applying ──▶ applied ──(cycles)──▶ verified | rolled-back        (target changed: back to
             └─▶ failed                                              proposed; writes off: back
                                                                     to approved, a dry run only)

Every action here locks the recommendation's row (``select_for_update``), checks the state and
the person's role (``diagnosis.roles``), writes, appends an :class:`AuditEntry` and sends any
task with ``delay_on_commit``. The audit trail is append-only: nothing here updates or deletes
an entry.

**Applying** runs on the ``actuate`` queue (``diagnosis.tasks.actuate_recommendation``) and is
idempotent: :func:`request_apply` stores a fresh key on the recommendation and sends it with
the task; :func:`perform_apply` claims that key in a transaction before touching the scheduler,
so a redelivered message (Celery acks late) finds it claimed or used and does nothing. It
re-reads the target (a dry run: Kubernetes ``dryRun=All``, the exact Slurm command, the
simulator's check) and stops if the value changed since the recommendation; with the cluster's
write switch off (``Cluster.dry_run``, on by default, only an admin turns it off) it stops
there; otherwise it writes once, guarded by the value it just read, and records before/after and
the scheduler's answer.
"""

from __future__ import annotations

import json
import logging
import math
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth.base_user import AbstractBaseUser
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.utils import timezone

from diagnosis import roles
from diagnosis import snapshot as snapshot_format
from diagnosis import workflow_verify as verify
from diagnosis.choices import FindingState, RecommendationKind, RecommendationState
from diagnosis.models import (
    AuditEntry,
    Cluster,
    ClusterCycle,
    Finding,
    Recommendation,
    Snapshot,
)
from diagnosis.schedulers.base import ChangeResult, SchedulerError, adapter_for

logger = logging.getLogger(__name__)

State = RecommendationState
OPEN_STATES = (State.PROPOSED, State.APPROVED, State.APPLYING)
APPLIED_STATES = (State.APPLIED, State.VERIFIED)
SYSTEM_CYCLE = "system:cycle"
SYSTEM_ACTUATE = "system:actuate"
MAX_OBSERVATIONS = 24
# A change a person rejected is not proposed again, unchanged, for this long.
REJECTION_QUIET = timedelta(hours=24)


class WorkflowError(Exception):
    """A request the recommendation's state does not allow (the API answers 409)."""


class WorkflowDenied(PermissionDenied):
    """A request the person's role does not allow (403)."""


class TransientApplyError(Exception):
    """The scheduler could not be reached; the apply task should retry (the claim is released)."""


def _actor(user: AbstractBaseUser | None) -> str:
    return user.get_username() if user is not None else SYSTEM_ACTUATE


def _audit(
    rec: Recommendation,
    actor: str,
    action: str,
    *,
    before: Any = None,
    after: Any = None,
) -> AuditEntry:
    return AuditEntry.objects.create(
        actor=actor,
        action=action,
        target=rec.target,
        before=before,
        after=after,
        cluster_id=rec.cluster_id,
        recommendation=rec,
    )


def _locked(rec: Recommendation | int) -> Recommendation:
    pk = rec if isinstance(rec, int) else rec.pk
    return Recommendation.objects.select_for_update().select_related("cluster").get(pk=pk)


def _require_state(rec: Recommendation, *states: str, doing: str) -> None:
    if rec.state not in states:
        allowed = " or ".join(states)
        raise WorkflowError(
            f"cannot {doing} a recommendation that is {rec.state} (needs {allowed})"
        )


def _require_change(rec: Recommendation, doing: str) -> None:
    if rec.kind == RecommendationKind.ADVISORY or not rec.change:
        raise WorkflowError(f"cannot {doing} advice: it has no change to make")


def _save(rec: Recommendation, *fields: str) -> None:
    rec.save(update_fields=[*fields, "updated_at"])


# -- the change as the scheduler takes it --------------------------------------------------------


def scheduler_change(rec: Recommendation) -> dict[str, Any]:
    """The recommendation's change in the adapters' shape (``{"kind", "target", "to"[,
    "reason"]}``); undoing a drain is a ``resume-node``."""
    if rec.kind == RecommendationKind.DRAIN_NODE and rec.change.get("to") == "ready":
        return {"kind": "resume-node", "target": rec.target}
    out = {"kind": rec.kind, "target": rec.target, "to": rec.change.get("to")}
    if rec.change.get("reason"):
        out["reason"] = rec.change["reason"]
    return out


def observed_value(value: Any) -> Any:
    """A value as adapters report it, made comparable with a recommendation's ``from``/``to``:
    a node record's ``state``; Kubernetes' ``schedulable`` as the snapshot's ``ready``; numbers
    as floats."""
    if isinstance(value, Mapping):
        value = value.get("state")
    if value == "schedulable":
        return "ready"
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return value


def same_value(a: Any, b: Any) -> bool:
    a, b = observed_value(a), observed_value(b)
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b)
    return a == b


def _result_dict(result: ChangeResult) -> dict[str, Any]:
    return {
        "applied": result.applied,
        "dry_run": result.dry_run,
        "before": result.before,
        "after": result.after,
        "command": result.command,
        "message": result.message,
        "at": timezone.now().isoformat(),
    }


class SimulatedScheduler:
    """The built-in simulator as a scheduler the workflow writes to: a dry run checks the change
    against the simulator; a write appends it to the cluster's replayable change log
    (``diagnosis.actions.write_sim_change``), effective from the next scheduling pass."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster

    def apply(self, change: Mapping[str, Any], *, dry_run: bool) -> ChangeResult:
        from diagnosis import actions
        from diagnosis.schedulers import sim as sim_scheduler

        write = {k: v for k, v in change.items() if k != "from"}  # "from": a guard, not a write
        command = "sim apply " + json.dumps(write, sort_keys=True)
        expected = change.get("to", "drained" if change.get("kind") == "drain-node" else None)
        try:
            if dry_run:
                cluster = Cluster.objects.get(pk=self.cluster.pk)
                before = actions.current_sim_value(cluster, change)
                _check_from(change, before)
                sim_scheduler.apply(cluster, change, dry_run=True)
                return ChangeResult(
                    applied=False,
                    dry_run=True,
                    before=before,
                    after=expected,
                    command=command,
                    message="dry run: the simulator takes this change",
                )
            with transaction.atomic():
                _, before = actions.write_sim_change(
                    self.cluster, write, check=lambda value: _check_from(change, value)
                )
        except sim_scheduler.ChangeError as exc:
            raise SchedulerError(str(exc), permanent=True) from exc
        return ChangeResult(
            applied=True,
            dry_run=False,
            before=before,
            after=expected,
            command=command,
            message="recorded: effective from the simulator's next scheduling pass",
        )


def _check_from(change: Mapping[str, Any], value: Any) -> None:
    if "from" in change and not same_value(change["from"], value):
        raise SchedulerError(
            f"{change.get('kind')} {change.get('target')}: the target changed since the "
            f"recommendation (now {value!r}, expected {change['from']!r})",
            permanent=True,
        )


def scheduler_for(cluster: Cluster) -> Any:
    """What applies changes to a cluster: its scheduler adapter, or the simulator."""
    if cluster.scheduler_kind == "sim":
        return SimulatedScheduler(cluster)
    return adapter_for(cluster.scheduler_kind, cluster.scheduler_config)


def _ask(cluster: Cluster, change: Mapping[str, Any], *, dry_run: bool) -> ChangeResult:
    """One call to the cluster's scheduler. Anything but a :class:`SchedulerError` escaping an
    adapter (a connection error it did not wrap) is taken as a transient SchedulerError: the
    outcome is unknown, so the apply is retried, and a retry re-reads the target first."""
    try:
        return scheduler_for(cluster).apply(change, dry_run=dry_run)
    except SchedulerError:
        raise
    except Exception as exc:
        logger.warning("scheduler of cluster %s raised", cluster.name, exc_info=True)
        raise SchedulerError(f"{type(exc).__name__}: {exc}") from exc


def _is_conflict(exc: SchedulerError) -> bool:
    """A write the scheduler refused because the target changed under it (the adapters' own
    ``from`` check, or Kubernetes' 409 Conflict on a stale resourceVersion)."""
    text = str(exc)
    return "changed since the recommendation" in text or "409 Conflict" in text


# -- people's requests ---------------------------------------------------------------------------


def request_recommendation(rec: Recommendation, user: AbstractBaseUser) -> Recommendation:
    """An SRE asks for a proposed change to be made (someone else then approves it)."""
    with transaction.atomic():
        rec = _locked(rec)
        if not roles.can_apply(user, rec.kind):
            raise WorkflowDenied("requesting a change needs the sre role (or oncall, for a drain)")
        _require_change(rec, "request")
        _require_state(rec, State.PROPOSED, doing="request")
        if rec.requested_by_id is not None:
            raise WorkflowError(f"already requested by {rec.requested_by.get_username()}")
        rec.requested_by = user
        rec.requested_at = timezone.now()
        rec.status_message = ""
        _save(rec, "requested_by", "requested_at", "status_message")
        _audit(rec, _actor(user), "request", after={"change": rec.change})
    return rec


def approve_recommendation(rec: Recommendation, user: AbstractBaseUser) -> Recommendation:
    """Approve a requested change: the ``sre`` role (``oncall`` for a drain) and, except for an
    on-call drain, someone other than the requester. On-call may approve a drain nobody
    requested (it then counts as their own request). The approval lapses after
    ``GPUOBS_APPROVAL_TTL_SECONDS``; a dry run is sent on commit so the diff is shown."""
    from diagnosis.tasks import actuate_dry_run

    with transaction.atomic():
        rec = _locked(rec)
        allowed, why = roles.can_approve(user, rec.kind, requested_by=None)
        if not allowed:
            raise WorkflowDenied(why)
        _require_change(rec, "approve")
        _require_state(rec, State.PROPOSED, doing="approve")
        requester = rec.requested_by
        if requester is None:
            allowed, _ = roles.can_approve(user, rec.kind, requested_by=user)
            if not allowed:
                raise WorkflowDenied(
                    "nobody has requested this change yet: an SRE requests it, another approves it"
                )
            requester = user
        allowed, why = roles.can_approve(user, rec.kind, requested_by=requester)
        if not allowed:
            raise WorkflowDenied(why)
        now = timezone.now()
        rec.requested_by = requester
        rec.requested_at = rec.requested_at or now
        rec.state = State.APPROVED
        rec.approved_by = user
        rec.approved_at = now
        rec.expires_at = now + timedelta(seconds=settings.GPUOBS_APPROVAL_TTL_SECONDS)
        rec.status_message = ""
        _save(
            rec,
            "requested_by",
            "requested_at",
            "state",
            "approved_by",
            "approved_at",
            "expires_at",
            "status_message",
        )
        _audit(
            rec,
            _actor(user),
            "approve",
            before={"state": State.PROPOSED},
            after={"state": State.APPROVED, "expires_at": rec.expires_at.isoformat()},
        )
        actuate_dry_run.delay_on_commit(rec.pk)
    return rec


def reject_recommendation(
    rec: Recommendation, user: AbstractBaseUser, reason: str = ""
) -> Recommendation:
    """Reject a proposed or approved recommendation (advice too: dismissed)."""
    with transaction.atomic():
        rec = _locked(rec)
        if not roles.can_apply(user, rec.kind):
            raise WorkflowDenied("rejecting needs the sre role (or oncall, for a drain)")
        _require_state(rec, State.PROPOSED, State.APPROVED, doing="reject")
        before = rec.state
        rec.state = State.REJECTED
        rec.status_message = reason.strip()[:2000]
        _save(rec, "state", "status_message")
        _audit(
            rec,
            _actor(user),
            "reject",
            before={"state": before},
            after={"state": State.REJECTED, "reason": rec.status_message},
        )
    return rec


def request_dry_run(rec: Recommendation, user: AbstractBaseUser) -> Recommendation:
    """Ask the scheduler, without changing anything, what the change would do (shown as the
    recommendation's diff); runs on the ``actuate`` queue."""
    from diagnosis.tasks import actuate_dry_run

    with transaction.atomic():
        rec = _locked(rec)
        if not roles.can_apply(user, rec.kind):
            raise WorkflowDenied("a dry run needs the sre role (or oncall, for a drain)")
        _require_change(rec, "dry-run")
        _require_state(rec, State.PROPOSED, State.APPROVED, doing="dry-run")
        actuate_dry_run.delay_on_commit(rec.pk)
    return rec


def _lapsed(rec: Recommendation) -> str:
    return f"the approval lapsed at {rec.expires_at:%Y-%m-%d %H:%M} UTC"


def _expire(rec: Recommendation, actor: str, why: str) -> None:
    before = rec.state
    rec.state = State.EXPIRED
    rec.status_message = why
    _save(rec, "state", "status_message")
    if before == State.APPROVED:  # an approval lapsing is a decision undone: on the record
        _audit(rec, actor, "expire", before={"state": before}, after={"state": State.EXPIRED})


def request_apply(rec: Recommendation, user: AbstractBaseUser | None) -> Recommendation:
    """Apply an approved change: ``approved → applying`` with a fresh idempotency key, and the
    apply task (``actuate`` queue) sent on commit. ``user`` None: gpuobs itself (an automatic
    rollback)."""
    from diagnosis.tasks import actuate_recommendation

    lapsed = False
    with transaction.atomic():
        rec = _locked(rec)
        if user is not None and not roles.can_apply(user, rec.kind):
            raise WorkflowDenied("applying needs the sre role (or oncall, for a drain)")
        _require_change(rec, "apply")
        _require_state(rec, State.APPROVED, doing="apply")
        now = timezone.now()
        if rec.expires_at is not None and rec.expires_at <= now:
            _expire(rec, _actor(user), _lapsed(rec))
            lapsed = True
        else:
            rec.state = State.APPLYING
            rec.apply_key = uuid.uuid4().hex
            rec.apply_claimed_at = None
            rec.applied_by = user
            rec.status_message = ""
            _save(rec, "state", "apply_key", "apply_claimed_at", "applied_by", "status_message")
            _audit(
                rec,
                _actor(user),
                "apply-requested",
                before={"state": State.APPROVED},
                after={"state": State.APPLYING, "key": rec.apply_key},
            )
            actuate_recommendation.delay_on_commit(rec.pk, rec.apply_key)
    if lapsed:
        raise WorkflowError(rec.status_message)
    return rec


def request_rollback(rec: Recommendation, user: AbstractBaseUser) -> Recommendation:
    """Undo an applied change now: a new recommendation back to the value before, approved by
    the person asking (it restores a known state) and applied like any other. Returns it."""
    if not roles.can_apply(user, rec.kind):
        raise WorkflowDenied("rolling back needs the sre role (or oncall, for a drain)")
    undo = _create_rollback(rec, user=user, reason="requested by " + user.get_username())
    return request_apply(undo, user)


def _create_rollback(
    rec: Recommendation, *, user: AbstractBaseUser | None, reason: str, approved: bool = True
) -> Recommendation:
    with transaction.atomic():
        rec = _locked(rec)
        _require_change(rec, "roll back")
        _require_state(rec, *APPLIED_STATES, doing="roll back")
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
            _save(other, "state", "status_message")
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
            requested_by=user,
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
        _audit(
            undo,
            _actor(user) if user else SYSTEM_CYCLE,
            "rollback-approved" if approved else "rollback-proposed",
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


# -- the worker side: dry runs and applies -------------------------------------------------------


def run_dry_run(recommendation_id: int) -> dict[str, Any]:
    """The dry run a person asked for (or an approval sent): ask the scheduler, store what it
    said as the recommendation's diff, audit it. Never writes to the scheduler."""
    rec = Recommendation.objects.select_related("cluster").filter(pk=recommendation_id).first()
    if rec is None or rec.state not in (State.PROPOSED, State.APPROVED):
        return {"outcome": "skipped"}
    change = scheduler_change(rec)
    try:
        result = _result_dict(_ask(rec.cluster, change, dry_run=True))
    except SchedulerError as exc:
        result = {"error": str(exc), "permanent": exc.permanent, "at": timezone.now().isoformat()}
    result["target_changed"] = _changed_since(rec, result.get("before"))
    result["writes_enabled"] = not rec.cluster.dry_run
    with transaction.atomic():
        rec = _locked(rec)
        rec.dry_run_result = result
        _save(rec, "dry_run_result")
        _audit(rec, SYSTEM_ACTUATE, "dry-run", before=result.get("before"), after=result)
    return {"outcome": "error" if "error" in result else "ok"}


def _changed_since(rec: Recommendation, before: Any) -> str:
    """Why the target no longer matches the recommendation's ``from`` (empty: it does)."""
    expected = rec.change.get("from")
    if expected is None or before is None or same_value(expected, before):
        return ""
    return (
        f"{rec.target} changed since the recommendation: it is now "
        f"{observed_value(before)!r}, the recommendation expected {expected!r}"
    )


@dataclass
class ApplyOutcome:
    outcome: str  # applied, already, dry-run, changed, failed, duplicate, in-progress
    message: str = ""
    result: dict[str, Any] = field(default_factory=dict)


def _claim(recommendation_id: int, key: str) -> tuple[Recommendation | None, str]:
    """Take the apply of ``key`` for this worker, or say why not (``duplicate``: the key was
    used or replaced; ``in-progress``: another worker holds it)."""
    with transaction.atomic():
        rec = (
            Recommendation.objects.select_for_update()
            .select_related("cluster")
            .filter(pk=recommendation_id)
            .first()
        )
        if rec is None or rec.state != State.APPLYING or rec.apply_key != key:
            return None, "duplicate"
        now = timezone.now()
        stale_after = timedelta(seconds=settings.CELERY_TASK_TIME_LIMIT + 30)
        if rec.apply_claimed_at is not None and now - rec.apply_claimed_at < stale_after:
            return None, "in-progress"
        rec.apply_claimed_at = now
        _save(rec, "apply_claimed_at")
    return rec, ""


def perform_apply(recommendation_id: int, key: str, *, final_attempt: bool = True) -> ApplyOutcome:
    """The apply task's body (see the module doc). Claims ``key``; re-reads the target with a dry
    run; stops when the value changed since the recommendation (back to ``proposed``, with the
    reason), when the cluster's writes are off (back to ``approved``: a dry run only) or when the
    target already has the new value (``applied`` without writing); otherwise writes once,
    guarded by the value just read, and records the outcome. A scheduler that cannot be reached
    raises :class:`TransientApplyError` (the claim released) unless ``final_attempt``."""
    rec, why = _claim(recommendation_id, key)
    if rec is None:
        return ApplyOutcome(why)
    cluster = rec.cluster
    change = scheduler_change(rec)
    try:
        dry = _ask(cluster, change, dry_run=True)
    except SchedulerError as exc:
        return _apply_error(rec, key, exc, "dry run", final_attempt)
    dry_result = _result_dict(dry)
    target_value = change.get(
        "to", "drained" if rec.kind == RecommendationKind.DRAIN_NODE else None
    )
    if change["kind"] != "resume-node" and same_value(dry.before, target_value):
        return _record_applied(rec, key, dry_result, dry_result, already=True)
    changed = _changed_since(rec, dry.before)
    if changed:
        return _back_to_proposed(rec, key, changed, dry_result)
    if cluster.dry_run:
        return _record_dry_run_only(rec, key, dry_result)
    guarded = dict(change)
    if rec.kind in (RecommendationKind.PLACEMENT_POLICY, RecommendationKind.QUEUE_WEIGHT):
        guarded["from"] = dry.before  # refused if it changed between the dry run and the write
    try:
        result = _ask(cluster, guarded, dry_run=False)
    except SchedulerError as exc:
        if _is_conflict(exc):
            return _back_to_proposed(rec, key, str(exc), dry_result)
        return _apply_error(rec, key, exc, "write", final_attempt)
    return _record_applied(rec, key, dry_result, _result_dict(result), already=False)


def _relock(rec: Recommendation, key: str) -> Recommendation | None:
    rec = _locked(rec)
    return rec if rec.state == State.APPLYING and rec.apply_key == key else None


def _record_applied(
    rec: Recommendation,
    key: str,
    dry_result: dict[str, Any],
    result: dict[str, Any],
    *,
    already: bool,
) -> ApplyOutcome:
    baseline = _baseline(rec)
    with transaction.atomic():
        locked = _relock(rec, key)
        if locked is None:
            return ApplyOutcome("duplicate")
        rec = locked
        now = timezone.now()
        rec.state = State.APPLIED
        rec.applied_at = now
        rec.dry_run_result = dry_result
        rec.apply_result = result
        rec.status_message = (
            f"{rec.target} already had the new value: nothing was written" if already else ""
        )
        rec.verification = baseline
        _save(
            rec,
            "state",
            "applied_at",
            "dry_run_result",
            "apply_result",
            "status_message",
            "verification",
        )
        actor = _actor(rec.applied_by)
        _audit(
            rec,
            actor,
            "apply" if not already else "apply-already-in-place",
            before=result.get("before"),
            after={
                "value": result.get("after"),
                "command": result.get("command"),
                "answer": result.get("message"),
                "dry_run_command": dry_result.get("command"),
                "written": not already,
            },
        )
        if rec.rollback_of_id is not None:
            original = _locked(rec.rollback_of_id)
            if original.state in APPLIED_STATES:
                original.state = State.ROLLED_BACK
                original.status_message = f"rolled back by #{rec.pk}"
                _save(original, "state", "status_message")
                _audit(
                    original,
                    actor,
                    "rolled-back",
                    before={"value": original.change.get("to")},
                    after={"value": rec.change.get("to"), "by": rec.pk},
                )
    return ApplyOutcome("already" if already else "applied", rec.status_message, result)


def _back_to_proposed(
    rec: Recommendation, key: str, reason: str, dry_result: dict[str, Any]
) -> ApplyOutcome:
    with transaction.atomic():
        locked = _relock(rec, key)
        if locked is None:
            return ApplyOutcome("duplicate")
        rec = locked
        rec.state = State.PROPOSED
        rec.approved_by = None
        rec.approved_at = None
        rec.expires_at = None
        rec.apply_claimed_at = None
        rec.dry_run_result = {**dry_result, "target_changed": reason}
        rec.status_message = f"not applied: {reason}; it needs a new approval"
        _save(
            rec,
            "state",
            "approved_by",
            "approved_at",
            "expires_at",
            "apply_claimed_at",
            "dry_run_result",
            "status_message",
        )
        _audit(
            rec,
            SYSTEM_ACTUATE,
            "apply-stopped-target-changed",
            before={"expected": rec.change.get("from")},
            after={"found": dry_result.get("before"), "reason": reason},
        )
    return ApplyOutcome("changed", reason, dry_result)


def _record_dry_run_only(rec: Recommendation, key: str, dry_result: dict[str, Any]) -> ApplyOutcome:
    with transaction.atomic():
        locked = _relock(rec, key)
        if locked is None:
            return ApplyOutcome("duplicate")
        rec = locked
        rec.state = State.APPROVED
        rec.apply_claimed_at = None
        rec.dry_run_result = {**dry_result, "writes_enabled": False}
        rec.status_message = (
            f"dry run only: writes are off for cluster {rec.cluster.name} (an admin turns them "
            "on); nothing was written"
        )
        _save(rec, "state", "apply_claimed_at", "dry_run_result", "status_message")
        _audit(
            rec,
            _actor(rec.applied_by),
            "apply-dry-run",
            before=dry_result.get("before"),
            after={
                "value": dry_result.get("after"),
                "command": dry_result.get("command"),
                "answer": dry_result.get("message"),
                "written": False,
            },
        )
    return ApplyOutcome("dry-run", rec.status_message, dry_result)


def _apply_error(
    rec: Recommendation, key: str, exc: SchedulerError, stage: str, final_attempt: bool
) -> ApplyOutcome:
    if not exc.permanent and not final_attempt:
        with transaction.atomic():
            locked = _relock(rec, key)
            if locked is not None:
                locked.apply_claimed_at = None
                locked.status_message = f"retrying: the {stage} failed: {exc}"
                _save(locked, "apply_claimed_at", "status_message")
        raise TransientApplyError(str(exc)) from exc
    with transaction.atomic():
        locked = _relock(rec, key)
        if locked is None:
            return ApplyOutcome("duplicate")
        rec = locked
        rec.state = State.FAILED
        rec.status_message = f"the {stage} failed: {exc}"
        _save(rec, "state", "status_message")
        _audit(
            rec,
            SYSTEM_ACTUATE,
            "apply-failed",
            before={"change": scheduler_change(rec)},
            after={"stage": stage, "error": str(exc), "permanent": exc.permanent},
        )
    return ApplyOutcome("failed", rec.status_message)


def _baseline(rec: Recommendation) -> dict[str, Any]:
    """What verification compares against: the target metric in the latest good cycle."""
    cycle = (
        ClusterCycle.objects.filter(cluster_id=rec.cluster_id, ok=True)
        .order_by("-as_of")
        .only("as_of", "accounting")
        .first()
    )
    metric = verify.metric_for(rec.kind)
    out: dict[str, Any] = {
        "status": verify.WATCHING,
        "reason": "applied; watching the next cycles",
        "since_as_of": cycle.as_of.isoformat() if cycle else None,
        "metric": metric.name if metric and rec.rollback_of_id is None else None,
        "baseline": None,
        "observations": [],
    }
    if cycle is None or out["metric"] is None:
        return out
    latest = Snapshot.objects.filter(cluster_id=rec.cluster_id, as_of=cycle.as_of).first()
    if latest is None:
        return out
    from diagnosis.recommend.base import plain

    try:
        # plain(): a stored document may carry NaN for absent text fields (snapshot.dump writes
        # a missing pending_reason as NaN), which the loader rightly refuses.
        snap = snapshot_format.load(plain(latest.load_document()))
    except snapshot_format.SnapshotError as exc:
        out["baseline_note"] = f"the latest snapshot could not be read: {exc}"
        return out
    out["baseline"], note = verify.measure(rec.kind, rec.target, snap, cycle.accounting)
    if note:
        out["baseline_note"] = note
    return out


# -- the cycle: propose, expire, verify (DESIGN.md section 3, step 4) ----------------------------


def verify_settings() -> verify.VerifySettings:
    return verify.VerifySettings(
        cycles=settings.GPUOBS_VERIFY_CYCLES,
        max_cycles=settings.GPUOBS_VERIFY_MAX_CYCLES,
        tolerance=settings.GPUOBS_VERIFY_TOLERANCE_PCT / 100,
    )


def record_recommendations(
    cluster: Cluster,
    snap: snapshot_format.ClusterSnapshot,
    diagnosis: Any,
    accounting: Mapping[str, Any],
) -> dict[str, Any]:
    """The cycle's recommend step, after its findings are recorded: lapse old approvals, verify
    applied changes against this cycle, and upsert the generators' proposals (one open
    recommendation per ``(cluster, kind, target)``: a different change for a target supersedes
    the open one; the same change keeps it and its impact, which is not simulated again). A
    proposal nobody approved whose findings have all resolved, and that this cycle did not
    propose again, expires. Returns what it did, with its timings (kept on the cycle)."""
    from diagnosis.recommend.engine import recommend

    started = time.perf_counter()
    stats: dict[str, Any] = {"proposed": 0, "kept": 0, "superseded": 0, "expired": 0}
    as_of = snap.as_of.to_pydatetime()
    open_changes = {
        (r.kind, r.target): r.change
        for r in Recommendation.objects.filter(cluster=cluster, state__in=OPEN_STATES).only(
            "kind", "target", "change"
        )
    }
    rejected = _recently_rejected(cluster)

    def keep_impact(draft: Any) -> str | None:
        change = _plain_change(draft.change)
        if open_changes.get((draft.kind, draft.target)) == change:
            return "kept from the open recommendation with the same change"
        if (draft.kind, draft.target, _change_key(change)) in rejected:
            return "rejected recently: not proposed again"
        return None

    run = recommend(snap, diagnosis, skip_impact=keep_impact)
    stats["generators_s"] = round(run.seconds.get("generators", 0.0), 3)
    stats["impact_s"] = round(run.seconds.get("impact", 0.0), 3)
    stats["errors"] = [e.as_dict() for e in run.errors]
    proposed_keys = {(r.kind, r.target) for r in run.recommendations}
    with transaction.atomic():  # the replays ran before: no row is locked while they run
        stats["lapsed"] = _lapse_approvals(cluster)
        stats.update(_verify_applied(cluster, snap, diagnosis, accounting))
        existing = {
            (r.kind, r.target): r
            for r in Recommendation.objects.select_for_update().filter(
                cluster=cluster, state__in=OPEN_STATES
            )
        }
        keys = {
            Finding.fingerprint_of(cluster.pk, rule, subject)
            for r in run.recommendations
            for rule, subject in r.finding_keys()
        }
        findings = {
            (f.rule_id, f.subject): f
            for f in Finding.objects.filter(cluster=cluster, fingerprint__in=keys)
        }
        stats["quiet"] = 0
        for proposal in run.recommendations:
            fields = proposal.stored_fields()
            if (proposal.kind, proposal.target, _change_key(fields["change"])) in rejected:
                stats["quiet"] += 1  # someone said no to exactly this change lately
                continue
            old = existing.get((proposal.kind, proposal.target))
            if old is not None and (old.state == State.APPLYING or old.rollback_of_id):
                stats["kept"] += 1
                continue
            if old is not None and old.change == fields["change"]:
                old.last_proposed_as_of = as_of
                _save(old, "last_proposed_as_of")
                stats["kept"] += 1
                continue
            if old is not None:  # leaves the open states first: one open per target
                old.state = State.SUPERSEDED
                _save(old, "state")
                stats["superseded"] += 1
            new = Recommendation.objects.create(
                cluster=cluster,
                state=State.PROPOSED,
                proposed_as_of=as_of,
                last_proposed_as_of=as_of,
                **fields,
            )
            if old is not None:
                old.status_message = f"superseded by #{new.pk}: {_describe(fields['change'])}"
                _save(old, "status_message")
            new.motivating_findings.set(
                [findings[k] for k in proposal.finding_keys() if k in findings]
            )
            stats["proposed"] += 1
        stats["expired"] = _expire_resolved(cluster, proposed_keys, snap)
    stats["seconds"] = round(time.perf_counter() - started, 3)
    return stats


def _change_key(change: Mapping[str, Any]) -> str:
    return json.dumps(change, sort_keys=True, default=str)


def _recently_rejected(cluster: Cluster) -> set[tuple[str, str, str]]:
    """``(kind, target, change)`` of the changes people rejected in the last
    :data:`REJECTION_QUIET`: the cycle does not propose exactly those again meanwhile."""
    since = timezone.now() - REJECTION_QUIET
    rows = Recommendation.objects.filter(
        cluster=cluster, state=State.REJECTED, updated_at__gte=since
    ).values_list("kind", "target", "change")
    return {(kind, target, _change_key(change)) for kind, target, change in rows}


def _describe(change: Mapping[str, Any]) -> str:
    return f"{change.get('from')!r} → {change.get('to')!r}" if "to" in change else "new advice"


def _plain_change(change: Mapping[str, Any]) -> dict[str, Any]:
    from diagnosis.recommend.base import plain

    return plain(dict(change))


def _lapse_approvals(cluster: Cluster) -> int:
    now = timezone.now()
    lapsed = 0
    with transaction.atomic():
        for rec in Recommendation.objects.select_for_update().filter(
            cluster=cluster, state=State.APPROVED, expires_at__lte=now
        ):
            _expire(rec, SYSTEM_CYCLE, _lapsed(rec))
            lapsed += 1
    return lapsed


def _expire_resolved(
    cluster: Cluster, proposed_keys: set[tuple[str, str]], snap: snapshot_format.ClusterSnapshot
) -> int:
    """Expire proposals the cycle no longer makes: a drain once the node is drained or down (an
    Xid leaves the rule's window long before the GPU is fixed, so its finding resolving says
    nothing); any other once all its motivating findings have resolved."""
    stale = Recommendation.objects.select_for_update().filter(
        cluster=cluster, state=State.PROPOSED, rollback_of__isnull=True
    )
    nodes = snap.nodes
    expired = 0
    for rec in stale:
        if (rec.kind, rec.target) in proposed_keys:
            continue
        if rec.kind == RecommendationKind.DRAIN_NODE:
            node = rec.target.removeprefix("node:")
            state = str(nodes.at[node, "state"]) if node in nodes.index else None
            if state in ("drained", "down"):
                _expire(rec, SYSTEM_CYCLE, f"node {node} is {state} already")
                expired += 1
            continue
        if rec.motivating_findings.exclude(state=FindingState.RESOLVED).exists():
            continue
        _expire(rec, SYSTEM_CYCLE, "its findings resolved and the cycle no longer proposes it")
        expired += 1
    return expired


def _verify_applied(
    cluster: Cluster,
    snap: snapshot_format.ClusterSnapshot,
    diagnosis: Any,
    accounting: Mapping[str, Any],
) -> dict[str, int]:
    """Observe every applied (not yet verified) change in this cycle and act on the verdict."""
    counts = {"verified": 0, "worse": 0}
    as_of = snap.as_of.to_pydatetime()
    reported = {(f.rule, f.subject) for f in diagnosis.findings}
    facts = getattr(diagnosis, "facts", None)
    config = verify_settings()
    worse: list[tuple[Recommendation, str]] = []
    with transaction.atomic():
        applied = Recommendation.objects.select_for_update().filter(
            cluster=cluster, state=State.APPLIED
        )
        for rec in applied:
            data = dict(rec.verification or {})
            if data.get("status") in (verify.INCONCLUSIVE, verify.WORSE):
                continue
            since = data.get("since_as_of")
            if since and as_of <= datetime.fromisoformat(since):
                continue
            motivating = [(f.rule_id, f.subject) for f in rec.motivating_findings.all()]
            observation = verify.observe(
                rec.kind,
                rec.target,
                rec.change.get("to"),
                motivating,
                snap,
                reported,
                accounting,
                facts,
            )
            observations = [*data.get("observations", []), observation.as_dict()]
            observations = observations[-MAX_OBSERVATIONS:]
            judgement = verify.judge(
                rec.kind,
                data.get("baseline"),
                [verify.Observation.of(o) for o in observations],
                config,
                rollback=rec.rollback_of_id is not None,
            )
            data.update(
                observations=observations,
                status=judgement.status,
                reason=judgement.reason,
                cycles=len(observations),
            )
            rec.verification = data
            fields = ["verification"]
            if judgement.status == verify.VERIFIED:
                rec.state = State.VERIFIED
                rec.status_message = judgement.reason
                fields += ["state", "status_message"]
                _audit(
                    rec,
                    SYSTEM_CYCLE,
                    "verify",
                    before={"baseline": data.get("baseline")},
                    after={"observation": observation.as_dict(), "reason": judgement.reason},
                )
                counts["verified"] += 1
            elif judgement.status == verify.WORSE:
                rec.status_message = f"worse since applied: {judgement.reason}"
                fields.append("status_message")
                _audit(
                    rec,
                    SYSTEM_CYCLE,
                    "verify-worse",
                    before={"baseline": data.get("baseline")},
                    after={"observation": observation.as_dict(), "reason": judgement.reason},
                )
                worse.append((rec, judgement.reason))
                counts["worse"] += 1
            _save(rec, *fields)
    for rec, reason in worse:
        _roll_back_worse(cluster, rec, reason)
    return counts


def _roll_back_worse(cluster: Cluster, rec: Recommendation, reason: str) -> None:
    """Propose the rollback of a change that made things worse, or, with the cluster's
    ``auto_rollback``, perform it (as gpuobs, audited)."""
    why = f"the target metric got worse: {reason}"
    try:
        undo = _create_rollback(rec, user=None, reason=why, approved=cluster.auto_rollback)
        if cluster.auto_rollback:
            request_apply(undo, None)
    except WorkflowError as exc:
        logger.warning("rollback of recommendation %s not made: %s", rec.pk, exc)
