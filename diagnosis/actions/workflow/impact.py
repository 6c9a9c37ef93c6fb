"""Impact estimates apart from the cycle (issue #17): the cycle stores a recommendation with a
pending impact; :func:`enqueue_impact_estimates` sends, after the cycle commits, at most
``GPUOBS_IMPACT_MAX_PER_CYCLE`` estimates to the ``impact`` queue, the most GPU-hours at stake
first; :func:`estimate_recommendation_impact` (the task ``estimate_impact``) replays the
recommendation's plan on the snapshot it was proposed from and stores the estimate.

Replays are kept in :class:`~diagnosis.models.ReplayOutcome` by the snapshot's digest and the
setting replayed (queue order, changes, seeds, horizon), so the current setting of a snapshot is
replayed once for all its estimates and a redelivered task replays nothing. A cluster of
``GPUOBS_IMPACT_REDUCED_FROM_GPUS`` GPUs or more is replayed with the reduced model (one seed,
one hour: :func:`diagnosis.core.recommend.impact.impact_settings_for`; its error against the
full model is in docs/operations.md).
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from diagnosis.actions.enqueue import impact_on_commit, reestimate_on_commit
from diagnosis.actions.workflow.base import (
    NO_APPROVAL,
    OPEN_STATES,
    SYSTEM_IMPACT,
    audit,
    save_fields,
)
from diagnosis.choices import RecommendationState
from diagnosis.core import snapshot as snapshot_format
from diagnosis.core.recommend.base import RecommendSettings
from diagnosis.core.recommend.impact import (
    PENDING_METHOD,
    SeedOutcome,
    estimate_impact,
    impact_settings_for,
    landed_impact,
    outcome_as_dict,
    outcome_from_dict,
    outcomes_key,
    plan_from_dict,
    run_outcomes,
)
from diagnosis.core.simulate.policy import Change, Policy
from diagnosis.models import Cluster, Recommendation, ReplayOutcome, Snapshot

logger = logging.getLogger(__name__)


def is_pending(rec: Recommendation) -> bool:
    return rec.impact.get("method") == PENDING_METHOD and "plan" in rec.impact


def enqueue_impact_estimates(cluster: Cluster) -> int:
    """Send the estimates of the cluster's open recommendations whose impact is pending, the
    most GPU-hours at stake first, at most ``GPUOBS_IMPACT_MAX_PER_CYCLE``; one sent within
    ``GPUOBS_IMPACT_REQUEUE_SECONDS`` is not sent again (its task is queued or running).
    Each is sent once the surrounding transaction commits. Returns how many were sent."""

    now = timezone.now()
    fresh_since = (now - timedelta(seconds=settings.GPUOBS_IMPACT_REQUEUE_SECONDS)).isoformat()
    with transaction.atomic():
        pending = [
            rec
            for rec in Recommendation.objects.select_for_update(skip_locked=True).filter(
                cluster=cluster, state__in=OPEN_STATES, impact__method=PENDING_METHOD
            )
            if is_pending(rec) and str(rec.impact.get("queued_at") or "") < fresh_since
        ]
        pending.sort(key=lambda r: (-float(r.impact.get("stake_gpu_h") or 0.0), r.pk))
        chosen = pending[: settings.GPUOBS_IMPACT_MAX_PER_CYCLE]
        for rec in chosen:
            rec.impact = {**rec.impact, "queued_at": now.isoformat()}
            save_fields(rec, "impact")
            impact_on_commit(rec.pk)
    return len(chosen)


def _replay(
    rec: Recommendation, row: Snapshot, plan_dict: dict[str, Any]
) -> tuple[dict[str, Any] | None, Any, str, str, dict[str, Any]]:
    """Replay ``plan_dict`` on the snapshot ``row``: the impact and assessment (None and the
    failure when the replay failed), the model, and the estimate's own figures."""
    started = time.process_time()
    snap = snapshot_format.load(row.load_document())
    digest = hashlib.sha256(bytes(row.document)).hexdigest()
    replay_settings, model = impact_settings_for(
        int(snap.nodes["gpus"].sum()),
        RecommendSettings(),
        reduced_from_gpus=settings.GPUOBS_IMPACT_REDUCED_FROM_GPUS,
    )
    plan = plan_from_dict(plan_dict)
    replays = {"run": 0, "cached": 0}

    def outcomes(policy: Policy, changes: Sequence[Change]) -> list[SeedOutcome]:
        return cached_outcomes(
            rec.cluster, snap, digest, policy, plan.queue_order, changes, replay_settings, replays
        )

    impact, assessment, failure = None, None, ""
    try:
        impact, assessment = estimate_impact(snap, plan, replay_settings, outcomes)
    except Exception as exc:  # the recommendation stands; its impact is unknown
        logger.exception("impact estimate of recommendation %s failed", rec.pk)
        failure = f"the replay failed: {type(exc).__name__}: {exc}"
    estimate = {
        "cpu_s": round(time.process_time() - started, 3),
        "replays_run": replays["run"],
        "replays_cached": replays["cached"],
        "snapshot_as_of": row.as_of.isoformat(),
        "gpus": int(snap.nodes["gpus"].sum()),
    }
    return impact, assessment, failure, model, estimate


def estimate_recommendation_impact(recommendation_id: int) -> dict[str, Any]:
    """Replay a pending recommendation's plan and store its impact; says what it did
    (``estimated``, or ``skipped`` with why). Its row is locked only to store the result: a
    recommendation that left the open states or got another change meanwhile keeps what it
    has."""

    rec = Recommendation.objects.filter(pk=recommendation_id).select_related("cluster").first()
    if rec is None or rec.state not in OPEN_STATES or not is_pending(rec):
        return {"outcome": "skipped", "why": "not an open recommendation with a pending impact"}
    row = proposal_snapshot(rec)
    if row is None:
        return {"outcome": "skipped", "why": "no stored snapshot of the cluster"}
    impact, assessment, failure, model, estimate = _replay(rec, row, rec.impact["plan"])
    with transaction.atomic():
        current = Recommendation.objects.select_for_update().filter(pk=rec.pk).first()
        if current is None or current.state not in OPEN_STATES or not is_pending(current):
            return {"outcome": "skipped", "why": "changed while it was estimated"}
        if current.change != rec.change:
            return {"outcome": "skipped", "why": "its change changed while it was estimated"}
        if impact is None or assessment is None:
            current.impact = {
                **{k: v for k, v in current.impact.items() if k not in ("plan", "queued_at")},
                "method": "none",
                "verdict": "not simulated",
                "headline": f"not simulated: {failure}",
                "preselect": False,
            }
        else:
            current.impact = landed_impact(current.impact, impact, assessment, model)
            current.impact["estimate"] = estimate
        save_fields(current, "impact")
    return {
        "outcome": "estimated",
        "verdict": current.impact["verdict"],
        "cpu_s": estimate["cpu_s"],
    }


# -- again on the latest snapshot, at approve and at apply (issue #26.4) --------------------------

REESTIMATED_STATES = (RecommendationState.APPROVED, RecommendationState.APPLYING)


def request_reestimate(rec: Recommendation) -> bool:
    """Mark the recommendation's impact ``reestimating`` and send its estimate on the cluster's
    latest snapshot once the caller's transaction commits -- when it was estimated on an older
    one and no re-estimate was sent within ``GPUOBS_IMPACT_REQUEUE_SECONDS`` (bounded: one in
    flight per recommendation). The caller holds the row's lock. Whether it was sent."""
    impact = rec.impact or {}
    if "replay_plan" not in impact:
        return False
    latest = (
        Snapshot.objects.filter(cluster_id=rec.cluster_id)
        .order_by("-as_of")
        .values_list("as_of", flat=True)
        .first()
    )
    estimated = (impact.get("estimate") or {}).get("snapshot_as_of")
    if latest is None or (estimated and latest.isoformat() <= estimated):
        return False
    now = timezone.now()
    queued = (impact.get("reestimating") or {}).get("queued_at") or ""
    fresh_since = (now - timedelta(seconds=settings.GPUOBS_IMPACT_REQUEUE_SECONDS)).isoformat()
    if queued and queued >= fresh_since:
        return False
    rec.impact = {
        **impact,
        "reestimating": {"queued_at": now.isoformat(), "snapshot_as_of": latest.isoformat()},
    }
    save_fields(rec, "impact")
    reestimate_on_commit(rec.pk)
    return True


def materially_different(before: dict[str, Any], after: dict[str, Any]) -> str:
    """Why the estimate ``after`` asks the approver again (empty: it does not): another
    verdict, or a harm the approver did not see."""
    was, now = before.get("verdict"), after.get("verdict")
    if was != now:
        return f"the verdict is now {now!r} (it was {was!r} when approved)"
    new_harm = [h for h in after.get("harm") or () if h not in (before.get("harm") or ())]
    if new_harm:
        return "it now predicts harm: " + "; ".join(new_harm)
    return ""


def reestimate_recommendation_impact(recommendation_id: int) -> dict[str, Any]:
    """The task's body for ``latest``: replay the recommendation's plan on the cluster's latest
    snapshot and store the new estimate (its snapshot time in ``estimate.snapshot_as_of``). When
    it differs materially from the estimate the change was approved on, an approved change goes
    back to ``proposed`` (its request kept, the approval withdrawn, audited) with the reason:
    the approver is asked again; one already being applied keeps going, the difference in its
    status."""
    rec = Recommendation.objects.filter(pk=recommendation_id).select_related("cluster").first()
    if rec is None or rec.state not in REESTIMATED_STATES or "replay_plan" not in rec.impact:
        return {"outcome": "skipped", "why": "not an approved recommendation with a plan"}
    row = Snapshot.objects.filter(cluster_id=rec.cluster_id).order_by("-as_of", "-pk").first()
    if row is None:
        return {"outcome": "skipped", "why": "no stored snapshot of the cluster"}
    impact, assessment, failure, model, estimate = _replay(rec, row, rec.impact["replay_plan"])
    with transaction.atomic():
        current = Recommendation.objects.select_for_update().filter(pk=rec.pk).first()
        if current is None or current.change != rec.change:
            return {"outcome": "skipped", "why": "changed while it was estimated"}
        before = {k: v for k, v in current.impact.items() if k != "reestimating"}
        if impact is None or assessment is None:
            current.impact = {**before, "reestimate_failed": failure}
            save_fields(current, "impact")
            return {"outcome": "failed", "why": failure}
        pending = {**before, "plan": before["replay_plan"]}
        current.impact = landed_impact(pending, impact, assessment, model)
        current.impact["estimate"] = {**estimate, "reestimated_at": timezone.now().isoformat()}
        why = materially_different(before, current.impact)
        fields = ["impact"]
        if why and current.state == RecommendationState.APPROVED:
            current.state = RecommendationState.PROPOSED
            for name, value in NO_APPROVAL.items():
                setattr(current, name, value)
            current.status_message = (
                f"approval withdrawn: re-estimated on the snapshot of {row.as_of:%Y-%m-%d %H:%M} "
                f"UTC, {why}; approve again to go ahead"
            )
            fields += ["state", *NO_APPROVAL, "status_message"]
            audit(
                current,
                SYSTEM_IMPACT,
                "approval-withdrawn-estimate-changed",
                before={"verdict": before.get("verdict"), "harm": before.get("harm")},
                after={"verdict": current.impact["verdict"], "harm": current.impact["harm"]},
            )
        elif why:
            current.status_message = f"re-estimated while applying: {why}"
            fields.append("status_message")
        save_fields(current, *fields)
    return {"outcome": "reestimated", "verdict": current.impact["verdict"], "changed": why}


def proposal_snapshot(rec: Recommendation) -> Snapshot | None:
    """The stored snapshot the recommendation's plan was drawn from (its ``proposed_as_of``);
    the cluster's latest when that one is gone (retention)."""
    rows = Snapshot.objects.filter(cluster_id=rec.cluster_id).order_by("-as_of", "-pk")
    if rec.proposed_as_of is not None:
        exact = rows.filter(as_of=rec.proposed_as_of).first()
        if exact is not None:
            return exact
    return rows.first()


def cached_outcomes(
    cluster: Cluster,
    snap: snapshot_format.ClusterSnapshot,
    digest: str,
    policy: Policy,
    queue_order: str | None,
    changes: Sequence[Change],
    replay_settings: RecommendSettings,
    counts: dict[str, int],
) -> list[SeedOutcome]:
    """The outcomes of ``snap`` replayed under ``policy`` with ``changes``: from
    :class:`ReplayOutcome` when this snapshot (by digest) was replayed so before, else run and
    kept."""
    what = outcomes_key(queue_order, changes, replay_settings)
    key = hashlib.sha256(f"{digest}\n{what}".encode()).hexdigest()
    stored = ReplayOutcome.objects.filter(key=key).values_list("outcomes", flat=True).first()
    if stored is not None:
        counts["cached"] += 1
        return [outcome_from_dict(o) for o in stored]
    started = time.process_time()
    result = run_outcomes(snap, policy, changes, replay_settings)
    counts["run"] += 1
    try:
        with transaction.atomic():
            ReplayOutcome.objects.create(
                cluster=cluster,
                key=key,
                snapshot_digest=digest,
                outcomes=[outcome_as_dict(o) for o in result],
                cpu_s=round(time.process_time() - started, 3),
            )
    except IntegrityError:  # another estimate of the same snapshot kept it first
        pass
    return result
