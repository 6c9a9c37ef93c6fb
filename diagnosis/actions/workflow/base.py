"""The recommendation workflow's shared vocabulary (docs/recommendations.md#workflow): the open and
applied states, the system actors, the errors, and the helpers every step uses to lock a
recommendation, check its state and append to its audit trail.

::

    proposed ──request──▶ proposed (requested_by) ──approve──▶ approved ──apply──▶ applying
        │                                                        │  (lapses: expired)  │
        ├─ reject ──▶ rejected                                   └─ reject ─▶ rejected │
        ├─ a newer, different proposal for the target ──▶ superseded                   │
        └─ its findings resolved, not proposed again ──▶ expired                       ▼
    applying ──▶ applied ──(cycles)──▶ verified | rolled-back        (target changed: back to
             └─▶ failed                                              proposed; writes off: back
                                                                     to approved, a dry run only)

Every step locks the recommendation's row (``select_for_update``), checks the state and the
person's role (``diagnosis.roles``), writes, appends an :class:`AuditEntry` and sends any task
with ``delay_on_commit``. The audit trail is append-only: nothing updates or deletes an entry.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.contrib.auth.base_user import AbstractBaseUser
from django.core.exceptions import PermissionDenied

from diagnosis.choices import RecommendationKind, RecommendationState
from diagnosis.models import (
    AuditEntry,
    Recommendation,
)

State = RecommendationState


OPEN_STATES = (State.PROPOSED, State.APPROVED, State.APPLYING)


# Still applied: a regressed change stays written until its rollback is applied.
APPLIED_STATES = (State.APPLIED, State.VERIFIED, State.REGRESSED)


SYSTEM_CYCLE = "system:cycle"


SYSTEM_ACTUATE = "system:actuate"


SYSTEM_IMPACT = "system:impact"  # the impact re-estimated at approve and apply (impact.py)
SYSTEM_SWEEP = "system:sweeper"  # re-drives applies stuck in applying (actions/workflow/apply.py)


MAX_OBSERVATIONS = 24


# A change a person rejected is not proposed again, unchanged, for this long.
REJECTION_QUIET = timedelta(hours=24)


class WorkflowError(Exception):
    """A request the recommendation's state does not allow (the API answers 409)."""


class HarmNotConfirmed(WorkflowError):
    """An approval of a change whose impact estimate predicts harm, without the approver
    confirming that harm (the API answers 409 naming it; the page asks again)."""

    def __init__(self, harm: list[str]) -> None:
        super().__init__(
            "the impact estimate predicts harm: " + "; ".join(harm) + ". Approve again confirming "
            "the harm (API: confirm_harm true) to go ahead"
        )
        self.harm = harm


class WorkflowDenied(PermissionDenied):
    """A request the person's role does not allow (403)."""


class ApplyNotSent(Exception):
    """The broker refused the apply task; the recommendation is back to approved (503)."""


class TransientApplyError(Exception):
    """The scheduler could not be reached; the apply task should retry (the claim is released)."""


def actor_name(user: AbstractBaseUser | None) -> str:
    return user.get_username() if user is not None else SYSTEM_ACTUATE


def audit(
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


def lock_recommendation(rec: Recommendation | int) -> Recommendation:
    pk = rec if isinstance(rec, int) else rec.pk
    return Recommendation.objects.select_for_update().select_related("cluster").get(pk=pk)


def require_state(rec: Recommendation, *states: str, doing: str) -> None:
    if rec.state not in states:
        allowed = " or ".join(states)
        raise WorkflowError(
            f"cannot {doing} a recommendation that is {rec.state} (needs {allowed})"
        )


def require_change(rec: Recommendation, doing: str) -> None:
    if rec.kind == RecommendationKind.ADVISORY or not rec.change:
        raise WorkflowError(f"cannot {doing} advice: it has no change to make")


def save_fields(rec: Recommendation, *fields: str) -> None:
    rec.save(update_fields=[*fields, "updated_at"])


# What withdrawing an approval clears (the request, if any, stays).
NO_APPROVAL: dict[str, Any] = {"approved_by": None, "approved_at": None, "expires_at": None}


def update_fields(rec: Recommendation, **values: Any) -> None:
    """Set ``values`` on ``rec`` and save exactly those fields (and ``updated_at``)."""
    for name, value in values.items():
        setattr(rec, name, value)
    save_fields(rec, *values)
