"""Recovery of an ``xid`` incident (docs/ui.md "Recovery"): once the drained node's GPU is
healthy again gpuobs proposes putting the node back (the drain's rollback, two people), and an
application-level Xid's incident resolves with its finding without an acknowledgement."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from diagnosis.actions.oncall.history import SYSTEM_CYCLE, record_event
from diagnosis.actions.workflow.base import APPLIED_STATES, WorkflowError
from diagnosis.actions.workflow.review import create_rollback
from diagnosis.core import xid_catalog
from diagnosis.models import Incident

SOURCE_XID = "rule:xid"


def resolves_unattended(incident: Incident, finding_resolved: bool) -> bool:
    """An ``xid`` incident of a code that needs no GPU service (13, 31, 43: restart the
    application) resolves with its finding (``finding_resolved``: it has) even if nobody
    acknowledged it; a GPU-fatal one waits for a person, who has to have looked at a GPU that
    needed a reset or service."""
    return (
        incident.source == SOURCE_XID
        and incident.xid_code is not None
        and not xid_catalog.is_critical(incident.xid_code)
        and finding_resolved
    )


def propose_resume(incident: Incident, health: Mapping[str, Any], as_of: datetime) -> None:
    """Once the GPU of an incident whose drain was applied is healthy again (repaired, no Xid)
    while its node is still out, gpuobs proposes putting the node back: the drain's rollback,
    which a person requests and another approves. Proposed once per incident (noted in
    ``details.resume``); the finding and the incident resolve after the node is back."""
    rec = incident.drain
    details = incident.details or {}
    if (
        rec is None
        or rec.state not in APPLIED_STATES
        or details.get("resume")
        or incident.gpu_index is None
        or health["gpu_health"] != "ok"
        or health["xids"]
        or health["node_state"] not in ("cordoned", "drained")
    ):
        return
    reason = (
        f"incident #{incident.pk}: GPU {incident.node}/{incident.gpu_index} is healthy again;"
        f" put {incident.node} back in service"
    )
    try:
        undo = create_rollback(rec, user=None, reason=reason, approved=False)
    except WorkflowError as exc:  # one already under way, or nothing known to go back to
        undo, reason = None, f"no resume proposed: {exc}"
    incident.details = {**details, "resume": undo.pk if undo else reason}
    incident.save(update_fields=["details"])
    record_event(
        incident,
        SYSTEM_CYCLE,
        "resume-proposed" if undo else "note",
        time=as_of,
        text=(
            f"GPU {incident.node}/{incident.gpu_index} ok again:"
            f" resume of {incident.node} proposed (#{undo.pk})"
            if undo
            else reason
        ),
        details={"recommendation": undo.pk} if undo else {},
    )
