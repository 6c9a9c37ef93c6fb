"""The incidents a cycle's Xid findings open
(:func:`diagnosis.actions.oncall.incidents.record_incidents`): built from the findings and stored
together, with their timelines (issue #35: a first cycle of a big cluster opens hundreds)."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from django.utils import timezone

from diagnosis.actions.oncall.history import SYSTEM_CYCLE, new_event
from diagnosis.actions.oncall.recovery import SOURCE_XID
from diagnosis.choices import IncidentState
from diagnosis.core import xid_catalog
from diagnosis.core.vocabulary import parse_time
from diagnosis.models import Cluster, Finding, Incident, IncidentEvent


def xid_fingerprint(cluster: Cluster, node: str, index: int, opened: datetime) -> str:
    where = hashlib.sha256(f"{node}/{index}".encode()).hexdigest()[:16]
    return f"xid:{cluster.pk}:{where}:{opened:%Y%m%dT%H%M%S}"


def new_xid_incident(
    cluster: Cluster,
    node: str,
    index: int,
    codes: list[Mapping[str, Any]],
    finding: Finding,
    as_of: datetime,
) -> Incident:
    """The incident a GPU's Xid finding opens (not saved yet), its codes on it."""
    firsts = [parse_time(c.get("first") or "") for c in codes]
    opened = min([t for t in firsts if t is not None], default=as_of)
    worst = min(codes, key=lambda c: (c.get("severity") != "critical", c.get("code", 0)))
    info = xid_catalog.lookup(int(worst["code"])) if codes else None
    return Incident(
        fingerprint=xid_fingerprint(cluster, node, index, opened),
        cluster=cluster,
        node=node,
        gpu_index=index,
        xid_code=info.code if info else None,
        summary=(
            f"Xid {info.code} on {node} GPU {index}: {info.name}: {info.meaning}"
            if info
            else f"Xid on {node} GPU {index}"
        ),
        details={
            "kind": "xid",
            "xid": info.as_dict() if info else None,
            "codes": [dict(c) for c in codes],
        },
        source=SOURCE_XID,
        opened_at=opened,
        finding=finding,
    )


def open_xid_incidents(
    opening: list[tuple[Incident, list[Mapping[str, Any]]]],
    unresolved: dict[tuple[str, int | None], Incident],
    xids_noted: dict[int, set[tuple[Any, Any]]],
) -> int:
    """Store the incidents the cycle's Xid findings open, with their timelines (opened, then
    each Xid once), in one statement per table, not ~4 per incident (a first cycle of a big
    cluster opens hundreds). One whose fingerprint is stored already (the same GPU and first
    Xid, resolved in this episode) is not opened again. Returns how many were opened."""
    fingerprints = [incident.fingerprint for incident, _ in opening]
    stored = set(
        Incident.objects.filter(fingerprint__in=fingerprints).values_list("fingerprint", flat=True)
    )
    for incident, _ in opening:
        if incident.fingerprint in stored:
            del unresolved[(incident.node, incident.gpu_index)]
    opening = [
        (incident, codes) for incident, codes in opening if incident.fingerprint not in stored
    ]
    if not opening:
        return 0
    Incident.objects.bulk_create([incident for incident, _ in opening])
    events = []
    for incident, codes in opening:
        opened = new_event(
            incident,
            SYSTEM_CYCLE,
            "opened",
            after=IncidentState.OPEN,
            time=incident.opened_at,
            text=incident.summary,
            details={"finding": incident.finding_id},
        )
        seen = xids_noted.setdefault(incident.pk, set())
        events += [opened, *(xid_event(incident, code) for code in new_xid_codes(codes, seen))]
    IncidentEvent.objects.bulk_create(events)
    return len(opening)


def new_xid_codes(
    codes: list[Mapping[str, Any]], seen: set[tuple[Any, Any]]
) -> list[Mapping[str, Any]]:
    """The Xids (code, last time) not on the timeline yet, each once; ``seen`` takes them."""
    new = []
    for code in codes:
        key = (code.get("code"), code.get("last"))
        if key not in seen:
            seen.add(key)
            new.append(code)
    return new


def xid_event(incident: Incident, code: Mapping[str, Any]) -> IncidentEvent:
    return new_event(
        incident,
        SYSTEM_CYCLE,
        "xid",
        time=parse_time(code.get("last") or "") or timezone.now(),
        text=f"Xid {code.get('code')} ({code.get('name')}) x{code.get('count')}",
        details={"code": code.get("code"), "last": code.get("last"), "count": code.get("count")},
    )
