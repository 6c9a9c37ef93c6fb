"""The autopilot step, after each cycle commits (``diagnosis.tasks.run_autopilot``, sent by name):
the approved policies decide on the cluster's open recommendations (the core's
:func:`~diagnosis.core.autopilot.guards.decide`), and what they may apply goes through the
recommendation workflow as a person's change does -- :func:`approve_by_policy` (the policy's
writer as requester, its approver as approver), then :func:`request_apply`: the same dry run
against the present, the same idempotent apply, the same audit and verification, and the
cluster's write switch still holds. What a guard held back is recorded with its reason; an
applied drain goes on its incident's timeline with who approved the policy and how to undo it;
on-call is told through the notify step (Alertmanager, ``GpuobsAutopilotAction``). A change a
policy applied that then regressed turns the policy to dry run (docs/autopilot.md).
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from django.db import transaction
from django.urls import reverse
from django.utils import timezone

from diagnosis.actions.autopilot.candidates import candidates_of, health_of, pools_of
from diagnosis.actions.autopilot.policies import (
    demote_policy,
    kill_switch,
    policies_in_force,
    spec_of,
)
from diagnosis.actions.notify.alertmanager import notify_after_cycle
from diagnosis.actions.oncall.drain import drain_impact, note_drain_on_incident
from diagnosis.actions.oncall.incidents import UNRESOLVED, lock_incident
from diagnosis.actions.workflow.base import ApplyNotSent, WorkflowError, actor_name
from diagnosis.actions.workflow.review import approve_by_policy, request_apply
from diagnosis.choices import RecommendationKind, RecommendationState
from diagnosis.core.autopilot import guards
from diagnosis.core.autopilot.guards import Decision, Done, decide
from diagnosis.core.recommend import verify
from diagnosis.models import (
    AutopilotDecision,
    AutopilotOutcome,
    Cluster,
    ClusterCycle,
    Incident,
    PolicyMode,
    Recommendation,
    RemediationPolicy,
)

logger = logging.getLogger(__name__)

OUTCOMES = {
    guards.APPLY: AutopilotOutcome.APPLIED,
    guards.WOULD_APPLY: AutopilotOutcome.WOULD_APPLY,
    guards.HELD: AutopilotOutcome.HELD,
}
WORKFLOW_REFUSED = "workflow"  # the recommendation's state did not allow it (a person acted)


def actor_of(policy: RemediationPolicy) -> str:
    return f"policy:{policy.name}"


def _record(
    policy: RemediationPolicy,
    cluster: Cluster,
    cycle: ClusterCycle,
    decision: Decision,
    *,
    outcome: str | None = None,
    guard: str | None = None,
    reason: str | None = None,
) -> AutopilotDecision:
    return AutopilotDecision.objects.create(
        policy=policy,
        policy_version=policy.version,
        cluster=cluster,
        recommendation_id=decision.recommendation,
        as_of=cycle.as_of,
        outcome=outcome or OUTCOMES[decision.outcome],
        guard=decision.guard if guard is None else guard,
        reason=(decision.reason if reason is None else reason)[:4000],
        kind=decision.kind,
        target=decision.target,
        pool=decision.pool or "",
        gpus_out=decision.gpus_out,
        written_by=actor_name(policy.written_by) if policy.written_by_id else "",
        approved_by=actor_name(policy.approved_by) if policy.approved_by_id else "",
    )


def undo_text(rec: Recommendation) -> str:
    """How to undo what a policy applied, for on-call."""
    page = reverse(
        "diagnosis:recommendation",
        kwargs={"name": rec.cluster.name, "recommendation_id": rec.pk},
    )
    what = (
        f"puts {rec.target.removeprefix('node:')} back in service"
        if rec.kind == RecommendationKind.DRAIN_NODE
        else "restores the value before"
    )
    return f"to undo: Roll back recommendation #{rec.pk} ({page}; {what}, a second person approves)"


def _people(policy: RemediationPolicy) -> str:
    writer = actor_name(policy.written_by) if policy.written_by_id else "(gone)"
    approver = actor_name(policy.approved_by) if policy.approved_by_id else "(gone)"
    return f"version {policy.version}, written by {writer}, approved by {approver}"


def _note_on_incident(policy: RemediationPolicy, rec: Recommendation, cluster: Cluster) -> None:
    """An applied drain goes on the open incidents of its node: who (the policy and its two
    people), what it evicts, how to undo it; the cycle then notes each job it preempted."""
    node = rec.target.removeprefix("node:")
    for incident in Incident.objects.filter(cluster=cluster, node=node, state__in=UNRESOLVED):
        incident = lock_incident(incident)
        if incident.drain_id == rec.pk:
            continue
        impact = drain_impact(cluster, incident)
        note_drain_on_incident(
            incident,
            rec,
            impact,
            actor=actor_of(policy),
            text=f"drain of {node} by policy {policy.name} ({_people(policy)}): "
            f"{impact['headline']}; {undo_text(rec)}",
            extra={
                "policy": policy.name,
                "policy_version": policy.version,
                "written_by": actor_name(policy.written_by) if policy.written_by_id else "",
                "approved_by": actor_name(policy.approved_by) if policy.approved_by_id else "",
            },
        )


def _apply(
    policy: RemediationPolicy,
    rec: Recommendation,
    cluster: Cluster,
    cycle: ClusterCycle,
    d: Decision,
) -> AutopilotDecision:
    actor = actor_of(policy)
    try:
        with transaction.atomic():
            rec = approve_by_policy(
                rec,
                actor=actor,
                written_by=policy.written_by,
                approved_by=policy.approved_by,
                policy={
                    "policy": policy.name,
                    "policy_id": policy.pk,
                    "version": policy.version,
                    "written_by": actor_name(policy.written_by) if policy.written_by_id else "",
                    "approved_by": actor_name(policy.approved_by) if policy.approved_by_id else "",
                    "as_of": cycle.as_of.isoformat(),
                },
            )
            writes = "" if not cluster.dry_run else "; the cluster's writes are off: a dry run only"
            row = _record(
                policy,
                cluster,
                cycle,
                d,
                reason=f"{d.reason}; sent to the apply path ({_people(policy)}){writes}; "
                + undo_text(rec),
            )
            if rec.kind == RecommendationKind.DRAIN_NODE:
                _note_on_incident(policy, rec, cluster)
            request_apply(rec, None, actor=actor)  # the apply task is sent on commit
    except WorkflowError as exc:  # a person got there first (requested, rejected, applying)
        return _record(
            policy,
            cluster,
            cycle,
            d,
            outcome=AutopilotOutcome.HELD,
            guard=WORKFLOW_REFUSED,
            reason=str(exc),
        )
    except ApplyNotSent as exc:  # the broker refused: the change is back to approved
        logger.warning("autopilot apply of %s not sent: %s", rec.pk, exc)
    return row


def _unchanged(policy: RemediationPolicy, rec_id: int, decision: Decision, last: dict) -> bool:
    """A decision the policy already recorded for this recommendation (a held change is noted
    once per guard, not every cycle; a dry run's "would apply" once per version)."""
    previous = last.get((policy.pk, rec_id))
    if previous is None:
        return False
    return (previous.outcome, previous.guard, previous.policy_version) == (
        OUTCOMES[decision.outcome],
        decision.guard,
        policy.version,
    )


def _done(cycle: ClusterCycle) -> list[Done]:
    """What counts against budgets: the autopilot's actions in the hour before (any policy's
    applied ones, the dry-run policies' would-applies; the core sorts out whose count)."""
    since = cycle.as_of - guards.BUDGET_WINDOW
    rows = AutopilotDecision.objects.filter(
        as_of__gt=since,
        as_of__lte=cycle.as_of,
        outcome__in=[AutopilotOutcome.APPLIED, AutopilotOutcome.WOULD_APPLY],
    ).select_related("cluster")
    return [
        Done(
            row.policy_id,
            row.kind,
            row.cluster.name,
            row.pool or None,
            row.as_of,
            enforced=row.outcome == AutopilotOutcome.APPLIED,
            gpus_out=row.gpus_out,
        )
        for row in rows
    ]


def demote_regressed(cluster: Cluster) -> list[AutopilotDecision]:
    """Each enforcing policy one of whose applied changes on ``cluster`` regressed (or whose
    verification says worse) is turned to dry run, once per change, with the reason; on-call
    is alerted (a ``demoted`` decision is sent as ``GpuobsAutopilotAction``)."""
    rows = []
    applied = (
        AutopilotDecision.objects.filter(
            cluster=cluster,
            outcome=AutopilotOutcome.APPLIED,
            policy__mode=PolicyMode.ENFORCE,
            recommendation__isnull=False,
        )
        .select_related("policy", "recommendation")
        .order_by("id")
    )
    for row in applied:
        rec = row.recommendation
        status = (rec.verification or {}).get("status")
        if rec.state != RecommendationState.REGRESSED and status != verify.WORSE:
            continue
        if AutopilotDecision.objects.filter(
            recommendation=rec, outcome=AutopilotOutcome.DEMOTED
        ).exists():
            continue
        why = (rec.verification or {}).get("reason") or rec.state
        reason = (
            f"#{rec.pk} ({rec.kind} {rec.target}), applied by this policy, "
            f"{'regressed' if rec.state == RecommendationState.REGRESSED else 'got worse'}: {why}"
        )
        with transaction.atomic():
            if not demote_policy(row.policy, reason):
                continue
            row.policy.refresh_from_db()
            rows.append(
                AutopilotDecision.objects.create(
                    policy=row.policy,
                    policy_version=row.policy.version,
                    cluster=cluster,
                    recommendation=rec,
                    as_of=latest_as_of(cluster) or row.as_of,
                    outcome=AutopilotOutcome.DEMOTED,
                    reason=f"turned to dry run: {reason}; " + undo_text(rec),
                    kind=rec.kind,
                    target=rec.target,
                    pool=row.pool,
                    written_by=row.written_by,
                    approved_by=row.approved_by,
                )
            )
    return rows


def latest_as_of(cluster: Cluster) -> datetime | None:
    return (
        ClusterCycle.objects.filter(cluster=cluster, ok=True)
        .order_by("-as_of")
        .values_list("as_of", flat=True)
        .first()
    )


def run_autopilot(cluster_id: int, cycle_id: int) -> dict[str, Any]:
    """The step after a cycle (see the module doc); what it did, by outcome."""
    cluster = Cluster.objects.filter(pk=cluster_id).first()
    cycle = ClusterCycle.objects.filter(pk=cycle_id, cluster_id=cluster_id).first()
    if cluster is None or cycle is None:
        return {"skipped": "no such cluster or cycle"}
    stats: dict[str, Any] = {"applied": 0, "would-apply": 0, "held": 0, "noted": 0}
    demoted = demote_regressed(cluster)
    stats["demoted"] = len(demoted)
    policies = {p.pk: p for p in policies_in_force(cluster)}
    if not policies:
        if demoted:
            notify_after_cycle(cluster)
        return stats
    versions = {(p.pk, p.version) for p in policies.values()}
    recs = {
        rec.pk: rec
        for rec in Recommendation.objects.filter(
            cluster=cluster,
            state=RecommendationState.PROPOSED,
            kind__in={p.kind for p in policies.values()},
            rollback_of__isnull=True,
        )
        .exclude(kind=RecommendationKind.DRAIN_NODE, change__to="ready")
        .select_related("cluster")
        .prefetch_related("motivating_findings")
    }
    previous = AutopilotDecision.objects.filter(recommendation_id__in=list(recs)).order_by("id")
    last = {(row.policy_id, row.recommendation_id): row for row in previous}
    # a dry-run policy's "would apply" stands for its version: not judged (nor counted) again
    seen = {
        rec_id
        for (policy_id, rec_id), row in last.items()
        if (policy_id, row.policy_version) in versions
        and row.outcome == AutopilotOutcome.WOULD_APPLY
    }
    decisions = decide(
        [spec_of(p) for p in policies.values()],
        candidates_of((r for pk, r in recs.items() if pk not in seen), cluster.name),
        as_of=cycle.as_of,
        pools=pools_of(cluster.name, cycle.accounting),
        done=_done(cycle),
        health={cluster.name: health_of(cluster, cycle, now=timezone.now())},
        stopped=kill_switch().stopped,
    )
    for decision in decisions:
        policy, rec = policies[decision.policy], recs[decision.recommendation]
        if decision.outcome == guards.APPLY:
            row = _apply(policy, rec, cluster, cycle, decision)
            stats["applied" if row.outcome == AutopilotOutcome.APPLIED else "held"] += 1
        elif _unchanged(policy, rec.pk, decision, last):
            stats["noted"] += 1  # held for the same reason as before: not written again
        else:
            _record(policy, cluster, cycle, decision)
            stats[decision.outcome] += 1
    if stats["applied"] or demoted:
        notify_after_cycle(cluster)  # on-call hears of it now, not at the next cycle
    return stats
