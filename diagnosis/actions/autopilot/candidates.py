"""What the autopilot's core reads, from what a cycle stored: a recommendation as a
:class:`Candidate`, a cycle's pools as :class:`PoolCapacity`, a cluster's :class:`Health`. Shared
by the live step and the replay preview, so both judge the same facts."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from django.conf import settings

from diagnosis.choices import DataSourceStatus
from diagnosis.core.autopilot.guards import Health, PoolCapacity
from diagnosis.core.autopilot.policy import DRAIN_NODE, GANG_RELEASE, Candidate
from diagnosis.models import Cluster, ClusterCycle, Recommendation


def _codes(rec: Recommendation) -> tuple[int, ...]:
    basis = (rec.impact or {}).get("basis") or {}
    codes = {int(c) for c in basis.get("codes") or ()}
    for finding in rec.motivating_findings.all():
        if finding.rule_id == "xid":
            codes |= {int(c["code"]) for c in (finding.evidence or {}).get("codes") or ()}
    return tuple(sorted(codes))


def _gang_hold(rec: Recommendation) -> tuple[int, float]:
    """GPUs the gang to release holds and for how long, as the latest cycle saw it: the open
    motivating finding's evidence (a deadlock's member, or the partial hold itself); else the
    figures the recommendation was first proposed with (``basis.candidates``)."""
    job = rec.target.removeprefix("job:")
    for finding in rec.motivating_findings.all():
        if finding.state == "resolved":
            continue
        evidence = finding.evidence or {}
        for member in evidence.get("members") or ():
            if str(member.get("id")) == job:
                return int(member.get("gpus_held") or 0), float(member.get("hold_s") or 0)
        if "gpus_held" in evidence and "members" not in evidence:
            return int(evidence.get("gpus_held") or 0), float(evidence.get("hold_s") or 0)
    for member in ((rec.impact or {}).get("basis") or {}).get("candidates") or ():
        if str(member.get("id")) == job:
            return int(member.get("gpus_held") or 0), float(member.get("hold_s") or 0)
    return 0, 0.0


def candidate_of(rec: Recommendation, cluster_name: str) -> Candidate:
    """The facts a policy's condition and the guards read (motivating findings prefetched)."""
    impact = rec.impact or {}
    pool = impact.get("pool") or ((impact.get("basis") or {}).get("pool"))
    held, hold_s = _gang_hold(rec) if rec.kind == GANG_RELEASE else (0, 0.0)
    return Candidate(
        recommendation=rec.pk,
        cluster=cluster_name,
        kind=rec.kind,
        target=rec.target,
        pool=str(pool) if pool is not None else None,
        xid_codes=_codes(rec) if rec.kind == DRAIN_NODE else (),
        gpus_out=int(impact.get("gpus_removed") or 0) if rec.kind == DRAIN_NODE else 0,
        gpus_held=held,
        hold_s=hold_s,
        verdict=str(impact.get("verdict") or ""),
        harm=tuple(str(h) for h in impact.get("harm") or ()),
    )


def candidates_of(recs: Iterable[Recommendation], cluster_name: str) -> list[Candidate]:
    return [candidate_of(rec, cluster_name) for rec in recs]


def pools_of(
    cluster_name: str, accounting: Mapping[str, Any] | None
) -> dict[tuple[str, str | None], PoolCapacity]:
    """``(cluster, pool) -> PoolCapacity`` from a cycle's GPU-hour accounting: the pool's GPUs
    and its ``unavailable`` bucket (node not ready, GPU unhealthy)."""
    out: dict[tuple[str, str | None], PoolCapacity] = {}
    for row in (accounting or {}).get("pools") or ():
        unavailable = ((row.get("buckets") or {}).get("unavailable") or {}).get("gpus") or 0
        out[(cluster_name, str(row.get("pool")))] = PoolCapacity(
            gpus=int(row.get("gpus") or 0), out=int(unavailable)
        )
    return out


def stale_after_s() -> float:
    return 2 * float(settings.GPUOBS_CYCLE_SECONDS)


def health_of(cluster: Cluster, cycle: ClusterCycle | None, *, now: datetime) -> Health:
    """Whether the cycle the step follows may be acted on: it must be the cluster's latest,
    good, recent (ran within two cycle periods), with metrics no older than that; and the
    cluster's status ok (a rule failed, metrics incomplete or the size guard holding back make
    it degraded)."""
    latest = ClusterCycle.objects.filter(cluster=cluster).order_by("-id").first()
    stale = ""
    if cycle is None or latest is None:
        stale = "the cluster has no cycle to act on"
    elif not latest.ok:
        stale = f"the latest cycle failed: {cluster.status_message or 'see the cluster page'}"
    elif latest.pk != cycle.pk:
        stale = "a newer cycle ran since: its own step decides"
    elif (now - cycle.ran_at).total_seconds() > stale_after_s():
        stale = (
            f"the latest cycle ran {(now - cycle.ran_at).total_seconds():.0f} s ago "
            f"(stale after {stale_after_s():.0f} s)"
        )
    else:
        metrics_age = (cycle.source or {}).get("data_age_s")
        if isinstance(metrics_age, int | float) and metrics_age > stale_after_s():
            stale = f"the GPU metrics are {metrics_age:.0f} s older than the snapshot"
    degraded = ""
    if cluster.status != DataSourceStatus.OK:
        degraded = f"the cluster's data is {cluster.status}: {cluster.status_message}".rstrip(": ")
    elif (cluster.size_hold or {}).get("size"):
        degraded = "the size guard holds a shrunken cluster back (not judged)"
    return Health(stale=stale, degraded=degraded)
