"""Why each pending job waits, and what would unblock it, read from the snapshot's free GPUs.

One cause per pending job, the first that holds, in this order (the figures are in
``BlockingCause.figures``; docs/forecasts.md "Blocking causes" has the table):

- ``partial-gang``: the job is a gang holding part of its pods; it waits for GPUs for the rest.
  Unblocked by releasing it (gang-release) or by the GPUs its missing pods need.
- ``quota``: its queue's ``capability_gpus`` would be passed; the capability would have to grow by
  ``grow_by_gpus``.
- ``too-big``: it asks for more GPUs than its pool has at all.
- ``fragmentation``: the pool has enough free GPUs but no node arrangement fits its pods;
  packing them (binpack placement) would cure it.
- ``partial-gangs``: not enough free GPUs, but the GPUs other partial gangs of its pool hold
  would be enough; those gangs must be released.
- ``capacity``: not enough free GPUs; it waits for running jobs to end (``short_gpus`` more).
- ``order``: it would fit now; it waits behind the jobs ahead of it in the queue order (or for
  the scheduler's next pass).

Each cause names the finding that explains it when the caller's findings have one (the
fragmentation finding of its pool, the gang-deadlock / gang-partial-hold finding of the gangs,
a starvation finding of the job itself), as ``(rule, subject)``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from diagnosis.core.rules.facts import SnapshotFacts
from diagnosis.core.snapshot import ClusterSnapshot

PARTIAL_GANG = "partial-gang"
QUOTA = "quota"
TOO_BIG = "too-big"
FRAGMENTATION = "fragmentation"
PARTIAL_GANGS = "partial-gangs"
CAPACITY = "capacity"
ORDER = "order"
CAUSE_KINDS = (PARTIAL_GANG, QUOTA, TOO_BIG, FRAGMENTATION, PARTIAL_GANGS, CAPACITY, ORDER)
MAX_NAMED_GANGS = 5


@dataclass(frozen=True)
class BlockingCause:
    kind: str
    figures: Mapping[str, Any] = field(default_factory=dict)
    finding: tuple[str, str] | None = None  # (rule id, subject)

    def as_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "figures": dict(self.figures),
            "finding": None if self.finding is None else list(self.finding),
        }


def blocking_causes(
    snap: ClusterSnapshot,
    findings: Iterable[tuple[str, str]] = (),
    facts: SnapshotFacts | None = None,
) -> dict[str, BlockingCause]:
    """The cause of every pending job of the snapshot, by job id. ``findings``: the cluster's
    active findings as ``(rule id, subject)``, the ones a cause may link."""
    facts = facts or SnapshotFacts(snap)
    known = _FindingIndex(findings)
    jobs = snap.jobs
    out: dict[str, BlockingCause] = {}

    partial = facts.partial_gang_placement
    for job_id, row in zip(partial.index, partial.itertuples(index=False), strict=True):
        out[str(job_id)] = BlockingCause(
            PARTIAL_GANG,
            {
                "bound_pods": int(row.bound_pods),
                "min_member": int(row.min_member),
                "held_gpus": int(row.held_gpus),
                "missing_gpus": int(row.missing_pods) * int(row.gpus_per_pod),
                "free_gpus": int(row.scope_free),
            },
            known.of_gangs([str(job_id)]),
        )
    held_by_scope = partial.groupby(partial["scope"].to_numpy(), dropna=False)["held_gpus"].sum()
    gangs_by_scope = {
        scope: [str(j) for j in partial.index[partial["scope"].to_numpy() == scope]]
        for scope in held_by_scope.index
    }

    placement = facts.pending_placement
    capacity = facts.pool_capacity
    capability = placement["queue"].map(snap.queues["capability_gpus"]).to_numpy(dtype=float)
    queue_held = placement["queue"].map(facts.queue_held_gpus).fillna(0).to_numpy(dtype=float)
    for position, (job_id, row) in enumerate(
        zip(placement.index, placement.itertuples(index=False), strict=True)
    ):
        job_id = str(job_id)
        request = int(row.request)
        free = int(row.scope_free)
        scope = row.scope
        pool_gpus = (
            int(capacity.get(scope, 0)) if scope is not None else int(snap.nodes["gpus"].sum())
        )
        base = {"request_gpus": request, "free_gpus": free, "pool": _text(scope)}
        if not row.capability_ok:
            cap = float(capability[position])
            held = float(queue_held[position])
            out[job_id] = BlockingCause(
                QUOTA,
                {
                    **base,
                    "queue": _text(row.queue),
                    "capability_gpus": int(cap),
                    "queue_held_gpus": int(held),
                    "grow_by_gpus": int(held + request - cap),
                },
                known.of_job(job_id),
            )
        elif request > pool_gpus:
            out[job_id] = BlockingCause(TOO_BIG, {**base, "pool_gpus": pool_gpus})
        elif row.fragmentation_blocked:
            out[job_id] = BlockingCause(
                FRAGMENTATION,
                {**base, "gpus_per_pod": int(row.gpus_per_pod), "pods": int(row.pods)},
                known.of_fragmentation(scope, snap.cluster) or known.of_job(job_id),
            )
        elif row.placeable:
            ahead = _ahead(placement, position)
            out[job_id] = BlockingCause(ORDER, {**base, "jobs_ahead": ahead}, known.of_job(job_id))
        else:
            held = int(held_by_scope.get(scope, 0)) if len(held_by_scope) else 0
            gangs = gangs_by_scope.get(scope, [])
            if gangs and free + held >= request:
                out[job_id] = BlockingCause(
                    PARTIAL_GANGS,
                    {**base, "held_gpus": held, "gangs": gangs[:MAX_NAMED_GANGS]},
                    known.of_gangs(gangs) or known.of_job(job_id),
                )
            else:
                out[job_id] = BlockingCause(
                    CAPACITY,
                    {**base, "short_gpus": max(request - free, 0)},
                    known.of_job(job_id),
                )
    # a pending job neither above lists (bound pods of a non-gang job): waits for the rest
    for job_id in jobs.index[(jobs["state"] == "pending").to_numpy()]:
        out.setdefault(str(job_id), BlockingCause(CAPACITY, {}, known.of_job(str(job_id))))
    return out


def _ahead(placement: pd.DataFrame, position: int) -> int:
    """Pending jobs of the same scope that the queue order puts first (higher priority, or the
    same priority and submitted earlier)."""
    scope = placement["scope"].to_numpy()
    priority = placement["priority"].to_numpy()
    submitted = placement["submitted"].to_numpy()
    same = scope == scope[position]
    first = (priority > priority[position]) | (
        (priority == priority[position]) & (submitted < submitted[position])
    )
    return int(np.count_nonzero(same & first))


def _text(value: Any) -> str | None:
    return None if value is None or pd.isna(value) else str(value)


class _FindingIndex:
    """The caller's findings, looked up by what a cause may link."""

    def __init__(self, findings: Iterable[tuple[str, str]]) -> None:
        self.by_rule: dict[str, list[str]] = {}
        for rule, subject in findings:
            self.by_rule.setdefault(rule, []).append(subject)

    def _has(self, rule: str, subject: str) -> tuple[str, str] | None:
        return (rule, subject) if subject in self.by_rule.get(rule, ()) else None

    def of_job(self, job_id: str) -> tuple[str, str] | None:
        return self._has("starvation", f"job:{job_id}")

    def of_fragmentation(self, scope: Any, cluster: str) -> tuple[str, str] | None:
        if scope is not None and not pd.isna(scope):
            found = self._has("fragmentation", f"pool:{scope}")
            if found:
                return found
        return self._has("fragmentation", f"cluster:{cluster}")

    def of_gangs(self, gangs: list[str]) -> tuple[str, str] | None:
        wanted = set(gangs)
        for subject in self.by_rule.get("gang-deadlock", ()):
            if wanted & set(subject.removeprefix("jobs:").split("+")):
                return ("gang-deadlock", subject)
        for gang in gangs:
            found = self._has("gang-partial-hold", f"job:{gang}")
            if found:
                return found
        return None
