"""The "replay last week" preview: what one policy would have done over stored cycles, before
anyone turns it on. The same :func:`~diagnosis.core.autopilot.guards.decide` as the live step,
cycle by cycle in time order, the policy alone and in dry run: a recommendation it would have
applied is not a candidate again; one held back is judged again at the next cycle (as the live
autopilot does, while the recommendation stays open), and the preview keeps its last reason.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime

from diagnosis.core.autopilot.guards import Decision, Done, Health, PoolCapacity, decide
from diagnosis.core.autopilot.policy import DRY_RUN, Candidate, PolicySpec


@dataclass(frozen=True)
class ReplayCycle:
    """One stored cycle as the replay reads it: its time, the open recommendations then, the
    pools' capacity and the cluster's health."""

    as_of: datetime
    candidates: tuple[Candidate, ...]
    pools: Mapping[tuple[str, str | None], PoolCapacity] = field(default_factory=dict)
    health: Mapping[str, Health] = field(default_factory=dict)


@dataclass(frozen=True)
class ReplayResult:
    cycles: int
    would_apply: tuple[tuple[datetime, Decision], ...]
    held: tuple[tuple[datetime, Decision], ...]  # the last reason of each never applied

    def held_by_guard(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for _, decision in self.held:
            counts[decision.guard] = counts.get(decision.guard, 0) + 1
        return counts


def replay(spec: PolicySpec, cycles: Sequence[ReplayCycle]) -> ReplayResult:
    """What ``spec`` would have done over ``cycles`` (any order; replayed by ``as_of``)."""
    alone = replace(spec, mode=DRY_RUN)
    done: list[Done] = []
    acted: set[int] = set()
    would: list[tuple[datetime, Decision]] = []
    held: dict[int, tuple[datetime, Decision]] = {}
    ordered = sorted(cycles, key=lambda c: c.as_of)
    for cycle in ordered:
        open_now = [c for c in cycle.candidates if c.recommendation not in acted]
        for decision in decide(
            [alone], open_now, as_of=cycle.as_of, pools=cycle.pools, done=done, health=cycle.health
        ):
            if decision.acts:
                acted.add(decision.recommendation)
                held.pop(decision.recommendation, None)
                would.append((cycle.as_of, decision))
                done.append(
                    Done(
                        spec.id,
                        decision.kind,
                        decision.cluster,
                        decision.pool,
                        cycle.as_of,
                        enforced=False,
                        gpus_out=decision.gpus_out,
                    )
                )
            else:
                held[decision.recommendation] = (cycle.as_of, decision)
    return ReplayResult(len(ordered), tuple(would), tuple(sorted(held.values(), key=_by_time)))


def _by_time(item: tuple[datetime, Decision]) -> tuple[datetime, int]:
    return item[0], item[1].recommendation
