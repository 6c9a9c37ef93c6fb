"""On-call's incidents (issue #16): opened from the ``xid`` rule's findings each cycle, the jobs
and tenants hit at the time of the fault (from the stored snapshots and their events), the
lifecycle ``open → acknowledged → mitigating → resolved`` with a history row for every step, the
healthy-period auto-resolve, and the one-click drain whose impact is computed when on-call
confirms it.

An ``xid`` incident stays open while its GPU is unhealthy, its node cordoned, drained or down, or
nobody has acknowledged it; gpuobs resolves it only once the GPU has been healthy (and its node
ready) for the ``xid`` rule's ``healthy_s`` (per cluster): on the cycle its ``xid`` finding
resolves (the rule keeps it firing while the GPU is not healthy, then ``healthy_s`` more), or,
where that finding is held for want of metrics, once healthy for ``healthy_s`` by the
incident's own clock. An Alertmanager incident follows its alert (see
:mod:`diagnosis.actions.oncall.alerts`).

A health fault that names no GPU (an NVSentinel condition whose entry names no GPU gpuobs or the
metrics know marks every GPU of its node ``unhealthy``, with no Xid row) opens a **node
incident** (``gpu_index`` null, source ``node-health``): one per node and episode, opened on
the first cycle that sees every GPU of the node unhealthy while no unresolved incident is on
the node, kept open while they stay unhealthy, resolved like an ``xid`` incident. An Xid of
one of its GPUs joins it rather than opening a GPU incident beside it; a node with a GPU
incident open gets no node incident. Resolved by a person while the node is still unhealthy,
it is not opened again until the node has had a healthy GPU. People acknowledge, note, drain
and resolve every kind.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any

from django.contrib.auth.base_user import AbstractBaseUser
from django.db import transaction
from django.utils import timezone

from diagnosis import roles
from diagnosis.actions.oncall.history import SYSTEM_CYCLE, record_audit, record_event
from diagnosis.actions.oncall.recovery import SOURCE_XID, propose_resume, resolves_unattended
from diagnosis.actions.oncall.windows import DecodedSnapshots, iso, jobs_hit, window_hits
from diagnosis.actions.oncall.xid_incidents import (
    new_xid_codes,
    new_xid_incident,
    open_xid_incidents,
    xid_event,
)
from diagnosis.actions.records.events import DRAIN_EVICTION_WINDOW, drain_evictions
from diagnosis.actions.records.findings import cluster_overrides
from diagnosis.actions.workflow.base import (
    APPLIED_STATES,
    WorkflowDenied,
    WorkflowError,
    actor_name,
)
from diagnosis.choices import IncidentState
from diagnosis.core import snapshot as snapshot_format
from diagnosis.core.incident_hits import HIT_WINDOW, NodeView
from diagnosis.core.incident_reads import events_on, node_view, unhealthy_nodes
from diagnosis.core.rules.registry import all_rules
from diagnosis.core.vocabulary import UNAVAILABLE_NODE_STATES, parse_time
from diagnosis.models import (
    Cluster,
    Finding,
    Incident,
    IncidentEvent,
    Snapshot,
)

State = IncidentState

SOURCE_NODE_HEALTH = "node-health"  # every GPU of a node unhealthy, no GPU named
FOLLOWED_SOURCES = (SOURCE_XID, SOURCE_NODE_HEALTH)  # the cycle follows and resolves these
NOT_HEALTHY_NODE_STATES = UNAVAILABLE_NODE_STATES  # the xid rule's test too
UNRESOLVED = (State.OPEN, State.ACKNOWLEDGED, State.MITIGATING)


def healthy_period(cluster: Cluster) -> timedelta:
    """The ``xid`` rule's ``healthy_s`` for the cluster: how long a GPU must be healthy before
    its Xid finding and its incident resolve."""
    rule = all_rules()["xid"]
    thresholds = rule.resolve(cluster_overrides(cluster).get(rule.id))
    return timedelta(seconds=rule.keep_firing_for(thresholds))


def lock_incident(incident: Incident) -> Incident:
    return Incident.objects.select_for_update().get(pk=incident.pk)


def _require_handler(user: AbstractBaseUser) -> None:
    if not roles.can_handle_incidents(user):
        raise WorkflowDenied("handling incidents needs the oncall role (or sre)")


# -- people's steps ------------------------------------------------------------------------------


def acknowledge_incident(incident: Incident, user: AbstractBaseUser) -> Incident:
    """``open → acknowledged``: someone is on it."""
    _require_handler(user)
    with transaction.atomic():
        incident = lock_incident(incident)
        if incident.state != State.OPEN:
            raise WorkflowError(f"cannot acknowledge an incident that is {incident.state}")
        now = timezone.now()
        incident.state = State.ACKNOWLEDGED
        incident.acknowledged_by = user
        incident.acknowledged_at = now
        incident.save(update_fields=["state", "acknowledged_by", "acknowledged_at"])
        record_event(
            incident, actor_name(user), "acknowledged", before="open", after=incident.state
        )
        record_audit(
            incident,
            user,
            "incident-acknowledge",
            before={"state": "open"},
            after={"state": incident.state},
        )
    return incident


def resolve_incident_by(incident: Incident, user: AbstractBaseUser, note: str = "") -> Incident:
    """A person resolves the incident (from any state but resolved)."""
    _require_handler(user)
    note = _person_text(note, "a resolution note")[:2000]
    with transaction.atomic():
        incident = lock_incident(incident)
        if incident.state == State.RESOLVED:
            raise WorkflowError("the incident is already resolved")
        before = incident.state
        _resolve(incident, at=timezone.now(), by=user, note=note)
        record_event(
            incident, actor_name(user), "resolved", before=before, after=State.RESOLVED, text=note
        )
        record_audit(
            incident,
            user,
            "incident-resolve",
            before={"state": before},
            after={"state": State.RESOLVED, "note": note},
        )
    return incident


def add_incident_note(incident: Incident, user: AbstractBaseUser, text: str) -> IncidentEvent:
    """A note on the incident's timeline."""
    _require_handler(user)
    text = _person_text(text, "a note")
    if not text:
        raise WorkflowError("a note needs some text")
    if len(text) > 4000:
        raise WorkflowError("a note has at most 4000 characters")
    with transaction.atomic():
        incident = lock_incident(incident)
        event = record_event(incident, actor_name(user), "note", text=text)
        record_audit(incident, user, "incident-note", after={"text": text})
    return event


def _person_text(text: str, what: str) -> str:
    """A person's text for the timeline, stripped; a NUL (which no database text column holds)
    is refused as a :class:`WorkflowError` naming ``what``, never a 500."""
    if "\x00" in text:
        raise WorkflowError(f"{what} may not hold a NUL character")
    return text.strip()


def _resolve(incident: Incident, *, at: datetime, by: AbstractBaseUser | None, note: str) -> None:
    incident.state = State.RESOLVED
    incident.resolved_at = at
    incident.resolved_by = by
    episodes = list((incident.details or {}).get("episodes") or [])
    if episodes:
        episodes[-1] = {**episodes[-1], "resolved_at": at.isoformat()}
    incident.details = {**(incident.details or {}), "episodes": episodes}
    if note:
        incident.details["resolution"] = note
    incident.save(update_fields=["state", "resolved_at", "resolved_by", "details"])


# -- jobs hit at the time of the fault -----------------------------------------------------------


# -- the cycle's step ----------------------------------------------------------------------------


def _gpu_health(nodes: NodeView, node: str, gpu_index: int | None) -> dict[str, Any]:
    """Whether the incident's GPU (or, for a node incident, each of the node's GPUs) is healthy
    in the snapshot (its incidents' nodes read once per cycle: :func:`node_view`), and its node
    ready."""
    node_state = str(nodes.states[node]) if node in nodes.states else None
    gpus = [g for g in nodes.gpus.get(node, ()) if gpu_index is None or g.get("index") == gpu_index]
    healths = [str(g.get("health") or "ok") for g in gpus]
    xids = [x for g in gpus for x in g.get("xid") or ()]
    healthy = (
        bool(healths)
        and all(h == "ok" for h in healths)
        and node_state not in NOT_HEALTHY_NODE_STATES
    )
    return {
        "healthy": healthy,
        "gpu_health": healths[0] if len(healths) == 1 else healths,
        "node_state": node_state,
        "xids": xids,
    }


@transaction.atomic
def record_incidents(
    cluster: Cluster,
    snap: snapshot_format.ClusterSnapshot,
    xid_findings: Iterable[Finding],
    *,
    stored: Snapshot | None = None,
) -> dict[str, int]:
    """The cycle's incident step: open an incident for each GPU the ``xid`` rule reports that has
    none unresolved, refresh the jobs hit while the hit window is not over, follow each
    unresolved incident's health, note the drain it started once applied, and resolve an
    acknowledged ``xid`` incident whose GPU has been healthy for the healthy period.
    What it reads of the cycle's snapshot ``snap`` is read from its frames
    (:mod:`diagnosis.core.incident_reads`), never from its whole document; ``stored`` is the row
    it was stored as: an incident whose hit window includes it reads the frames, not the row."""

    as_of = parse_time(snapshot_format.format_time(snap.as_of))  # as its document has it
    stats = {"opened": 0, "resolved": 0}
    loaded = DecodedSnapshots({stored.pk: snap} if stored is not None else {})
    # one incident per GPU and episode: an unresolved Alertmanager incident of the GPU takes the
    # rule's finding instead of a second incident (keys of the rule's own come last: they win)
    rows = list(
        Incident.objects.select_for_update(of=("self",))
        .filter(
            cluster=cluster, source__in=(*FOLLOWED_SOURCES, "alertmanager"), state__in=UNRESOLVED
        )
        .select_related("drain")
    )
    for incident in rows:
        incident.cluster = cluster  # not read again per incident
    xids_noted = _xids_noted(rows)
    unresolved = {
        (i.node, i.gpu_index): i
        for i in sorted(rows, key=lambda i: (i.source in FOLLOWED_SOURCES, i.opened_at, i.pk))
    }
    node_incidents = {
        node: i
        for (node, index), i in unresolved.items()
        if index is None and i.source == SOURCE_NODE_HEALTH
    }
    opening: list[tuple[Incident, list[Mapping[str, Any]]]] = []
    for finding in xid_findings:
        evidence = finding.evidence or {}
        node, index = evidence.get("node"), evidence.get("index")
        if node is None or index is None:
            continue
        codes = [c for c in evidence.get("codes") or () if isinstance(c, Mapping)]
        incident = unresolved.get((node, int(index))) or node_incidents.get(node)
        if incident is None:
            incident = new_xid_incident(cluster, node, int(index), codes, finding, as_of)
            unresolved[(node, int(index))] = incident
            opening.append((incident, codes))
            continue
        _record_codes(incident, codes, finding, xids_noted.setdefault(incident.pk, set()))
    stats["opened"] += open_xid_incidents(opening, unresolved, xids_noted)
    stats["opened"] += _open_node_incidents(cluster, snap, as_of, unresolved)
    followed = [i for i in unresolved.values() if i.source in FOLLOWED_SOURCES]
    nodes = node_view(snap, {i.node for i in followed})
    unsettled = [i for i in followed if not (i.details or {}).get("hit_settled")]
    loaded.prefetch(cluster, [(i.node, i.opened_at) for i in unsettled])
    hits = [window_hits(cluster, i.node, i.gpu_index, i.opened_at, loaded) for i in unsettled]
    loaded.prefetch_jobs(cluster, {job_id for hit in hits for job_id in hit})
    resolved = _resolved_findings(followed)
    for incident in followed:
        _follow(incident, snap, as_of, stats, loaded, nodes, incident.finding_id in resolved)
    _note_recent_drains(cluster, snap, as_of)
    return stats


def _resolved_findings(incidents: list[Incident]) -> set[int]:
    """The ids of the incidents' findings that are resolved, in one query for all of them (the
    cycle follows hundreds at 131,072 GPUs; nothing in the step changes a finding's state)."""
    ids = {i.finding_id for i in incidents if i.finding_id is not None}
    if not ids:
        return set()
    return set(Finding.objects.filter(pk__in=ids, state="resolved").values_list("pk", flat=True))


def _node_fingerprint(cluster: Cluster, node: str, opened: datetime) -> str:
    where = hashlib.sha256(node.encode()).hexdigest()[:16]
    return f"node-health:{cluster.pk}:{where}:{opened:%Y%m%dT%H%M%S}"


def _open_node_incidents(
    cluster: Cluster,
    snap: snapshot_format.ClusterSnapshot,
    as_of: datetime,
    unresolved: dict[tuple[str, int | None], Incident],
) -> int:
    """A node incident for each node whose every GPU is unhealthy and that has no unresolved
    incident (of a GPU or of the node) nor one resolved in this episode (a person resolved it
    while the node stayed unhealthy). A node that has a healthy GPU again ends the episode of
    its resolved node incidents. Returns how many were opened."""
    nodes = unhealthy_nodes(snap)
    resolved_in_episode = list(
        Incident.objects.filter(
            cluster=cluster, source=SOURCE_NODE_HEALTH, state=State.RESOLVED
        ).exclude(details__has_key="episode_over")
    )
    ended = [i.pk for i in resolved_in_episode if i.node not in nodes]
    if ended:
        for incident in Incident.objects.filter(pk__in=ended):
            incident.details = {**(incident.details or {}), "episode_over": iso(as_of)}
            incident.save(update_fields=["details"])
    held = {node for node, _ in unresolved}
    held |= {i.node for i in resolved_in_episode if i.node in nodes}
    opened = 0
    for node, gpus in sorted(nodes.items()):
        if node in held:
            continue
        summary = (
            f"Node {node}: all {gpus} GPUs unhealthy, no GPU named"
            " (a node-level health fault, e.g. an NVSentinel condition)"
        )
        incident, created = Incident.objects.get_or_create(
            fingerprint=_node_fingerprint(cluster, node, as_of),
            defaults={
                "cluster": cluster,
                "node": node,
                "gpu_index": None,
                "summary": summary,
                "details": {"kind": "node-health", "gpus": gpus},
                "source": SOURCE_NODE_HEALTH,
                "opened_at": as_of,
            },
        )
        if not created:
            continue
        unresolved[(node, None)] = incident
        opened += 1
        record_event(incident, SYSTEM_CYCLE, "opened", after=State.OPEN, time=as_of, text=summary)
    return opened


def _xids_noted(incidents: list[Incident]) -> dict[int, set[tuple[Any, Any]]]:
    """Incident id -> the Xids (code, last time) on its timeline, for all of them at once."""
    noted: dict[int, set[tuple[Any, Any]]] = {}
    rows = IncidentEvent.objects.filter(incident__in=incidents, kind="xid").values_list(
        "incident_id", "details__code", "details__last"
    )
    for incident_id, code, last in rows:
        noted.setdefault(incident_id, set()).add((code, last))
    return noted


def _record_codes(
    incident: Incident,
    codes: list[Mapping[str, Any]],
    finding: Finding,
    seen: set[tuple[Any, Any]],
) -> None:
    """Each Xid (code, last time) once on the timeline (``seen``: those on it already); the
    codes on the incident, written when they or its finding changed."""
    for code in new_xid_codes(codes, seen):
        xid_event(incident, code).save(force_insert=True)
    details = dict(incident.details or {})
    details["codes"] = [dict(c) for c in codes]
    if details == incident.details and incident.finding_id == finding.pk:
        return
    incident.details = details
    incident.finding = finding
    incident.save(update_fields=["details", "finding"])


def _follow(
    incident: Incident,
    snap: snapshot_format.ClusterSnapshot,
    as_of: datetime,
    stats: dict,
    loaded: DecodedSnapshots,
    nodes: NodeView,
    finding_resolved: bool,
) -> None:
    details = dict(incident.details or {})
    if not details.get("hit_settled"):
        hit = jobs_hit(
            incident.cluster, incident.node, incident.gpu_index, incident.opened_at, loaded=loaded
        )
        details.update(
            jobs=hit["jobs"], tenants=hit["tenants"], gpu_hours_lost=hit["gpu_hours_lost"]
        )
        details["hit_settled"] = as_of >= incident.opened_at + HIT_WINDOW
    health = _gpu_health(nodes, incident.node, incident.gpu_index)
    was = details.get("health") or {}
    if was.get("healthy") != health["healthy"] or was.get("node_state") != health["node_state"]:
        record_event(
            incident,
            SYSTEM_CYCLE,
            "health",
            time=as_of,
            text=(
                f"GPU {'healthy' if health['healthy'] else 'not healthy'}"
                f" ({health['gpu_health']}), node {health['node_state']}"
            ),
            details={"healthy": health["healthy"], "node_state": health["node_state"]},
        )
    details["health"] = {k: health[k] for k in ("healthy", "gpu_health", "node_state")}
    _note_drain(incident, details, snap)
    healthy_since = incident.healthy_since
    if not health["healthy"] or health["xids"]:
        healthy_since = None
    elif healthy_since is None:
        healthy_since = as_of
    if details != incident.details or healthy_since != incident.healthy_since:
        incident.details, incident.healthy_since = details, healthy_since
        incident.save(update_fields=["details", "healthy_since"])  # only what changed is written
    propose_resume(incident, health, as_of)
    unattended = resolves_unattended(incident, finding_resolved)
    if (
        incident.source in FOLLOWED_SOURCES
        and (incident.state in (State.ACKNOWLEDGED, State.MITIGATING) or unattended)
        and incident.healthy_since is not None
        and _healthy_long_enough(incident, as_of, finding_resolved)
    ):
        before = incident.state
        note = "the GPU has been healthy for the healthy period"
        if before == State.OPEN:
            note += " (an application-level Xid: nothing to service, nobody had to acknowledge)"
        _resolve(incident, at=as_of, by=None, note=note)
        record_event(
            incident,
            SYSTEM_CYCLE,
            "resolved",
            before=before,
            after=State.RESOLVED,
            time=as_of,
            text=f"healthy since {incident.healthy_since:%Y-%m-%d %H:%M} UTC",
        )
        stats["resolved"] += 1


def _healthy_long_enough(incident: Incident, as_of: datetime, finding_resolved: bool) -> bool:
    """The GPU has been healthy for the healthy period: its ``xid`` finding resolved (the rule
    kept it firing while the GPU was not healthy and let it go ``healthy_s`` later), or -- a
    finding held because the GPU sends no metrics -- the incident saw it healthy that long."""
    if finding_resolved:
        return True
    return as_of - incident.healthy_since >= healthy_period(incident.cluster)


def _note_drain(
    incident: Incident, details: dict[str, Any], snap: snapshot_format.ClusterSnapshot
) -> None:
    """Once the drain on-call started is applied, it goes on the timeline (once), and so does
    each eviction the scheduler's events show it caused (the cycle's snapshot events and the
    stored ones; once per job, as they arrive). The evictions are kept in
    ``details.drain.evicted`` (job id -> time): what a job's page reads."""
    drain = dict(details.get("drain") or {})
    rec = incident.drain
    since = drain_decided_at(incident)
    if rec is None or rec.state not in APPLIED_STATES or since is None:
        return
    node = drain.get("node") or incident.node
    if not drain.get("applied_noted"):
        record_event(
            incident,
            SYSTEM_CYCLE,
            "drain-applied",
            time=rec.applied_at or timezone.now(),
            text=f"node {node} drained",
            details={"recommendation": rec.pk, "job_ids": drain.get("job_ids") or []},
        )
        drain["applied_noted"] = True
    evicted = dict(drain.get("evicted") or {})
    found = drain_evictions(
        incident.cluster,
        node,
        since,
        incident_id=incident.pk,
        events=events_on(snap, [node]),
    )
    for job_id, moment in sorted(found.items()):
        if job_id in evicted:
            continue
        record_event(
            incident,
            SYSTEM_CYCLE,
            "evicted",
            time=moment,
            text=f"job {job_id} preempted by the drain of {node}"
            + (f" (policy {drain['policy']})" if drain.get("policy") else ""),
            details={"job": job_id, "recommendation": rec.pk},
        )
        evicted[job_id] = iso(moment)
    details["drain"] = {**drain, "evicted": evicted}


def drain_decided_at(incident: Incident) -> datetime | None:
    """The cluster's time when the incident's drain was decided: the snapshot its impact was
    computed from (cluster time, which a simulated cluster runs ahead of ours); else when the
    drain was applied."""
    drain = (incident.details or {}).get("drain") or {}
    rec = incident.drain
    moment = parse_time(drain.get("as_of") or ((rec.impact or {}).get("as_of") if rec else ""))
    if moment is None and rec is not None:
        moment = rec.applied_at
    return moment


# Resolved incidents whose drain may still bring evictions are looked at for this long after they
# were resolved (wall clock); the eviction window itself is in the cluster's time.
RECENT_DRAIN_LOOKBACK = timedelta(days=1)


def _note_recent_drains(
    cluster: Cluster, snap: snapshot_format.ClusterSnapshot, as_of: datetime
) -> None:
    """The evictions of drains that ended their incident (resolved right after the drain) while
    their window is open: an unresolved incident's are noted as it is followed. Such an
    incident's node, still out once its GPU is healthy again, gets its resume proposed too."""
    recently = timezone.now() - RECENT_DRAIN_LOOKBACK  # our clock: when it was resolved
    incidents = list(
        Incident.objects.select_for_update()
        .filter(
            cluster=cluster, state=State.RESOLVED, drain__isnull=False, resolved_at__gte=recently
        )
        .select_related("drain")
    )
    nodes = node_view(snap, {i.node for i in incidents if i.source in FOLLOWED_SOURCES})
    for incident in incidents:
        if incident.source in FOLLOWED_SOURCES:
            propose_resume(incident, _gpu_health(nodes, incident.node, incident.gpu_index), as_of)
        since = drain_decided_at(incident)
        if since is None or as_of > since + DRAIN_EVICTION_WINDOW:
            continue
        details = dict(incident.details or {})
        _note_drain(incident, details, snap)
        if details != incident.details:
            incident.details = details
            incident.save(update_fields=["details"])


def adopt_rule_incident(
    cluster: Cluster, node: str, gpu_index: int | None, fingerprint: str, starts_at: datetime
) -> Incident | None:
    """An Alertmanager alert for a GPU whose Xid the ``xid`` rule already opened an incident for
    takes that incident over (one incident per GPU and episode): it gets the alert's
    fingerprint and follows the alert from then on. None when there is none to take."""
    incident = (
        Incident.objects.select_for_update()
        .filter(
            cluster=cluster,
            source=SOURCE_XID,
            node=node,
            gpu_index=gpu_index,
            state__in=UNRESOLVED,
        )
        .order_by("opened_at")
        .first()
    )
    if incident is None:
        return None
    incident.fingerprint = fingerprint
    incident.source = "alertmanager"
    incident.details = {
        **(incident.details or {}),
        "episodes": [{"starts_at": starts_at.isoformat(), "resolved_at": None}],
    }
    incident.save(update_fields=["fingerprint", "source", "details"])
    record_event(incident, "system:alertmanager", "alert", text="Alertmanager's alert joined")
    return incident


def record_cycle_incidents(
    cluster: Cluster,
    snap: snapshot_format.ClusterSnapshot,
    diagnosis: Any,
    stored: Snapshot | None = None,
) -> dict[str, int]:
    """:func:`record_incidents` for a cycle's diagnosis (its ``xid`` findings' stored rows);
    ``snap`` is the cycle's snapshot, ``stored`` its row."""
    keys = [
        Finding.fingerprint_of(cluster.pk, hit.rule, hit.subject)
        for hit in diagnosis.findings
        if hit.rule == "xid"
    ]
    findings = Finding.objects.filter(cluster=cluster, fingerprint__in=keys).order_by("id")
    return record_incidents(cluster, snap, findings, stored=stored)
