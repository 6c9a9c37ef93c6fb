"""Applying an approved change (the ``actuate`` queue), idempotently.

:func:`~diagnosis.actions.workflow.review.request_apply` stores a fresh key on the recommendation
and
sends it with the task; :func:`perform_apply` claims that key in a transaction before touching
the scheduler, so a redelivered message (Celery acks late) finds it claimed or used and does
nothing. It re-reads the target (a dry run: Kubernetes ``dryRun=All``, the exact Slurm command,
the simulator's check) and stops if the value changed since the recommendation; with the
cluster's write switch off (``Cluster.dry_run``, on by default, only an admin turns it off) it
stops there; otherwise it writes once, guarded by the value it just read, and records
before/after and the scheduler's answer.

An apply never stays in ``applying`` (issue #18): the task is published after the request
commits, and a publish the broker refuses puts the recommendation back to ``approved``
(:func:`publish_apply`, answered 503); a claim older than the hard time limit belongs to a dead
worker (an OOM-killed pool process, a killed worker), and the sweeper beat sends every period
(:func:`sweep_stuck_applies`), or a person's re-check (:func:`recheck_apply`), sends the apply
again: its dry run re-reads the target, so a change already written is recorded as applied
without being written twice.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import partial
from typing import Any

from django.conf import settings
from django.contrib.auth.base_user import AbstractBaseUser
from django.db import models, transaction
from django.utils import timezone

from diagnosis import roles
from diagnosis.actions.enqueue import send_apply
from diagnosis.actions.upkeep.health import database_now
from diagnosis.actions.workflow.base import (
    APPLIED_STATES,
    NO_APPROVAL,
    SYSTEM_ACTUATE,
    SYSTEM_SWEEP,
    ApplyNotSent,
    TransientApplyError,
    WorkflowDenied,
    WorkflowError,
    actor_name,
    audit,
    lock_recommendation,
    require_state,
    save_fields,
    update_fields,
)
from diagnosis.choices import RecommendationKind, RecommendationState
from diagnosis.core import snapshot as snapshot_format
from diagnosis.core.recommend import verify
from diagnosis.core.recommend.base import plain
from diagnosis.edge.schedulers.base import (
    ChangeResult,
    OwnClock,
    SchedulerAdapter,
    SchedulerError,
    observed_value,
    same_value,
)
from diagnosis.edge.schedulers.registry import adapter_spec
from diagnosis.models import AuditEntry, Cluster, ClusterCycle, Recommendation, Snapshot

State = RecommendationState
logger = logging.getLogger(__name__)


def scheduler_change(rec: Recommendation) -> dict[str, Any]:
    """The recommendation's change in the adapters' shape (``{"kind", "target", "to"[,
    "reason"]}``); undoing a drain is a ``resume-node``."""
    if rec.kind == RecommendationKind.DRAIN_NODE and rec.change.get("to") == "ready":
        return {"kind": "resume-node", "target": rec.target}
    out = {"kind": rec.kind, "target": rec.target, "to": rec.change.get("to")}
    if rec.change.get("reason"):
        out["reason"] = rec.change["reason"]
    if rec.change.get("field"):  # which knob of the queue (Volcano capacity: deserved)
        out["field"] = rec.change["field"]
    return out


def result_dict(result: ChangeResult) -> dict[str, Any]:
    return {
        "applied": result.applied,
        "dry_run": result.dry_run,
        "before": result.before,
        "after": result.after,
        "command": result.command,
        "message": result.message,
        "at": timezone.now().isoformat(),
    }


def scheduler_for(cluster: Cluster) -> SchedulerAdapter:
    """The adapter that applies changes to a cluster (its ``scheduler_kind``), built from the
    cluster's ``scheduler_config``. A scheduler with a clock of its own (the simulator) is told
    the time of the cluster's latest good snapshot, so it checks and applies a change against
    the cluster's current state in any process, not at the time of this process's copy."""
    adapter = adapter_spec(cluster.scheduler_kind).build(
        cluster.scheduler_config, cluster=cluster.name
    )
    if isinstance(adapter, OwnClock):
        latest = (
            ClusterCycle.objects.filter(cluster_id=cluster.pk, ok=True)
            .order_by("-as_of")
            .values_list("as_of", flat=True)
            .first()
        )
        adapter.follow(now=None, previous_as_of=latest)
    return adapter


def record_scheduler_change(cluster: Cluster, record: Mapping[str, Any]) -> None:
    """Append an accepted change to the cluster's replayable change log
    (``scheduler_config["changes"]``); the caller holds the cluster's row lock."""
    config = dict(cluster.scheduler_config)
    config["changes"] = [*config.get("changes", []), dict(record)]
    cluster.scheduler_config = config
    cluster.save(update_fields=["scheduler_config"])


def _apply(cluster: Cluster, change: Mapping[str, Any], *, dry_run: bool) -> ChangeResult:
    """One ``apply`` of the cluster's adapter. An adapter that keeps its changes in the
    cluster's ``scheduler_config`` (the registry's ``change_log``: the simulator) is built from
    the cluster's latest row -- for a write, locked, and the ``ChangeResult.record`` it returns
    is appended to the log in the same transaction."""
    if not adapter_spec(cluster.scheduler_kind).change_log:
        return scheduler_for(cluster).apply(change, dry_run=dry_run)
    rows = Cluster.objects.filter(pk=cluster.pk)
    if dry_run:
        return scheduler_for(rows.get()).apply(change, dry_run=True)
    with transaction.atomic():
        latest = rows.select_for_update().get()
        result = scheduler_for(latest).apply(change, dry_run=False)
        if result.record is not None:
            record_scheduler_change(latest, result.record)
    return result


def ask_scheduler(cluster: Cluster, change: Mapping[str, Any], *, dry_run: bool) -> ChangeResult:
    """One call to the cluster's scheduler. Anything but a :class:`SchedulerError` escaping an
    adapter (a connection error it did not wrap) is taken as a transient SchedulerError: the
    outcome is unknown, so the apply is retried, and a retry re-reads the target first."""
    try:
        return _apply(cluster, change, dry_run=dry_run)
    except SchedulerError:
        raise
    except Exception as exc:
        logger.warning("scheduler of cluster %s raised", cluster.name, exc_info=True)
        raise SchedulerError(f"{type(exc).__name__}: {exc}") from exc


def is_conflict(exc: SchedulerError) -> bool:
    """A write the scheduler refused because the target changed under it (the adapters' own
    ``from`` check, or Kubernetes' 409 Conflict on a stale resourceVersion): the adapter says
    so with ``conflict``."""
    return exc.conflict


def run_dry_run(recommendation_id: int) -> dict[str, Any]:
    """The dry run a person asked for (or an approval sent): ask the scheduler, store what it
    said as the recommendation's diff, audit it. Never writes to the scheduler."""
    rec = Recommendation.objects.select_related("cluster").filter(pk=recommendation_id).first()
    if rec is None or rec.state not in (State.PROPOSED, State.APPROVED):
        return {"outcome": "skipped"}
    change = scheduler_change(rec)
    try:
        result = result_dict(ask_scheduler(rec.cluster, change, dry_run=True))
    except SchedulerError as exc:
        result = {"error": str(exc), "permanent": exc.permanent, "at": timezone.now().isoformat()}
    result["target_changed"] = _changed_since(rec, result.get("before"))
    result["writes_enabled"] = not rec.cluster.dry_run
    with transaction.atomic():
        rec = lock_recommendation(rec)
        rec.dry_run_result = result
        save_fields(rec, "dry_run_result")
        audit(rec, SYSTEM_ACTUATE, "dry-run", before=result.get("before"), after=result)
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
        now = database_now()  # one clock: a skewed worker never takes over a live claim
        if rec.apply_claimed_at is not None and now - rec.apply_claimed_at < claim_stale_after():
            return None, "in-progress"
        rec.apply_claimed_at = now
        save_fields(rec, "apply_claimed_at")
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
        dry = ask_scheduler(cluster, change, dry_run=True)
    except SchedulerError as exc:
        return _apply_error(rec, key, exc, "dry run", final_attempt)
    dry_result = result_dict(dry)
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
    if rec.kind in (
        RecommendationKind.PLACEMENT_POLICY,
        RecommendationKind.QUEUE_WEIGHT,
        RecommendationKind.GANG_RELEASE,
    ):
        guarded["from"] = dry.before  # refused if it changed between the dry run and the write
    try:
        result = ask_scheduler(cluster, guarded, dry_run=False)
    except SchedulerError as exc:
        if is_conflict(exc):
            return _back_to_proposed(rec, key, str(exc), dry_result)
        return _apply_error(rec, key, exc, "write", final_attempt)
    return _record_applied(rec, key, dry_result, result_dict(result), already=False)


def _relock(rec: Recommendation, key: str) -> Recommendation | None:
    rec = lock_recommendation(rec)
    return rec if rec.state == State.APPLYING and rec.apply_key == key else None


def _record_applied(
    rec: Recommendation,
    key: str,
    dry_result: dict[str, Any],
    result: dict[str, Any],
    *,
    already: bool,
) -> ApplyOutcome:
    baseline = verification_baseline(rec)
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
        rec.status_message = ""
        if already:
            rec.status_message = f"{rec.target} already had the new value: nothing was written"
            if AuditEntry.objects.filter(recommendation=rec, action="apply-rechecked").exists():
                rec.status_message = (
                    f"{rec.target} already had the new value: an earlier attempt of this apply "
                    "wrote it before its worker died; recorded as applied, nothing written again"
                )
        rec.verification = baseline
        save_fields(
            rec,
            "state",
            "applied_at",
            "dry_run_result",
            "apply_result",
            "status_message",
            "verification",
        )
        actor = actor_name(rec.applied_by)
        audit(
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
            original = lock_recommendation(rec.rollback_of_id)
            if original.state in APPLIED_STATES:
                update_fields(
                    original, state=State.ROLLED_BACK, status_message=f"rolled back by #{rec.pk}"
                )
                audit(
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
        update_fields(
            rec,
            state=State.PROPOSED,
            **NO_APPROVAL,
            apply_claimed_at=None,
            dry_run_result={**dry_result, "target_changed": reason},
            status_message=f"not applied: {reason}; it needs a new approval",
        )
        audit(
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
        save_fields(rec, "state", "apply_claimed_at", "dry_run_result", "status_message")
        audit(
            rec,
            actor_name(rec.applied_by),
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
                save_fields(locked, "apply_claimed_at", "status_message")
        raise TransientApplyError(str(exc)) from exc
    with transaction.atomic():
        locked = _relock(rec, key)
        if locked is None:
            return ApplyOutcome("duplicate")
        rec = locked
        rec.state = State.FAILED
        rec.status_message = f"the {stage} failed: {exc}"
        save_fields(rec, "state", "status_message")
        audit(
            rec,
            SYSTEM_ACTUATE,
            "apply-failed",
            before={"change": scheduler_change(rec)},
            after={"stage": stage, "error": str(exc), "permanent": exc.permanent},
        )
    return ApplyOutcome("failed", rec.status_message)


def verification_baseline(rec: Recommendation) -> dict[str, Any]:
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


# -- publishing and re-driving (issue #18) -------------------------------------------------------


def claim_stale_after() -> timedelta:
    """A claim older than this was made by a task the worker's hard time limit has killed."""
    return timedelta(seconds=settings.GPUOBS_APPLY_CLAIM_STALE_SECONDS)


def publish_apply_on_commit(recommendation_id: int, key: str) -> None:
    """Publish the apply once the request (or re-check) commits: :func:`publish_apply`."""
    transaction.on_commit(partial(publish_apply, recommendation_id, key))


def publish_apply(recommendation_id: int, key: str) -> None:
    """Send the apply task (after the request committed). When the broker refuses it, put the
    recommendation back to ``approved`` (audited ``apply-not-sent``) and raise
    :class:`ApplyNotSent` (503): nothing is left in ``applying`` with no task to finish it."""
    try:
        send_apply(recommendation_id, key)
    except Exception as exc:  # kombu's OperationalError, redis' ConnectionError, OSError
        logger.warning("apply of recommendation %s not sent: %r", recommendation_id, exc)
        _withdraw_apply(recommendation_id, key, exc)
        raise ApplyNotSent(
            "the task queue (Redis) is unreachable: nothing was applied and the approval "
            "stands; try again once it is back"
        ) from exc


def _withdraw_apply(recommendation_id: int, key: str, exc: Exception) -> None:
    with transaction.atomic():
        rec = lock_recommendation(recommendation_id)
        if rec.state != State.APPLYING or rec.apply_key != key or rec.apply_claimed_at:
            return
        rec.state = State.APPROVED
        rec.apply_key = ""
        rec.status_message = "apply not sent: the task queue was unreachable"
        save_fields(rec, "state", "apply_key", "status_message")
        audit(
            rec,
            actor_name(rec.applied_by),
            "apply-not-sent",
            before={"state": State.APPLYING, "key": key},
            after={"state": State.APPROVED, "error": f"{type(exc).__name__}: {exc}"[:300]},
        )


def apply_stuck_since(rec: Recommendation, now: datetime) -> datetime | None:
    """When ``rec``'s apply got stuck (None: it is not): ``applying`` with a claim older than
    the hard time limit, or with no claim that long after it was requested (no task came)."""
    if rec.state != State.APPLYING:
        return None
    since = rec.apply_claimed_at or rec.updated_at
    return since if now - since >= claim_stale_after() else None


def stuck_applies(now: datetime | None = None) -> list[Recommendation]:
    now = now or database_now()
    limit = now - claim_stale_after()
    return list(
        Recommendation.objects.filter(state=State.APPLYING)
        .filter(
            models.Q(apply_claimed_at__lte=limit)
            | models.Q(apply_claimed_at__isnull=True, updated_at__lte=limit)
        )
        .order_by("pk")
    )


def recheck_apply(rec: Recommendation, user: AbstractBaseUser | None) -> Recommendation:
    """Send a stuck apply again (the page's "Re-check"; the sweeper with ``user`` None). The
    claim is released and the same key sent: the task's dry run re-reads the target first, so
    a change the dead worker wrote is recorded as applied, never written twice. A person needs
    the role that may apply the change (a viewer may not re-drive it)."""
    if user is not None and not roles.can_apply(user, rec.kind):
        raise WorkflowDenied("re-checking an apply needs the sre role (or oncall, for a drain)")
    with transaction.atomic():
        rec = lock_recommendation(rec)
        require_state(rec, State.APPLYING, doing="re-check")
        now = database_now()
        since = apply_stuck_since(rec, now)
        if since is None:
            raise WorkflowError("the apply is still in progress: re-check it once it is stuck")
        claimed = rec.apply_claimed_at
        rec.apply_claimed_at = None
        rec.status_message = (
            f"re-checking: the apply was stuck since {since:%H:%M:%S} UTC "
            f"({'its worker died' if claimed else 'no worker took it'})"
        )
        save_fields(rec, "apply_claimed_at", "status_message")
        audit(
            rec,
            user.get_username() if user is not None else SYSTEM_SWEEP,
            "apply-rechecked",
            before={"claimed_at": claimed.isoformat() if claimed else None},
            after={"key": rec.apply_key, "stuck_since": since.isoformat()},
        )
        publish_apply_on_commit(rec.pk, rec.apply_key)
    return rec


def sweep_stuck_applies() -> list[int]:
    """Re-drive every stuck apply (beat, every cycle period); the ids re-driven."""
    done = []
    for rec in stuck_applies():
        try:
            recheck_apply(rec, None)
        except (WorkflowError, ApplyNotSent) as exc:
            logger.warning("stuck apply of recommendation %s not re-driven: %s", rec.pk, exc)
            continue
        done.append(rec.pk)
    return done
