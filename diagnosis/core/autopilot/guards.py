"""One cycle of the autopilot: for each open recommendation a policy matches, apply it, say what
a dry-run policy would have applied, or hold it back with the guard that did and why.

The guards, in the order they are checked (the first that holds a candidate names it):

========================  =====================================================================
``kill-switch``           an admin stopped every policy
``stale-data``            the cluster's latest cycle is older than two cycle periods, or failed
``degraded-data``         the cluster's status is degraded (a rule failed, metrics incomplete, the
                          size guard holds a shrunken cluster back)
``quiet-window``          the policy's quiet window covers the cycle's time
``harms``                 the impact estimate predicts harm
``impact-pending``        the impact estimate has not landed yet
``budget-pool-hour``      the pool already had ``per_pool_per_hour`` actions in the last hour
``budget-hour``           the policy's scope already had ``per_hour`` actions in the last hour
``budget-pool-share``     a drain would put more than ``pool_out_share`` of the pool's GPUs out
========================  =====================================================================

Budgets count what was done in the hour before the cycle (``Done``: the policy's own actions,
would-applies included for a dry-run policy, and every action of its kind another policy
enforced) and what this cycle has already decided, so fifty Xids at once drain at most
``per_pool_per_hour`` nodes of a pool.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from diagnosis.core.autopilot.policy import (
    DRAIN_NODE,
    Candidate,
    PolicySpec,
    first_match,
)

APPLY = "apply"
WOULD_APPLY = "would-apply"
HELD = "held"

KILL_SWITCH = "kill-switch"
STALE = "stale-data"
DEGRADED = "degraded-data"
QUIET = "quiet-window"
HARMS = "harms"
PENDING = "impact-pending"
POOL_HOUR = "budget-pool-hour"
HOUR = "budget-hour"
POOL_SHARE = "budget-pool-share"
GUARDS = (KILL_SWITCH, STALE, DEGRADED, QUIET, HARMS, PENDING, POOL_HOUR, HOUR, POOL_SHARE)

BUDGET_WINDOW = timedelta(hours=1)


@dataclass(frozen=True)
class Health:
    """Whether a cluster's data may be acted on: ``stale`` / ``degraded`` say why not (empty:
    fine)."""

    stale: str = ""
    degraded: str = ""


@dataclass(frozen=True)
class PoolCapacity:
    """A pool's GPUs and how many of them are out of scheduling now (node not ready, GPU
    unhealthy)."""

    gpus: int
    out: int = 0


@dataclass(frozen=True)
class Done:
    """An action that counts against budgets: applied (``enforced``) or, for a dry-run policy,
    one it would have applied."""

    policy: int
    kind: str
    cluster: str
    pool: str | None
    at: datetime
    enforced: bool
    gpus_out: int = 0


@dataclass(frozen=True)
class Decision:
    policy: int
    recommendation: int
    cluster: str
    kind: str
    target: str
    pool: str | None
    outcome: str  # APPLY, WOULD_APPLY or HELD
    guard: str = ""
    reason: str = ""
    gpus_out: int = 0

    @property
    def acts(self) -> bool:
        return self.outcome in (APPLY, WOULD_APPLY)


def counts_against(spec: PolicySpec, done: Done) -> bool:
    """Whether an earlier action uses ``spec``'s budget: its own, or one of its kind that another
    policy really made."""
    return done.policy == spec.id or (done.enforced and done.kind == spec.kind)


def _held(spec: PolicySpec, candidate: Candidate, guard: str, reason: str) -> Decision:
    return Decision(
        spec.id,
        candidate.recommendation,
        candidate.cluster,
        candidate.kind,
        candidate.target,
        candidate.pool,
        HELD,
        guard,
        reason,
        candidate.gpus_out,
    )


def _guard(
    spec: PolicySpec,
    candidate: Candidate,
    *,
    as_of: datetime,
    health: Health,
    stopped: bool,
    recent: Sequence[Done],
    pool: PoolCapacity | None,
) -> tuple[str, str]:
    """The first guard that holds ``candidate`` back and why; ``("", "")``: none does."""
    if stopped:
        return KILL_SWITCH, "an admin stopped every policy (the kill switch)"
    if health.stale:
        return STALE, health.stale
    if health.degraded:
        return DEGRADED, health.degraded
    if spec.quiet is not None and spec.quiet.contains(as_of.hour * 60 + as_of.minute):
        return QUIET, f"inside the policy's quiet window ({spec.quiet.label()})"
    if candidate.harm or candidate.verdict == "harms":
        return HARMS, "the impact estimate predicts harm: " + "; ".join(candidate.harm or ("?",))
    if candidate.verdict == "impact pending":
        return PENDING, "the impact estimate has not landed yet"
    mine = [d for d in recent if counts_against(spec, d)]
    in_pool = [d for d in mine if d.cluster == candidate.cluster and d.pool == candidate.pool]
    budgets = spec.budgets
    if len(in_pool) >= budgets.per_pool_per_hour:
        return POOL_HOUR, (
            f"pool {candidate.pool} had {len(in_pool)} of at most "
            f"{budgets.per_pool_per_hour} {spec.kind} action(s) in the last hour"
        )
    if len(mine) >= budgets.per_hour:
        return HOUR, (
            f"{len(mine)} of at most {budgets.per_hour} {spec.kind} action(s) in the last hour"
        )
    if candidate.kind == DRAIN_NODE:
        if pool is None or pool.gpus <= 0:
            return POOL_SHARE, f"the size of pool {candidate.pool} is unknown"
        out = pool.out + sum(d.gpus_out for d in in_pool if d.at == as_of)
        after = out + candidate.gpus_out
        if after > budgets.pool_out_share * pool.gpus:
            return POOL_SHARE, (
                f"{after} of pool {candidate.pool}'s {pool.gpus} GPUs would be out "
                f"({100 * after / pool.gpus:.1f}%, at most {100 * budgets.pool_out_share:.1f}%)"
            )
    return "", ""


def decide(
    policies: Sequence[PolicySpec],
    candidates: Sequence[Candidate],
    *,
    as_of: datetime,
    pools: Mapping[tuple[str, str | None], PoolCapacity],
    done: Sequence[Done] = (),
    health: Mapping[str, Health] | None = None,
    stopped: bool = False,
) -> list[Decision]:
    """The decisions of one cycle at ``as_of``: each candidate (oldest recommendation first)
    that a policy matches gets one; candidates no policy matches get none. ``done`` is what was
    applied (or would have been) before; ``pools`` maps ``(cluster, pool)`` to its capacity."""
    health = health or {}
    recent = [d for d in done if as_of - BUDGET_WINDOW < d.at <= as_of]
    decisions: list[Decision] = []
    for candidate in sorted(candidates, key=lambda c: c.recommendation):
        spec = first_match(policies, candidate)
        if spec is None:
            continue
        guard, reason = _guard(
            spec,
            candidate,
            as_of=as_of,
            health=health.get(candidate.cluster, Health()),
            stopped=stopped,
            recent=recent,
            pool=pools.get((candidate.cluster, candidate.pool)),
        )
        if guard:
            decisions.append(_held(spec, candidate, guard, reason))
            continue
        outcome = APPLY if spec.enforcing else WOULD_APPLY
        decisions.append(
            Decision(
                spec.id,
                candidate.recommendation,
                candidate.cluster,
                candidate.kind,
                candidate.target,
                candidate.pool,
                outcome,
                reason="matches the policy; within its budgets"
                + ("" if spec.enforcing else " (dry run: nothing applied)"),
                gpus_out=candidate.gpus_out,
            )
        )
        recent.append(
            Done(
                spec.id,
                candidate.kind,
                candidate.cluster,
                candidate.pool,
                as_of,
                enforced=spec.enforcing,
                gpus_out=candidate.gpus_out,
            )
        )
    return decisions
