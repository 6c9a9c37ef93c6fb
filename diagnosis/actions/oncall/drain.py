"""On-call's one button (issue #16): drain an incident's node now, the jobs to evict computed
when on-call is shown them and again when they confirm; one on-call approval suffices
(docs/recommendations.md#workflow). And which drains evicted a job, for its page: from the
scheduler's stored eviction and preemption events matched to the drain
(:func:`diagnosis.actions.records.events.drain_evictions`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from django.contrib.auth.base_user import AbstractBaseUser
from django.db import transaction
from django.utils import timezone

from diagnosis import roles
from diagnosis.actions.oncall.incidents import (
    State,
    iso,
    lock_incident,
    record_audit,
    record_event,
)
from diagnosis.actions.workflow.apply import ask_scheduler
from diagnosis.actions.workflow.base import (
    APPLIED_STATES,
    OPEN_STATES,
    WorkflowDenied,
    WorkflowError,
    actor_name,
    audit,
    update_fields,
)
from diagnosis.actions.workflow.review import (
    approve_recommendation,
    request_apply,
    request_recommendation,
)
from diagnosis.choices import RecommendationKind, RecommendationState
from diagnosis.core.incident_hits import holds
from diagnosis.edge.schedulers.base import SchedulerError
from diagnosis.models import Cluster, Incident, Recommendation, Snapshot


class DrainChanged(WorkflowError):
    """The jobs a drain would evict changed since on-call was shown them: show them again."""

    def __init__(self, impact: Mapping[str, Any]) -> None:
        super().__init__("the jobs on the node changed since you looked: check the list again")
        self.impact = impact


def drain_impact(cluster: Cluster, incident: Incident) -> dict[str, Any]:
    """What draining the incident's node would evict, from the cluster's latest snapshot, now:
    every job with a pod on the node (the whole job: a gang is evicted whole), the GPUs it holds
    there, and the node's GPUs taken out of scheduling."""

    latest = Snapshot.objects.filter(cluster=cluster).order_by("-as_of").first()
    document = latest.load_document() if latest is not None else {}
    node = incident.node
    jobs = []
    for job in document.get("jobs") or ():
        gpus = holds(job, node, None)
        on_node = any(p.get("node") == node for p in job.get("allocation") or ())
        if not on_node or job.get("state") not in ("running", "pending"):
            continue
        jobs.append(
            {
                "id": str(job["id"]),
                "tenant": job.get("tenant"),
                "queue": job.get("queue"),
                "state": job.get("state"),
                "gang": bool(job.get("gang")),
                "gpus_on_node": sorted(gpus),
                "job_gpus": int(job.get("pods") or 1) * int(job.get("gpus_per_pod") or 1),
                "on_failing_gpu": incident.gpu_index in gpus,
            }
        )
    node_row = next((n for n in document.get("nodes") or () if n.get("name") == node), {})
    return {
        "method": "static",
        "as_of": document.get("as_of"),
        "node": node,
        "node_state": node_row.get("state"),
        "gpus_removed": int(node_row.get("gpus") or 0),
        "jobs_to_evict": sorted(jobs, key=lambda j: j["id"]),
        "job_ids": sorted(j["id"] for j in jobs),
        "headline": (
            f"takes {int(node_row.get('gpus') or 0)} GPUs of {node} out of scheduling; "
            f"evicts {len(jobs)} job(s)"
        ),
        "computed_at": iso(timezone.now()),
    }


def drain_reason(incident: Incident) -> str:
    """The reason the drain of an incident's node gives the scheduler."""
    where = incident.node + ("" if incident.gpu_index is None else f"/{incident.gpu_index}")
    return f"gpuobs: incident {incident.pk}: " + (
        f"Xid {incident.xid_code} on {where}" if incident.xid_code else f"fault on {where}"
    )


def drain_command(cluster: Cluster, incident: Incident) -> tuple[str, str]:
    """The exact command the drain will run, from the scheduler's dry run (Slurm's
    ``scontrol``, the Kubernetes patch, the simulator's change), for the confirmation; or, when
    the scheduler cannot be asked, why (``("", reason)``). Writes nothing."""
    change = {
        "kind": RecommendationKind.DRAIN_NODE,
        "target": f"node:{incident.node}",
        "to": "drained",
        "reason": drain_reason(incident)[:200],
    }
    try:
        return ask_scheduler(cluster, change, dry_run=True).command, ""
    except SchedulerError as exc:
        return "", str(exc)


def drain_for_incident(
    incident: Incident, user: AbstractBaseUser, *, expected_job_ids: Sequence[str] | None = None
) -> Recommendation:
    """On-call's one button: drain the incident's node now.

    The jobs to evict are computed again here, at confirmation; when ``expected_job_ids`` (what
    the confirmation showed) differ, :class:`DrainChanged` carries the fresh list and nothing is
    done. Otherwise the node's open ``drain-node`` recommendation (or a new one) gets the fresh
    impact, is approved by ``user`` (one on-call approval suffices,
    docs/recommendations.md#workflow; an SRE's needs a second person as always) and applied -- a dry
    run on a cluster whose writes are off. The incident becomes ``mitigating`` and remembers the
    drain and the jobs it evicts."""

    if not roles.can_apply(user, RecommendationKind.DRAIN_NODE):
        raise WorkflowDenied("draining a node needs the oncall role (or sre)")
    cluster = incident.cluster
    with transaction.atomic():
        incident = lock_incident(incident)
        if incident.state == State.RESOLVED:
            raise WorkflowError("the incident is resolved: nothing to drain for it")
        if not incident.node:
            raise WorkflowError("the incident names no node")
        impact = drain_impact(cluster, incident)
        if expected_job_ids is not None and sorted(expected_job_ids) != impact["job_ids"]:
            raise DrainChanged(impact)
        target = f"node:{incident.node}"
        rec, superseded = _drain_to_reuse(cluster, incident, user)
        ids = superseded
        reason = drain_reason(incident)
        if rec is None:
            rec = Recommendation.objects.create(
                cluster=cluster,
                kind=RecommendationKind.DRAIN_NODE,
                target=target,
                change={
                    "from": impact["node_state"] or "ready",
                    "to": "drained",
                    "reason": reason[:200],
                },
                created_by=user,
                impact={
                    **impact,
                    "generator": "incident",
                    "summary": f"Cordon and drain node {incident.node} for incident "
                    f"{incident.pk} ({reason.removeprefix('gpuobs: ')}).",
                },
            )
            audit(
                rec,
                actor_name(user),
                "propose",
                after={"change": rec.change, "incident": incident.pk, "supersedes": superseded},
            )
        else:
            before = (rec.impact or {}).get("jobs_to_evict")
            rec.impact = {**(rec.impact or {}), **impact}
            rec.save(update_fields=["impact", "updated_at"])
            audit(
                rec,
                actor_name(user),
                "impact-refreshed",
                before={"jobs_to_evict": before},
                after={"jobs_to_evict": impact["jobs_to_evict"], "incident": incident.pk},
            )
        note_drain_on_incident(
            incident,
            rec,
            impact,
            actor=actor_name(user),
            acknowledged_by=user,
            text=f"drain of {incident.node} requested ({impact['headline']})"
            + "".join(f"; it supersedes #{pk}, a request to put the node back" for pk in ids),
        )
        own_ok, _ = roles.can_approve(
            user, rec.kind, requested_by=user, rollback=rec.rollback_of_id is not None
        )
        if rec.state == "proposed" and own_ok:
            rec = approve_recommendation(rec, user)
        elif rec.state == "proposed" and rec.requested_by_id is None:
            rec = request_recommendation(rec, user)  # an SRE's: someone else approves it
        if rec.state == "approved":
            rec = request_apply(rec, user)
    rec.refresh_from_db()
    return rec


def note_drain_on_incident(
    incident: Incident,
    rec: Recommendation,
    impact: Mapping[str, Any],
    *,
    actor: str,
    text: str,
    acknowledged_by: AbstractBaseUser | None = None,
    extra: Mapping[str, Any] | None = None,
) -> None:
    """The (locked) incident is ``mitigating`` by the drain ``rec``: it remembers the drain and
    the jobs it is to evict (``details.drain``, which the cycle's eviction notes read), and its
    timeline and the audit trail say who (``actor``: a person, or ``policy:<name>``) and
    ``text``. ``extra`` goes into ``details.drain`` (a policy's name and approvers)."""
    if incident.finding_id is not None:
        rec.motivating_findings.add(incident.finding_id)
    before_state = incident.state
    incident.state = State.MITIGATING
    incident.drain = rec
    incident.details = {
        **(incident.details or {}),
        "drain": {
            "recommendation": rec.pk,
            "node": incident.node,
            "as_of": impact["as_of"],  # the cluster's time: its evictions come after
            "job_ids": impact["job_ids"],
            "jobs": impact["jobs_to_evict"],
            "by": actor,
            "at": impact["computed_at"],
            **dict(extra or {}),
        },
    }
    if incident.acknowledged_at is None and acknowledged_by is not None:
        incident.acknowledged_at = timezone.now()
        incident.acknowledged_by = acknowledged_by
    incident.save(update_fields=["state", "drain", "details", "acknowledged_at", "acknowledged_by"])
    record_event(
        incident,
        actor,
        "mitigating",
        before=before_state,
        after=State.MITIGATING,
        text=text,
        details={"recommendation": rec.pk, "job_ids": impact["job_ids"], **dict(extra or {})},
    )
    record_audit(
        incident,
        actor,
        "incident-drain",
        before={"state": before_state},
        after={
            "state": State.MITIGATING,
            "recommendation": rec.pk,
            "jobs_to_evict": impact["job_ids"],
        },
    )


def _drain_to_reuse(
    cluster: Cluster, incident: Incident, user: AbstractBaseUser
) -> tuple[Recommendation | None, list[int]]:
    """The node's open drain, to press on with (None: a new one is made), and the ids of the
    open changes putting the node back in service (a drain's rollback, ``to: ready``) that a
    drain for a new fault supersedes, each audited and its status saying why: a drain is never
    the change that undoes one (docs/recommendations.md#workflow). One being applied right now
    is not overtaken: the drain is refused until it ends."""
    drain, superseded = None, []
    open_changes = (
        Recommendation.objects.select_for_update()
        .filter(
            cluster=cluster,
            kind=RecommendationKind.DRAIN_NODE,
            target=f"node:{incident.node}",
            state__in=OPEN_STATES,
        )
        .order_by("-id")
    )
    for other in open_changes:
        if other.rollback_of_id is None and other.change.get("to") == "drained":
            drain = drain or other
            continue
        if other.state == RecommendationState.APPLYING:
            raise WorkflowError(
                f"recommendation #{other.pk} is putting {incident.node} back in service right "
                "now: drain it again once that has finished"
            )
        before = other.state
        update_fields(
            other,
            state=RecommendationState.SUPERSEDED,
            status_message=f"superseded by a drain of {incident.node} for incident {incident.pk}",
        )
        audit(
            other,
            actor_name(user),
            "superseded-by-drain",
            before={"state": before, "change": other.change},
            after={"state": RecommendationState.SUPERSEDED, "incident": incident.pk},
        )
        superseded.append(other.pk)
    return drain, superseded


def drains_of_job(cluster: Cluster, job_id: str) -> list[Incident]:
    """The incidents whose applied drain preempted the job, as the scheduler's eviction and
    preemption events matched to the drain say (``details.drain.evicted``, noted each cycle: a
    job on the list at confirmation that the drain did not evict is not one of them; one it
    evicted that was not on the list is), or whose drain, not yet applied, is to evict it."""
    drained = (
        Incident.objects.filter(cluster=cluster, drain__isnull=False)
        .select_related("drain")
        .order_by("-opened_at")
    )
    found = []
    for incident in drained:  # drains are few; JSON containment is not on every database
        drain = (incident.details or {}).get("drain") or {}
        if incident.drain.state in APPLIED_STATES:
            if job_id in (drain.get("evicted") or {}):
                found.append(incident)
        elif job_id in (drain.get("job_ids") or ()):
            found.append(incident)
    return found
