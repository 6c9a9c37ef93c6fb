"""A cluster that shrinks too much at once is not judged (docs/operations.md, "A cluster that
shrinks at once").

A scheduler that answers 200 with an empty or half cluster (``{"nodes": null}``), or with its
nodes but no jobs (``{"apps": null}``), would otherwise make every finding on what is missing
resolve. When the snapshot's node or GPU count falls below ``1 - GPUOBS_SIZE_DROP_SHARE`` of the
last good cycle's (or to zero), or its live (running and pending) jobs below
``1 - GPUOBS_SIZE_JOB_DROP_SHARE`` of a count of at least ``GPUOBS_SIZE_JOBS_MIN``, the cycle is
recorded as not judged (a failed cycle row naming the drop, the cluster's status degraded),
nothing is diagnosed and every finding stays as it was, until a person with the SRE or admin role
confirms the new size (audited ``cluster-size-confirm``) or the same size holds for
``GPUOBS_SIZE_HOLD_CYCLES`` cycles in a row (audited ``cluster-size-held``, by gpuobs)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.utils import timezone

from diagnosis import roles
from diagnosis.actions.workflow.base import WorkflowDenied, WorkflowError, actor_name
from diagnosis.models import AuditEntry, Cluster, ClusterCycle

if TYPE_CHECKING:  # the snapshot package loads pandas; the URLconf must not (#35)
    from diagnosis.core import snapshot as snapshot_format

SYSTEM_SIZE = "system:cluster-size"


LIVE_JOB_STATES = ("running", "pending")


def size_of(snap: snapshot_format.ClusterSnapshot) -> dict[str, int]:
    jobs = snap.jobs
    live = int(jobs["state"].isin(LIVE_JOB_STATES).sum()) if len(jobs) else 0
    return {"nodes": len(snap.nodes), "gpus": len(snap.gpus), "jobs": live}


def _dropped(before: dict[str, Any], now: dict[str, int]) -> dict[str, str]:
    """What fell too far since ``before``, each as its words ("GPUs 512 → 0"); empty when
    nothing did. A cycle stored before jobs were counted has no ``jobs``: never a fall."""
    falls = {}
    for key, label, share, floor in (
        ("nodes", "nodes", settings.GPUOBS_SIZE_DROP_SHARE, 1),
        ("gpus", "GPUs", settings.GPUOBS_SIZE_DROP_SHARE, 1),
        ("jobs", "jobs", settings.GPUOBS_SIZE_JOB_DROP_SHARE, settings.GPUOBS_SIZE_JOBS_MIN),
    ):
        was = int(before.get(key) or 0)
        if was >= max(floor, 1) and (now[key] == 0 or now[key] < was * (1 - share)):
            falls[key] = f"{label} {was} → {now[key]}"
    return falls


def _held(now: dict[str, int], fallen: dict[str, str]) -> dict[str, Any]:
    """The size a hold keeps and a person confirms: nodes and GPUs as counted, jobs only as
    having fallen (live jobs change every cycle; a drop that stays is the same drop)."""
    return {"nodes": now["nodes"], "gpus": now["gpus"], "fallen": sorted(fallen)}


def size_refusal(cluster: Cluster, snap: snapshot_format.ClusterSnapshot) -> str | None:
    """Why this cycle's snapshot is not judged (None: judge it). Keeps the cluster's
    ``size_hold`` (the held size and its cycles); a confirmed or long-held size is judged."""
    now = size_of(snap)
    last = ClusterCycle.objects.filter(cluster=cluster, ok=True).order_by("-as_of").first()
    fallen = _dropped(last.size if last is not None else {}, now)
    # read again: a person may have confirmed since this cycle loaded the cluster
    stored = Cluster.objects.filter(pk=cluster.pk).values_list("size_hold", flat=True).first()
    hold = dict(stored or {})
    if not fallen:
        if hold:
            _save_hold(cluster, {})
        return None
    held = _held(now, fallen)
    if hold.get("confirmed") == held:
        _save_hold(cluster, {})
        return None
    same = hold.get("match") == held
    cycles = int(hold.get("cycles") or 0) + 1 if same else 1
    needed = settings.GPUOBS_SIZE_HOLD_CYCLES
    if cycles >= needed:
        with transaction.atomic():
            _save_hold(cluster, {})
            AuditEntry.objects.create(
                actor=SYSTEM_SIZE,
                action="cluster-size-held",
                target=f"cluster:{cluster.name}",
                before=last.size if last else None,
                after=now,
                cluster=cluster,
            )
        return None
    since = hold.get("since") if same else timezone.now().isoformat()
    falls = list(fallen.values())
    _save_hold(
        cluster, {"size": now, "match": held, "cycles": cycles, "since": since, "falls": falls}
    )
    return (
        f"not judged: the scheduler reports {', '.join(falls)} since the last good cycle; "
        f"findings are kept until an SRE confirms the new size or it holds for {needed} "
        f"cycles ({cycles} so far)"
    )


def _save_hold(cluster: Cluster, hold: dict[str, Any]) -> None:
    cluster.size_hold = hold
    Cluster.objects.filter(pk=cluster.pk).update(size_hold=hold)


@transaction.atomic
def confirm_cluster_size(cluster: Cluster, user: AbstractBaseUser) -> dict[str, Any]:
    """A person confirms the size the cluster's cycles hold back: the next cycle with that size
    is judged (findings on what is gone resolve). SRE or admin only; audited
    ``cluster-size-confirm``. :class:`WorkflowError` (409) when no drop is held."""
    if not roles.has_role(user, roles.Role.SRE):
        raise WorkflowDenied("only an SRE or an admin may confirm a cluster's new size")
    locked = Cluster.objects.select_for_update().get(pk=cluster.pk)
    hold = dict(locked.size_hold or {})
    if not hold.get("size"):
        raise WorkflowError(f"cluster {cluster.name} holds no drop in size to confirm")
    hold["confirmed"] = hold.get("match") or hold["size"]
    hold["confirmed_by"] = actor_name(user)
    _save_hold(locked, hold)
    AuditEntry.objects.create(
        actor=actor_name(user),
        action="cluster-size-confirm",
        target=f"cluster:{cluster.name}",
        before={"falls": hold.get("falls")},
        after=hold["size"],
        cluster=locked,
    )
    return hold
