"""On-call's pages (issue #16): the incident list (every source: the ``xid`` rule and
Alertmanager), one incident (what broke, the runbook, the timeline, the jobs and tenants hit,
the node's other GPUs, the buttons), and the drain's confirmation with the jobs it would evict,
computed when it is shown and again when it is confirmed. Thin: reads through
``diagnosis.access``, writes through ``diagnosis.actions.oncall.incidents``. See docs/ui.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.contrib import messages
from django.db.models import Case, IntegerField, Value, When
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.utils.translation import gettext
from django.views.decorators.http import require_http_methods, require_POST, require_safe

from diagnosis import roles
from diagnosis.access import (
    get_cluster_for_user,
    get_incident_for_user,
    incidents_for_user,
    prime_texts_for_user,
    tenants_for_user,
)
from diagnosis.actions.oncall.drain import (
    DrainChanged,
    drain_command,
    drain_for_incident,
    drain_impact,
    drains_of_job,
)
from diagnosis.actions.oncall.incidents import (
    SOURCE_XID,
    SYSTEM_CYCLE,
    acknowledge_incident,
    add_incident_note,
    resolve_incident_by,
)
from diagnosis.actions.workflow.base import APPLIED_STATES, WorkflowDenied, WorkflowError
from diagnosis.actions.workflow.outcome import apply_outcome
from diagnosis.choices import FindingState, IncidentState, RecommendationKind
from diagnosis.core import xid_catalog
from diagnosis.models import Cluster, Incident, IncidentEvent, Snapshot
from diagnosis.pages.live import latest_good_cycle
from diagnosis.pages.support.cluster_clock import ClusterClock
from diagnosis.pages.support.pagination import paginate

INCIDENTS_PER_PAGE = 25
STATE_RANK = Case(
    When(state=IncidentState.OPEN, then=Value(0)),
    When(state=IncidentState.ACKNOWLEDGED, then=Value(1)),
    When(state=IncidentState.MITIGATING, then=Value(2)),
    default=Value(3),
    output_field=IntegerField(),
)


def _visible_tenants(request: HttpRequest, cluster: Cluster) -> set[str] | None:
    """The tenants whose jobs a manager may see; None for everyone else (no filter)."""
    if not roles.is_tenant_scoped(request.user):
        return None
    return set(tenants_for_user(request.user, cluster).values_list("name", flat=True))


def _scoped(jobs: Any, tenants: set[str] | None) -> list[Mapping[str, Any]]:
    rows = [j for j in jobs or () if isinstance(j, Mapping)]
    return rows if tenants is None else [j for j in rows if j.get("tenant") in tenants]


def _tenants_hit(incident: Incident, tenants: set[str] | None) -> list[str]:
    """The tenants whose jobs the incident hit, as the reader may see them (a manager: theirs)."""
    hit = [str(t) for t in (incident.details or {}).get("tenants") or ()]
    return hit if tenants is None else [t for t in hit if t in tenants]


def _what_broke(incident: Incident) -> dict[str, Any]:
    """The catalog's entry for the incident's code (or the alert's own words), and the runbook."""
    details = incident.details or {}
    info = xid_catalog.lookup(incident.xid_code) if incident.xid_code is not None else None
    alert = details.get("alert") or {}
    annotations = alert.get("annotations") or {} if isinstance(alert, Mapping) else {}
    labels = alert.get("labels") or {} if isinstance(alert, Mapping) else {}
    recovery = labels.get("recovery_action") or annotations.get("recovery_action")
    return {
        "info": info,
        "alert_text": annotations.get("description") or annotations.get("summary"),
        "recovery_action": recovery,
        "runbook": runbook(info),
    }


def runbook(info: xid_catalog.XidInfo | None) -> list[str]:
    """A short runbook from the catalog's action for the code, in the reader's language."""
    if info is None:
        return [
            gettext("Check the GPU's health (nvidia-smi -q, dcgmi health -c)."),
            gettext(
                "If it keeps failing: drain the node, then run DCGM diagnostics (dcgmi diag -r 3)."
            ),
        ]
    steps = []
    if info.action in ("reset-gpu", "reboot-node", "service", "check-hardware"):
        steps.append(
            gettext("Drain the node (the button below): its jobs are evicted and requeued.")
        )
    steps.append(gettext(info.action_text))
    if info.nvidia_immediate:
        steps.append(
            gettext("NVIDIA's immediate action: %(action)s.") % {"action": info.nvidia_immediate}
        )
    if info.nvidia_investigatory:
        steps.append(
            gettext("Then investigate: %(action)s.") % {"action": info.nvidia_investigatory}
        )
    steps.append(
        gettext(
            "Resolve the incident once the GPU is back and healthy (gpuobs resolves an "
            "acknowledged one by itself after the healthy period)."
        )
    )
    return steps


def summary_text(incident: Incident) -> str:
    """The incident's summary in the reader's language: an ``xid`` incident's is composed
    again from the catalog (its meaning translated, docs/xid.md); any other as recorded."""
    info = xid_catalog.lookup(incident.xid_code) if incident.xid_code is not None else None
    if info is None or not info.known or incident.source != SOURCE_XID:
        return incident.summary
    return gettext("Xid %(code)s on %(node)s GPU %(index)s: %(name)s: %(meaning)s") % {
        "code": info.code,
        "node": incident.node,
        "index": incident.gpu_index,
        "name": info.name,
        "meaning": gettext(info.meaning),
    }


@require_safe
def incident_list(request: HttpRequest, name: str) -> HttpResponse:
    """Every incident of the cluster (the ``xid`` rule's and Alertmanager's), unresolved first."""
    cluster = get_cluster_for_user(request.user, name)
    incidents = incidents_for_user(request.user, cluster).order_by(STATE_RANK, "-opened_at", "-id")
    page, _ = paginate(request, incidents, INCIDENTS_PER_PAGE)  # the list has no filters to keep
    tenants = _visible_tenants(request, cluster)
    prime_texts_for_user(request.user, cluster.pk, [i.summary for i in page.object_list])
    rows = [
        {
            "incident": i,
            "info": xid_catalog.lookup(i.xid_code) if i.xid_code is not None else None,
            "jobs": _scoped((i.details or {}).get("jobs"), tenants),
            "tenants": _tenants_hit(i, tenants),
        }
        for i in page.object_list
    ]
    context = {
        "cluster": cluster,
        "section": "incidents",
        "page": page,
        "query": "",
        "rows": rows,
        "open_count": incidents.exclude(state=IncidentState.RESOLVED).count(),
        "good": latest_good_cycle(request, cluster),  # the live status line (docs/ui.md)
    }
    return render(request, "diagnosis/incident_list.html", context)


def _other_gpus(cluster: Cluster, incident: Incident, tenants: set[str] | None) -> list[dict]:
    latest = Snapshot.objects.filter(cluster=cluster).order_by("-as_of").first()
    if latest is None:
        return []
    document = latest.load_document()
    holders: dict[int, list[Mapping[str, Any]]] = {}
    for job in document.get("jobs") or ():
        if tenants is not None and job.get("tenant") not in tenants:
            continue
        for pod in job.get("allocation") or ():
            if pod.get("node") == incident.node:
                for g in pod.get("gpus") or ():
                    holders.setdefault(int(g), []).append(job)
    return [
        {
            "index": g.get("index"),
            "health": g.get("health") or "ok",
            "jobs": holders.get(int(g.get("index") or 0), []),
            "this": g.get("index") == incident.gpu_index,
        }
        for g in sorted(
            (g for g in document.get("gpus") or () if g.get("node") == incident.node),
            key=lambda g: g.get("index") or 0,
        )
    ]


# The cycle's steps are on the cluster's clock (a snapshot's time, an Xid's); these of its
# entries, and everything people and Alertmanager do, on the wall clock.
CYCLE_WALL_KINDS = frozenset({"drain-applied"})


def _on_wall_clock(event: IncidentEvent) -> bool:
    return event.actor != SYSTEM_CYCLE or event.kind in CYCLE_WALL_KINDS


def _wall_moments(incident: Incident, history: list[IncidentEvent]) -> dict[Any, Any]:
    """The incident's wall-clock moments, by what they are: its opening (an alert's), its
    resolution by a person, its acknowledgement, and each such timeline entry (by its id)."""
    walls: dict[Any, Any] = {e.pk: e.time for e in history if _on_wall_clock(e)}
    if incident.source == "alertmanager":
        walls["opened"] = incident.opened_at
    if incident.acknowledged_at is not None:
        walls["acknowledged"] = incident.acknowledged_at
    if incident.resolved_at is not None and incident.resolved_by_id is not None:
        walls["resolved"] = incident.resolved_at
    return walls


def _timeline(
    history: list[IncidentEvent], walls: dict[Any, Any], clock: ClusterClock
) -> list[dict[str, Any]]:
    """The timeline in the order things happened, on the page's one clock (the cluster's): a
    person's note after the cycle that showed them the fault, never before its opening."""
    rows = [
        {"event": e, "wall": e.pk in walls, "at": clock.at(e.time) if e.pk in walls else e.time}
        for e in history
    ]
    return sorted(rows, key=lambda row: (row["at"], row["event"].pk))


def _detail_url(cluster: Cluster, incident: Incident) -> str:
    return reverse("diagnosis:incident", kwargs={"name": cluster.name, "incident_id": incident.pk})


@require_safe
def incident_detail(request: HttpRequest, name: str, incident_id: int) -> HttpResponse:
    """One incident: what broke, the runbook, the jobs hit, the node's GPUs, the timeline."""
    cluster = get_cluster_for_user(request.user, name)
    incident = get_incident_for_user(request.user, cluster, incident_id)
    tenants = _visible_tenants(request, cluster)
    details = incident.details or {}
    drain = incident.drain
    history = list(incident.history.all())
    prime_texts_for_user(request.user, cluster.pk, [incident.summary, *(e.text for e in history)])
    walls = _wall_moments(incident, history)
    clock = ClusterClock.around(cluster, walls.values())
    context = {
        "cluster": cluster,
        "section": "incidents",
        "incident": incident,
        "broke": _what_broke(incident),
        "summary": summary_text(incident),
        "jobs": _scoped(details.get("jobs"), tenants),
        "tenants": _tenants_hit(incident, tenants),
        "gpus": _other_gpus(cluster, incident, tenants),
        "history": _timeline(history, walls, clock),
        "clock": clock,
        "opened_wall": "opened" in walls,
        "resolved_wall": "resolved" in walls,
        "drain": drain,
        "drain_applied": drain is not None and drain.state in APPLIED_STATES,
        "resume": drain.rollbacks.order_by("-id").first() if drain is not None else None,
        "waits_for_acknowledgement": incident.state == IncidentState.OPEN
        and incident.finding_id is not None
        and incident.finding.state == FindingState.RESOLVED,
        "drain_jobs": _scoped((details.get("drain") or {}).get("jobs"), tenants),
        "can_handle": roles.can_handle_incidents(request.user),
        "can_drain": roles.can_apply(request.user, RecommendationKind.DRAIN_NODE)
        and incident.state != IncidentState.RESOLVED
        and bool(incident.node),
        "recommendations": list(incident.finding.recommendations.all())
        if incident.finding_id
        else [],
    }
    return render(request, "diagnosis/incident_detail.html", context)


@require_POST
def incident_action(request: HttpRequest, name: str, incident_id: int, action: str) -> HttpResponse:
    """Acknowledge, resolve or add a note."""
    cluster = get_cluster_for_user(request.user, name)
    incident = get_incident_for_user(request.user, cluster, incident_id)
    try:
        if action == "acknowledge":
            acknowledge_incident(incident, request.user)
            done = gettext("Acknowledged.")
        elif action == "resolve":
            resolve_incident_by(incident, request.user, request.POST.get("note") or "")
            done = gettext("Resolved.")
        elif action == "note":
            add_incident_note(incident, request.user, request.POST.get("text") or "")
            done = gettext("Note added.")
        else:
            raise Http404("no such action")
    except WorkflowError as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, done)
    return HttpResponseRedirect(_detail_url(cluster, incident))


@require_http_methods(["GET", "HEAD", "POST"])
def incident_drain(request: HttpRequest, name: str, incident_id: int) -> HttpResponse:
    """The drain's confirmation (GET: the jobs it would evict, now) and the drain itself (POST:
    computed again; if the jobs changed meanwhile, the confirmation is shown again)."""
    cluster = get_cluster_for_user(request.user, name)
    incident = get_incident_for_user(request.user, cluster, incident_id)
    if not roles.can_apply(request.user, RecommendationKind.DRAIN_NODE):
        raise WorkflowDenied("draining a node needs the oncall role (or sre)")
    changed = False
    if request.method == "POST":
        expected = [j for j in request.POST.getlist("job") if j]
        try:
            rec = drain_for_incident(incident, request.user, expected_job_ids=expected)
        except DrainChanged as exc:
            impact, changed = exc.impact, True
        except WorkflowError as exc:
            messages.error(request, str(exc))
            return HttpResponseRedirect(_detail_url(cluster, incident))
        else:
            outcome = apply_outcome(rec)
            (messages.success if outcome.ok else messages.error)(
                request,
                gettext("Drain of %(node)s: %(outcome)s")
                % {"node": incident.node, "outcome": outcome.message},
            )
            return HttpResponseRedirect(_detail_url(cluster, incident))
    else:
        impact = drain_impact(cluster, incident)
    tenants = _visible_tenants(request, cluster)
    command, _ = drain_command(cluster, incident)  # the error text may name hosts: not shown
    context = {
        "cluster": cluster,
        "section": "incidents",
        "incident": incident,
        "impact": impact,
        "command": command,
        "jobs": _scoped(impact["jobs_to_evict"], tenants),
        "hidden_jobs": len(impact["jobs_to_evict"])
        - len(_scoped(impact["jobs_to_evict"], tenants)),
        "changed": changed,
    }
    return render(request, "diagnosis/incident_drain.html", context)


def job_drains(cluster: Cluster, job_id: str) -> list[dict[str, Any]]:
    """For a job's page: the drains on-call started from an incident that evict(ed) the job."""
    return [
        {
            "incident": i,
            "node": (i.details.get("drain") or {}).get("node") or i.node,
            "applied": i.drain is not None and i.drain.state in APPLIED_STATES,
            "drain": i.drain,
        }
        for i in drains_of_job(cluster, job_id)
    ]
