"""The "replay last week" preview (docs/autopilot.md "Replay"): what a policy's terms would have
done over the stored cycles of the clusters in its scope, before anyone turns it on. Reads only.

Each stored cycle of the last ``days`` (per cluster, back from its latest cycle: a simulated
cluster runs its own clock) is a :class:`ReplayCycle` whose candidates are the recommendations of
the policy's kind open at that time (proposed at or before it, last proposed at or after it);
a failed cycle is stale data. Only the cycles with a candidate are read in full (their pools'
capacity from the GPU-hour accounting). The impact estimate judged is the recommendation's
stored one (its latest), the budgets the policy's own.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from diagnosis.actions.autopilot.candidates import candidate_of, pools_of
from diagnosis.actions.autopilot.policies import PolicyTerms
from diagnosis.choices import RecommendationKind
from diagnosis.core.autopilot.guards import Decision, Health
from diagnosis.core.autopilot.replay import ReplayCycle, replay
from diagnosis.models import Cluster, ClusterCycle, Recommendation

DAYS = 7


def _row(at: Any, decision: Decision) -> dict[str, Any]:
    return {
        "as_of": at.isoformat(),
        "cluster": decision.cluster,
        "recommendation": decision.recommendation,
        "kind": decision.kind,
        "target": decision.target,
        "pool": decision.pool,
        "outcome": decision.outcome,
        "guard": decision.guard,
        "reason": decision.reason,
    }


def _cluster_cycles(cluster: Cluster, terms: PolicyTerms, days: int) -> list[ReplayCycle]:
    until = (
        ClusterCycle.objects.filter(cluster=cluster)
        .order_by("-as_of")
        .values_list("as_of", flat=True)
    ).first()
    if until is None:
        return []
    since = until - timedelta(days=days)
    recs = list(
        Recommendation.objects.filter(
            cluster=cluster,
            kind=terms.kind,
            rollback_of__isnull=True,
            proposed_as_of__isnull=False,
            proposed_as_of__lte=until,
        )
        .exclude(kind=RecommendationKind.DRAIN_NODE, change__to="ready")
        .exclude(last_proposed_as_of__lt=since)
        .prefetch_related("motivating_findings")
    )
    if not recs:
        return []
    candidates = [(rec, candidate_of(rec, cluster.name)) for rec in recs]
    rows = ClusterCycle.objects.filter(cluster=cluster, as_of__gte=since, as_of__lte=until)
    wanted: dict[int, list] = {}
    for cycle_id, as_of in rows.values_list("id", "as_of"):
        here = [
            c
            for rec, c in candidates
            if rec.proposed_as_of <= as_of <= (rec.last_proposed_as_of or rec.proposed_as_of)
        ]
        if here:
            wanted[cycle_id] = here
    out = []
    for cycle in ClusterCycle.objects.filter(pk__in=list(wanted)).only("as_of", "ok", "accounting"):
        health = Health() if cycle.ok else Health(stale="the cycle failed")
        out.append(
            ReplayCycle(
                cycle.as_of,
                tuple(wanted[cycle.pk]),
                pools_of(cluster.name, cycle.accounting),
                {cluster.name: health},
            )
        )
    return out


def replay_preview(
    terms: PolicyTerms, *, days: int = DAYS, policy_id: int = 0, name: str = "preview"
) -> dict[str, Any]:
    """What ``terms`` would have applied over the last ``days`` of stored history, and what they
    would have held back (the last reason of each), as JSON-ready rows."""
    clusters = Cluster.objects.order_by("name")
    if terms.clusters:
        clusters = clusters.filter(name__in=list(terms.clusters))
    cycles = [c for cluster in clusters for c in _cluster_cycles(cluster, terms, days)]
    result = replay(terms.spec(policy_id, name), cycles)
    return {
        "days": days,
        "cycles_with_candidates": result.cycles,
        "would_apply": [_row(at, d) for at, d in result.would_apply],
        "held": [_row(at, d) for at, d in result.held],
        "held_by_guard": result.held_by_guard(),
    }
