"""Verifying applied changes over the following cycles, and rolling back one that made things
worse (docs/recommendations.md#workflow).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import transaction

from diagnosis.actions.workflow.base import (
    MAX_OBSERVATIONS,
    SYSTEM_CYCLE,
    WorkflowError,
    audit,
    save_fields,
    update_fields,
)
from diagnosis.actions.workflow.review import create_rollback, request_apply
from diagnosis.choices import FindingState, RecommendationState
from diagnosis.core import snapshot as snapshot_format
from diagnosis.core.recommend import verify
from diagnosis.models import (
    Cluster,
    Recommendation,
)

State = RecommendationState
logger = logging.getLogger(__name__)


def verify_settings() -> verify.VerifySettings:
    return verify.VerifySettings(
        cycles=settings.GPUOBS_VERIFY_CYCLES,
        max_cycles=settings.GPUOBS_VERIFY_MAX_CYCLES,
        tolerance=settings.GPUOBS_VERIFY_TOLERANCE_PCT / 100,
        good_cycles=settings.GPUOBS_VERIFY_GOOD_CYCLES,
    )


def verify_applied(
    cluster: Cluster,
    snap: snapshot_format.ClusterSnapshot,
    diagnosis: Any,
    accounting: Mapping[str, Any],
) -> dict[str, int]:
    """Observe every applied change, and every verified one still watched for a regression, in
    this cycle and act on the verdict (:func:`verify.advance`): ``applied → verified`` after the
    good cycles in a row; ``verified → regressed`` (and its rollback proposed) when the metric
    was worse than before for the bad cycles in a row; a rollback proposed for a change made
    worse. A motivating finding back after verification is a signal, shown, not a verdict.

    A motivating finding is open when this cycle reports it or its stored row is not resolved
    (the page lists the stored rows: the verdict never disagrees with them)."""
    counts = {"verified": 0, "worse": 0, "regressed": 0}
    as_of = snap.as_of.to_pydatetime()
    reported = {(f.rule, f.subject) for f in diagnosis.findings}
    facts = getattr(diagnosis, "facts", None)
    config = verify_settings()
    worse: list[tuple[Recommendation, str]] = []
    with transaction.atomic():
        watched = Recommendation.objects.select_for_update().filter(
            cluster=cluster, state__in=(State.APPLIED, State.VERIFIED, State.REGRESSED)
        )
        for rec in watched.prefetch_related("motivating_findings"):
            data = dict(rec.verification or {})
            if not verify.watching(data):
                continue
            since = data.get("since_as_of")
            if since and as_of <= datetime.fromisoformat(since):
                continue
            stored = list(rec.motivating_findings.all())
            still_open = reported | {
                (f.rule_id, f.subject) for f in stored if f.state != FindingState.RESOLVED
            }
            observation = verify.observe(
                rec.kind,
                rec.target,
                rec.change.get("to"),
                [(f.rule_id, f.subject) for f in stored],
                snap,
                still_open,
                accounting,
                facts,
            )
            step = verify.advance(
                rec.kind,
                rec.state,
                data,
                observation,
                config,
                rollback=rec.rollback_of_id is not None,
                keep=MAX_OBSERVATIONS,
            )
            judgement = step.judgement
            before = rec.state
            measured = verify.measure_effect(
                (rec.impact or {}).get("metrics") or (), snap, accounting, facts
            )
            if measured:  # the predicted effect, next to the prediction on the page
                step.data["effect"] = verify.add_effect(step.data.get("effect") or {}, measured)
            rec.verification = step.data
            rec.state = step.state
            outcome = {"observation": observation.as_dict(), "reason": judgement.reason}
            if step.event:
                audit(rec, SYSTEM_CYCLE, step.event, before={"state": before}, after=outcome)
            if step.event == "verify":
                rec.status_message = judgement.reason
                counts["verified"] += 1
                if before == State.REGRESSED:
                    expire_unneeded_rollbacks(rec)
            elif step.event == "regress":
                rec.status_message = judgement.reason
                counts["regressed"] += 1
            elif step.event == "verify-worse":
                rec.status_message = f"worse since applied: {judgement.reason}"
                counts["worse"] += 1
            save_fields(rec, "verification", "state", "status_message")
            if judgement.rollback:
                worse.append((rec, judgement.reason))
    for rec, reason in worse:
        roll_back_worse(cluster, rec, reason)
    return counts


def expire_unneeded_rollbacks(rec: Recommendation) -> int:
    """A change verified again after a regression needs no rollback: the ones gpuobs proposed
    for it and nobody has requested yet expire (a person's request stays theirs to decide)."""
    expired = 0
    for undo in rec.rollbacks.select_for_update().filter(
        state=State.PROPOSED, requested_by__isnull=True
    ):
        update_fields(
            undo, state=State.EXPIRED, status_message=f"not needed: #{rec.pk} was verified again"
        )
        audit(
            undo,
            SYSTEM_CYCLE,
            "expire",
            before={"state": State.PROPOSED},
            after={"state": State.EXPIRED},
        )
        expired += 1
    return expired


def roll_back_worse(cluster: Cluster, rec: Recommendation, reason: str) -> Recommendation | None:
    """Propose the rollback of a change that made things worse or regressed, or, with the
    cluster's ``auto_rollback``, perform it (as gpuobs, audited); the change's status message
    names the rollback. Returns the rollback (None when none could be made)."""
    why = reason if rec.state == State.REGRESSED else f"the target metric got worse: {reason}"
    try:
        undo = create_rollback(rec, user=None, reason=why, approved=cluster.auto_rollback)
        if cluster.auto_rollback:
            request_apply(undo, None)
    except WorkflowError as exc:
        logger.warning("rollback of recommendation %s not made: %s", rec.pk, exc)
        return None
    verb = "being applied" if cluster.auto_rollback else "proposed"
    rec.status_message = f"{rec.status_message}; rollback #{undo.pk} {verb}"[:2000]
    save_fields(rec, "status_message")
    return undo
