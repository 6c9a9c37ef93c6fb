"""What a workflow step did, in words (issue #26.2): the page's message and the API's ``outcome``
say whether the scheduler was asked and is still to answer (``sent``), took the change in a dry
run (``accepted``), refused it with its reason (``refused``), wrote it (``applied``) or failed
(``failed``), read from the recommendation as stored after the step, never from what the step
hoped for. See docs/recommendations.md, "Workflow".
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.utils.translation import gettext

from diagnosis.choices import RecommendationState
from diagnosis.core.vocabulary import parse_time
from diagnosis.models import Recommendation

State = RecommendationState

SENT = "sent"
ACCEPTED = "accepted"
REFUSED = "refused"
APPLIED = "applied"
FAILED = "failed"
NOT_APPLIED = "not-applied"  # the target changed, or writes are off: nothing was written
DONE = "done"  # a step of people only (request, reject): nothing asked of the scheduler
BAD = frozenset({REFUSED, FAILED, NOT_APPLIED})


@dataclass(frozen=True)
class Outcome:
    kind: str
    message: str

    @property
    def ok(self) -> bool:
        return self.kind not in BAD

    def as_dict(self) -> dict[str, str]:
        return {"kind": self.kind, "message": self.message}


def _answered_since(rec: Recommendation, since: datetime) -> dict | None:
    """The dry run the scheduler answered after ``since`` (None: it has not answered yet)."""
    result = rec.dry_run_result or {}
    at = parse_time(str(result.get("at") or ""))
    return result if at is not None and at >= since else None


def dry_run_outcome(rec: Recommendation, since: datetime, *, lead: str = "") -> Outcome:
    """The dry run's answer if it came after ``since``: accepted with the exact command,
    refused with the scheduler's reason or with the target's change; else sent."""
    lead = f"{lead} " if lead else ""
    answer = _answered_since(rec, since)
    if answer is None:
        return Outcome(
            SENT,
            lead + gettext("Dry run sent to the scheduler: its answer shows on this page."),
        )
    if answer.get("error"):
        return Outcome(
            REFUSED,
            lead
            + gettext("The scheduler refused the dry run: %(reason)s")
            % {"reason": answer["error"]},
        )
    if answer.get("target_changed"):
        return Outcome(
            REFUSED,
            lead + gettext("Refused: %(reason)s.") % {"reason": answer["target_changed"]},
        )
    return Outcome(
        ACCEPTED,
        lead
        + gettext("Dry run: the scheduler takes this change (%(command)s).")
        % {"command": answer.get("command") or "?"},
    )


def apply_outcome(rec: Recommendation) -> Outcome:
    """What the apply came to, from the recommendation's state after it."""
    if rec.state == State.APPLYING:
        return Outcome(
            SENT, gettext("Apply sent to the scheduler: this page shows the outcome when it comes.")
        )
    if rec.state in (State.APPLIED, State.VERIFIED):
        command = (rec.apply_result or {}).get("command") or "?"
        if rec.status_message:
            return Outcome(APPLIED, rec.status_message)
        return Outcome(APPLIED, gettext("Applied: %(command)s.") % {"command": command})
    if rec.state == State.FAILED:
        return Outcome(FAILED, gettext("Failed: %(reason)s") % {"reason": rec.status_message})
    return Outcome(
        NOT_APPLIED, gettext("Not applied: %(reason)s") % {"reason": rec.status_message or "?"}
    )


def outcome_of(action: str, rec: Recommendation, since: datetime) -> Outcome:
    """The outcome of ``action`` (the page's and the API's action names) on ``rec``, read back
    after it; ``since``: when the action started."""
    if action == "approve":
        return dry_run_outcome(rec, since, lead=gettext("Approved."))
    if action == "dry-run":
        return dry_run_outcome(rec, since)
    if action in ("apply", "re-check"):
        return apply_outcome(rec)
    if action == "request":
        return Outcome(DONE, gettext("Requested: someone else approves it next."))
    if action == "reject":
        return Outcome(DONE, gettext("Rejected."))
    return Outcome(DONE, gettext("Done."))
