"""An incident's history: the timeline rows (``IncidentEvent``) and the audit rows of a
person's steps, written by the on-call actions."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from django.contrib.auth.base_user import AbstractBaseUser
from django.utils import timezone

from diagnosis.actions.workflow.base import actor_name
from diagnosis.models import AuditEntry, Incident, IncidentEvent

SYSTEM_CYCLE = "system:cycle"


def record_event(incident: Incident, actor: str, kind: str, **fields: Any) -> IncidentEvent:
    """Save a timeline row (``fields``: those of :func:`new_event`)."""
    event = new_event(incident, actor, kind, **fields)
    event.save(force_insert=True)
    return event


def new_event(
    incident: Incident,
    actor: str,
    kind: str,
    *,
    before: str = "",
    after: str = "",
    text: str = "",
    details: Mapping[str, Any] | None = None,
    time: datetime | None = None,
) -> IncidentEvent:
    """A timeline row not saved yet (:func:`record_event` saves it; a cycle opening many
    incidents saves them all in one statement)."""
    return IncidentEvent(
        incident=incident,
        time=time or timezone.now(),
        actor=actor,
        kind=kind,
        state_before=before,
        state_after=after,
        text=text,
        details=dict(details or {}),
    )


def record_audit(
    incident: Incident, user: AbstractBaseUser | str, action: str, **values: Any
) -> None:
    """An audit row on the incident, by a person or by a ``system:``/``policy:`` actor."""
    AuditEntry.objects.create(
        actor=user if isinstance(user, str) else actor_name(user),
        action=action,
        target=f"incident:{incident.pk}",
        cluster_id=incident.cluster_id,
        **values,
    )
