"""Incidents: opened, updated and resolved from Alertmanager alerts, with the jobs on the GPU."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import transaction
from django.utils import timezone

from diagnosis.actions.oncall.incidents import adopt_rule_incident, record_event
from diagnosis.actions.oncall.windows import jobs_hit
from diagnosis.choices import IncidentState
from diagnosis.core import xid_catalog
from diagnosis.models import (
    Cluster,
    Incident,
)


@dataclass(frozen=True)
class AlertOutcome:
    """What one Alertmanager alert did: ``opened``, ``updated``, ``reopened``, ``resolved``,
    ``already-resolved`` or ``stale`` (a redelivery of an episode that is over)."""

    outcome: str
    incident: Any  # diagnosis.models.Incident


def _incident_fingerprint(cluster: Cluster, alert_fingerprint: str) -> str:
    return f"alertmanager:{cluster.pk}:{alert_fingerprint}"


def _incident_summary(gpu_alert: Any, alert: Any, info: Any) -> str:
    where = gpu_alert.node or "an unknown node"
    if gpu_alert.gpu_index is not None:
        where += f" GPU {gpu_alert.gpu_index}"
    if info is not None:
        return f"Xid {info.code} on {where}: {info.name}: {info.meaning}"
    text = alert.annotations.get("summary") or alert.annotations.get("description") or alert.name
    kind = "Xid" if gpu_alert.kind == "xid" else "GPU health failure"
    return f"{kind} on {where}: {text}"


@transaction.atomic
def open_or_update_incident_from_alert(
    cluster: Cluster, alert: Any, gpu_alert: Any, *, snapshot_document: Mapping[str, Any] | None
) -> AlertOutcome:
    """Open, update or reopen the incident of a firing Xid or GPU-health alert.

    Deduplicated by the alert's fingerprint (Alertmanager delivers at least once): a repeated
    delivery updates the incident (labels, delivery count); a delivery of an episode that is
    already resolved (same ``startsAt``) changes nothing; a later episode reopens it. The
    incident names the node and GPU, the jobs and tenants on it (from ``snapshot_document``, the
    cluster's latest snapshot) and, for an Xid, the catalog's meaning and action.
    ``alert``/``gpu_alert``: :class:`diagnosis.edge.sources.alertmanager.Alert` and ``GpuAlert``.
    """

    info = xid_catalog.lookup(gpu_alert.xid) if gpu_alert.xid is not None else None
    fingerprint = _incident_fingerprint(cluster, alert.fingerprint)
    jobs = _jobs_of_episode(cluster, gpu_alert, alert, fingerprint)
    details = {
        "kind": gpu_alert.kind,
        "alert": alert.as_dict(),
        "xid": info.as_dict() if info else None,
        "gpu_uuid": gpu_alert.gpu_uuid,
        "pods": list(gpu_alert.pods),
        "jobs": jobs,
        "tenants": sorted({j["tenant"] for j in jobs if j.get("tenant")}),
    }
    if gpu_alert.node and not Incident.objects.filter(fingerprint=fingerprint).exists():
        # the xid rule saw this GPU's Xid first: one incident, not two (issue #16)
        adopt_rule_incident(
            cluster, gpu_alert.node, gpu_alert.gpu_index, fingerprint, alert.starts_at
        )
    incident, created = Incident.objects.select_for_update().get_or_create(
        fingerprint=fingerprint,
        defaults={
            "cluster": cluster,
            "node": gpu_alert.node or "",
            "gpu_index": gpu_alert.gpu_index,
            "xid_code": gpu_alert.xid,
            "summary": _incident_summary(gpu_alert, alert, info),
            "details": {**details, "deliveries": 1, "episodes": [_episode(alert)]},
            "source": "alertmanager",
            "opened_at": alert.starts_at,
        },
    )
    if created:
        record_event(
            incident,
            "system:alertmanager",
            "opened",
            after=IncidentState.OPEN,
            time=alert.starts_at,
            text=incident.summary,
        )
        return AlertOutcome("opened", incident)
    episodes = list(incident.details.get("episodes") or [])
    current_start = episodes[-1]["starts_at"] if episodes else None
    later = current_start is None or alert.starts_at > datetime.fromisoformat(current_start)
    if incident.state == IncidentState.RESOLVED and not later:
        return AlertOutcome("stale", incident)
    outcome = "updated"
    if incident.state == IncidentState.RESOLVED:
        outcome = "reopened"
        record_event(
            incident,
            "system:alertmanager",
            "reopened",
            before=incident.state,
            after=IncidentState.OPEN,
            time=alert.starts_at,
        )
        incident.state = IncidentState.OPEN
        incident.opened_at = alert.starts_at
        incident.resolved_at = None
        incident.acknowledged_at = None
        incident.acknowledged_by = None
        episodes.append(_episode(alert))
    incident.node = gpu_alert.node or incident.node
    incident.gpu_index = (
        gpu_alert.gpu_index if gpu_alert.gpu_index is not None else incident.gpu_index
    )
    incident.xid_code = gpu_alert.xid if gpu_alert.xid is not None else incident.xid_code
    incident.summary = _incident_summary(gpu_alert, alert, info)
    incident.details = {
        **incident.details,  # what on-call's steps keep there (the drain, the codes)
        **details,
        "deliveries": int(incident.details.get("deliveries") or 0) + 1,
        "episodes": episodes,
    }
    incident.save()
    return AlertOutcome(outcome, incident)


def _jobs_of_episode(
    cluster: Cluster, gpu_alert: Any, alert: Any, fingerprint: str
) -> list[dict[str, Any]]:
    """The jobs on the GPU when the alert fired, from the stored history (issue #16), not those
    of the latest snapshot. A repeated delivery of the episode an incident already holds (the
    same node, GPU and ``startsAt``: Alertmanager re-sends a group at every interval) keeps the
    jobs found at its first delivery, so a redelivery costs no window query."""

    known = (
        Incident.objects.filter(fingerprint=fingerprint)
        .values("node", "gpu_index", "details")
        .first()
    )
    if known is not None and (known["node"], known["gpu_index"]) == (
        gpu_alert.node or known["node"],
        gpu_alert.gpu_index,
    ):
        episodes = known["details"].get("episodes") or []
        if episodes and episodes[-1].get("starts_at") == alert.starts_at.isoformat():
            return list(known["details"].get("jobs") or [])
    jobs = []
    if gpu_alert.node:
        jobs = jobs_hit(cluster, gpu_alert.node, gpu_alert.gpu_index, alert.starts_at)["jobs"]
    if gpu_alert.hpc_job and not any(j["id"] == gpu_alert.hpc_job for j in jobs):
        jobs.append({"id": gpu_alert.hpc_job})
    return jobs


def _episode(alert: Any) -> dict[str, Any]:
    return {"starts_at": alert.starts_at.isoformat(), "resolved_at": None}


@transaction.atomic
def resolve_incident(incident: Any, *, at: datetime, note: str = "") -> Any:
    """Mark an incident resolved at ``at`` (idempotent: a resolved incident stays as it was)."""

    incident = Incident.objects.select_for_update().get(pk=incident.pk)
    if incident.state == IncidentState.RESOLVED:
        return incident
    before = incident.state
    incident.state = IncidentState.RESOLVED
    incident.resolved_at = at
    episodes = list(incident.details.get("episodes") or [])
    if episodes:
        episodes[-1] = {**episodes[-1], "resolved_at": at.isoformat()}
    incident.details = {**incident.details, "episodes": episodes}
    if note:
        incident.details["resolution"] = note
    incident.save()
    record_event(
        incident,
        "system:alertmanager",
        "resolved",
        before=before,
        after=IncidentState.RESOLVED,
        time=at,
        text=note,
    )
    return incident


@transaction.atomic
def resolve_incident_from_alert(
    cluster: Cluster, alert: Any, gpu_alert: Any, *, snapshot_document: Mapping[str, Any] | None
) -> AlertOutcome:
    """A ``resolved`` alert resolves its incident's current episode. A resolution that arrives
    before its firing (or for an alert never seen) records the incident as resolved, so the late
    firing delivery of the same episode cannot open it; one for an older episode is stale."""

    ended = alert.ends_at or timezone.now()
    incident = (
        Incident.objects.select_for_update()
        .filter(fingerprint=_incident_fingerprint(cluster, alert.fingerprint))
        .first()
    )
    if incident is None:
        opened = open_or_update_incident_from_alert(
            cluster, alert, gpu_alert, snapshot_document=snapshot_document
        )
        return AlertOutcome("resolved", resolve_incident(opened.incident, at=ended))
    episodes = incident.details.get("episodes") or []
    if episodes and alert.starts_at < datetime.fromisoformat(episodes[-1]["starts_at"]):
        return AlertOutcome("stale", incident)
    if incident.state == IncidentState.RESOLVED:
        return AlertOutcome("already-resolved", incident)
    return AlertOutcome("resolved", resolve_incident(incident, at=ended, note="alert resolved"))
