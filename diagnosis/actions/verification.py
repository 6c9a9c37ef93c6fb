"""Verifying applied changes over the following cycles, and rolling back one that made things
worse (DESIGN.md section 8.2).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import transaction

from diagnosis.actions.review import create_rollback, request_apply
from diagnosis.actions.workflow import (
    MAX_OBSERVATIONS,
    SYSTEM_CYCLE,
    WorkflowError,
    audit,
    save_fields,
)
from diagnosis.choices import RecommendationState
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
    )


def verify_applied(
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
                audit(
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
                audit(
                    rec,
                    SYSTEM_CYCLE,
                    "verify-worse",
                    before={"baseline": data.get("baseline")},
                    after={"observation": observation.as_dict(), "reason": judgement.reason},
                )
                worse.append((rec, judgement.reason))
                counts["worse"] += 1
            save_fields(rec, *fields)
    for rec, reason in worse:
        roll_back_worse(cluster, rec, reason)
    return counts


def roll_back_worse(cluster: Cluster, rec: Recommendation, reason: str) -> None:
    """Propose the rollback of a change that made things worse, or, with the cluster's
    ``auto_rollback``, perform it (as gpuobs, audited)."""
    why = f"the target metric got worse: {reason}"
    try:
        undo = create_rollback(rec, user=None, reason=why, approved=cluster.auto_rollback)
        if cluster.auto_rollback:
            request_apply(undo, None)
    except WorkflowError as exc:
        logger.warning("rollback of recommendation %s not made: %s", rec.pk, exc)
