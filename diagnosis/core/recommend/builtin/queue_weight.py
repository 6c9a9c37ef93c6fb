"""``queue-weight``: raise the weight of a queue whose tenant gets less than its fair share.

A queue is a candidate when a ``starvation`` finding with cause ``share`` names one of its jobs,
or when its fairness ratio (GPUs held / fair GPUs, see ``fair_share.py``) is below
``min_fairness_ratio`` while it has pending demand that has waited at least
``fairness_min_wait_s``. It must be a queue the snapshot lists (a weight to change), and at least
two queues must have demand (a weight only matters against another queue's).

The new weight is ``current × clamp(target / held GPUs, 0.5, 2)`` (2 when it holds nothing),
where the target is its fair GPUs -- for a queue with a ``share`` starvation at least its
``deserved_gpus`` (capped at its demand), the rule's own measure --
rounded to the scheduler's integer domain (Volcano ``Queue.spec.weight`` 1..65535) and at least
one step above the current weight, but never above twice it. Only raises are proposed: a queue
that holds its target already gets nothing. The other queues' weights are unchanged.

Under Volcano's ``capacity`` plugin (``scheduler.queue_share: capacity``) a queue's share is its
``deserved`` GPUs, not its weight, so the draft raises ``deserved`` instead (``change.field:
deserved``): to the target GPUs (rounded up; at least one above the current deserved, at most
the queue's capability), impact simulated as the proportional weight change. Under
``proportion`` (or when the snapshot does not say) it is the weight, as above.

The impact replays the queue order by weighted fair share (usage / weight, as Volcano's
proportion plugin and Kueue's fair sharing do) unless the snapshot reports its scheduler's queue
order, which is then kept (under ``fifo`` or ``priority`` a weight changes nothing, and the impact
says so).
"""

from __future__ import annotations

import math
from typing import Any

from diagnosis.core.recommend.base import (
    QUEUE_WEIGHT,
    Draft,
    FindingRef,
    Generator,
    ImpactPlan,
    RecommendContext,
    whole,
)
from diagnosis.core.recommend.fair_share import FairShares, QueueShare
from diagnosis.core.rules.base import Finding
from diagnosis.core.simulate.policy import QUEUE_ORDERS, SetQueueWeight

MIN_WEIGHT = 1
MAX_WEIGHT = 65535  # Volcano Queue.spec.weight
MAX_FACTOR = 2.0
MIN_FACTOR = 0.5
MAX_REPORTED_QUEUES = 8
MAX_PLAN_JOBS = 50


def raised_weight(current: float, factor: float) -> int | None:
    """The integer weight ``current × clamp(factor, 0.5, 2)`` rounds to, at least one above
    ``current`` and at most ``2 × current`` (within 1..65535); None when no raise is due or
    possible."""
    factor = min(max(factor, MIN_FACTOR), MAX_FACTOR)
    if factor <= 1.0:
        return None
    cap = min(max(MIN_WEIGHT, math.floor(MAX_FACTOR * current)), MAX_WEIGHT)
    proposed = min(max(round(current * factor), math.floor(current) + 1), cap)
    return proposed if proposed > current else None


def generate(context: RecommendContext) -> list[Draft]:
    snapshot = context.snapshot
    settings = context.settings
    jobs = snapshot.jobs
    starved: dict[str, list[Finding]] = {}
    share_starved = [
        f for f in context.findings("starvation") if f.evidence.get("cause") == "share"
    ]
    if share_starved:  # every job's queue at once: one lookup per finding was 5 s at 16k GPUs
        at = jobs.index.get_indexer([f.subject.removeprefix("job:") for f in share_starved])
        queues = context.job_queues[at].tolist()
        for finding, i, queue in zip(share_starved, at.tolist(), queues, strict=True):
            if i >= 0:
                starved.setdefault(str(queue), []).append(finding)

    shares = context.shares
    wanting = shares.with_demand()
    if len(wanting) < 2:
        return []
    unfair = {
        q.queue
        for q in wanting
        if q.pending_gpus > 0
        and q.ratio is not None
        and q.ratio < settings.min_fairness_ratio
        and (q.oldest_pending_wait_s or 0.0) >= settings.fairness_min_wait_s
    }
    drafts = []
    for queue in sorted(set(starved) | unfair):
        entry = shares.queues.get(queue)
        if entry is None or not entry.listed:
            continue
        aim = target_gpus(entry, starved=queue in starved)
        if aim <= 0:
            continue
        factor = aim / entry.held_gpus if entry.held_gpus else MAX_FACTOR
        knob = shares.knob(queue)
        if knob != queue:
            draft = _ancestor_draft(
                context, shares, entry, knob, factor, aim, starved.get(queue, [])
            )
            if draft is not None:
                drafts.append(draft)
            continue
        if snapshot.scheduler.get("queue_share") == "capacity":
            draft = _deserved_draft(context, shares, entry, factor, aim, starved.get(queue, []))
            if draft is not None:
                drafts.append(draft)
            continue
        proposed = raised_weight(entry.weight, factor)
        if proposed is None:
            continue
        drafts.append(_draft(context, shares, entry, proposed, factor, aim, starved.get(queue, [])))
    return drafts


def _ancestor_draft(
    context: RecommendContext,
    shares: FairShares,
    entry: QueueShare,
    knob: str,
    factor: float,
    aim: float,
    starved: list[Finding],
) -> Draft | None:
    """The queue is alone under its parent: its share is decided at ``knob``'s level, so raise
    that weight -- a Kueue Cohort's ``fairSharing.weight`` (``field: cohort-weight``) or a
    parent queue's weight (Volcano, KAI). The impact is simulated as the queue's own raise (the
    simulator has no queue hierarchy)."""
    cohort = knob in shares.group_weight or knob not in shares.queues
    current = shares.group_weight.get(knob, 1.0) if cohort else shares.queues[knob].weight
    proposed = raised_weight(current, factor)
    own = raised_weight(entry.weight, factor) or max(1, math.floor(entry.weight) + 1)
    if proposed is None:
        return None
    draft = _draft(context, shares, entry, own, factor, aim, starved)
    why = draft.summary.split(": ", 1)[1]
    what = f"cohort {knob}'s fair-sharing weight" if cohort else f"parent queue {knob}'s weight"
    change: dict[str, Any] = {"from": whole(current), "to": proposed}
    if cohort:
        change = {"field": "cohort-weight", **change}
    return Draft(
        kind=draft.kind,
        target=f"queue:{knob}",
        change=change,
        findings=draft.findings,
        summary=(
            f"Raise {what} from {whole(current)} to {proposed}: queue {entry.queue} is the only "
            f"queue wanting GPUs under it, so its share is set at {knob}'s level; {why}"
        ),
        plan=draft.plan,
        basis={**draft.basis, "knob": knob, "knob_is_cohort": cohort, "queue": entry.queue},
    )


def raised_deserved(current: float, aim: float, capability: float | None) -> int | None:
    """The deserved GPUs to set: ``ceil(aim)``, at least one above ``current``, at most the
    capability (Volcano refuses deserved > capability); None when no raise is due or possible."""
    proposed = max(math.ceil(aim - 1e-9), math.floor(current) + 1)
    if capability is not None:
        proposed = min(proposed, math.floor(capability))
    return proposed if proposed > current and aim > current else None


def _deserved_draft(
    context: RecommendContext,
    shares: FairShares,
    entry: QueueShare,
    factor: float,
    aim: float,
    starved: list[Finding],
) -> Draft | None:
    """The ``capacity`` plugin's knob: the queue's deserved GPUs."""
    queues = context.snapshot.queues
    capability = (
        float(queues.loc[entry.queue, "capability_gpus"]) if entry.queue in queues.index else None
    )
    if capability is not None and math.isnan(capability):
        capability = None
    current = entry.deserved_gpus or 0.0
    proposed = raised_deserved(current, aim, capability)
    if proposed is None:
        return None
    weight = max(entry.weight, 1.0) * proposed / max(current, 1.0)
    draft = _draft(context, shares, entry, max(1, round(weight)), factor, aim, starved)
    why = draft.summary.split(": ", 1)[1]
    return Draft(
        kind=draft.kind,
        target=draft.target,
        change={"field": "deserved", "from": whole(current), "to": proposed},
        findings=draft.findings,
        summary=(
            f"Raise queue {entry.queue}'s deserved GPUs from {whole(current)} to {proposed} "
            f"(Volcano's capacity plugin shares by deserved; a weight changes nothing under it): "
            f"{why}"
        ),
        plan=draft.plan,
        basis={
            **draft.basis,
            "queue_share": "capacity",
            "impact_as_weight": round(weight, 4),
            "capability_gpus": capability,
        },
    )


def target_gpus(entry: QueueShare, *, starved: bool) -> float:
    """The GPUs the queue should hold: its fair GPUs; for a queue with a ``share`` starvation at
    least its ``deserved_gpus`` (capped at its demand), the rule's own measure of its due."""
    if starved and entry.deserved_gpus:
        return max(entry.fair_gpus, min(entry.deserved_gpus, float(entry.demand_gpus)))
    return entry.fair_gpus


def _draft(
    context: RecommendContext,
    shares: FairShares,
    entry: QueueShare,
    proposed: int,
    factor: float,
    aim: float,
    starved: list[Finding],
) -> Draft:
    snapshot = context.snapshot
    queue = entry.queue
    others = sorted(
        (q for q in shares.with_demand() if q.queue != queue),
        key=lambda q: (-q.held_gpus, q.queue),
    )[: MAX_REPORTED_QUEUES - 1]
    reported = (queue, *(q.queue for q in others))
    if starved:
        plan_jobs = [f.subject.removeprefix("job:") for f in starved]
        label = "starved jobs"
    else:
        pending = snapshot.jobs[
            (snapshot.jobs["state"] == "pending").to_numpy() & (context.job_queues == queue)
        ]
        plan_jobs = list(pending.sort_values("submitted", kind="stable").index)
        label = f"pending jobs of queue {queue}"
    order = snapshot.scheduler.get("queue_order")
    reported_order = order if order in QUEUE_ORDERS else None
    note = (
        "queues ordered by weighted fair share (usage / weight), as the snapshot does not report "
        "its scheduler's queue order"
        if reported_order is None
        else f"the snapshot's queue order ({reported_order}) is kept"
        + ("" if reported_order == "fair-share" else "; under it a weight changes nothing")
    )
    ratio = entry.ratio
    due = f"a fair share of {entry.fair_gpus:.0f}"
    if aim > entry.fair_gpus:
        due += f" and {aim:.0f} deserved"
    why = (
        f"it holds {entry.held_gpus} of {shares.capacity_gpus} GPUs against {due}"
        + ("" if ratio is None else f" (ratio {ratio:.2f})")
        + f", with {entry.pending_gpus} GPUs pending"
    )
    if starved:
        why += f"; {len(starved)} of its jobs starve for share"
    return Draft(
        kind=QUEUE_WEIGHT,
        target=f"queue:{queue}",
        change={"from": whole(entry.weight), "to": proposed},
        findings=tuple(FindingRef.of(f) for f in starved),
        summary=f"Raise queue {queue}'s weight from {whole(entry.weight)} to {proposed}: {why}.",
        plan=ImpactPlan(
            changes=(SetQueueWeight(queue, float(proposed)),),
            jobs=tuple(plan_jobs[:MAX_PLAN_JOBS]),
            queues=reported,
            fair_share={q: shares.target_share(q) for q in reported},
            tradeoff_queues=frozenset(
                q.queue for q in others if q.ratio is not None and q.ratio > 1.0
            ),
            queue_order=None if reported_order is not None else "fair-share",
            jobs_label=label,
            note=note,
        ),
        basis={
            "fair_share_basis": shares.basis,
            "capacity_gpus": shares.capacity_gpus,
            "held_gpus": entry.held_gpus,
            "pending_gpus": entry.pending_gpus,
            "demand_gpus": entry.demand_gpus,
            "fair_gpus": round(entry.fair_gpus, 2),
            "target_gpus": round(aim, 2),
            "fairness_ratio": None if ratio is None else round(ratio, 4),
            "factor": round(min(max(factor, MIN_FACTOR), MAX_FACTOR), 4),
            "other_weights_unchanged": {q.queue: whole(q.weight) for q in others},
        },
    )


GENERATOR = Generator(
    id="queue-weight",
    kind=QUEUE_WEIGHT,
    title="Raise an under-served queue's weight",
    rules=("starvation",),
    doc=(
        "For a queue with a `starvation` (cause `share`) job, or a fairness ratio (GPUs held / "
        "demand-aware fair GPUs) below `min_fairness_ratio` with pending demand: a new weight "
        "`current × clamp(fair / held, 0.5, 2)` in the integer domain 1..65535 (Volcano "
        "`Queue.spec.weight`; Kueue `ClusterQueue.spec.fairSharing.weight`; Slurm account "
        "`fairshare`), other queues unchanged."
    ),
    generate=generate,
)
