"""Simulated impact: replay the snapshot under the current and the proposed setting and judge the
difference, metric by metric, against the spread between seeds.

For each seed the simulator is rebuilt from the snapshot (its jobs, bound as listed; the remaining
work of running jobs and the work of pending ones estimated) and run ``horizon_s`` forward with
arrivals resampled from the snapshot's recent submissions
(:func:`diagnosis.core.simulate.replay.replay`). Arrivals depend only on the seed, so the current
and the proposed run of a seed see the same workload and their difference is paired. The current
runs are shared by every draft with the same queue order.

Per metric, with ``g_i`` the improvement of seed i (``proposed - current`` for a metric where
higher is better, ``current - proposed`` where lower is better, the reduction of the distance to
the fair share for a queue's share), the change is **measurable** when the mean improvement
exceeds both the metric's floor (a change too small to matter: half a utilisation point, half a
GPU or 5 % of fragmentation, 5 minutes or 5 % of a wait) and the standard deviation of the
``g_i`` across seeds (the seeds' noise). The verdict is then ``improves`` or ``harms``; otherwise
``no measurable effect``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np

from diagnosis.core.recommend.base import HARMS, IMPROVES, NO_EFFECT, ImpactPlan, RecommendSettings
from diagnosis.core.simulate.policy import (
    Change,
    DrainNode,
    Policy,
    ResumeNode,
    SetPlacement,
    SetQueueWeight,
)
from diagnosis.core.simulate.replay import DEFAULT_LOOKBACK_S, policy_of, replay
from diagnosis.core.simulate.simulator import Simulator
from diagnosis.core.snapshot import ClusterSnapshot

MAX_LISTED = 3  # harms / improvements named in the headline


@dataclass(frozen=True)
class MetricSpec:
    name: str
    label: str
    unit: str  # "fraction", "s", "GPUs"
    better: str  # "higher", "lower" or "toward" (the target)
    floor: float
    relative: float = 0.0

    def noise_floor(self, current_mean: float) -> float:
        return max(self.floor, self.relative * abs(current_mean))


ALLOCATION_UTIL = MetricSpec(
    "allocation_util", "allocation utilization", "fraction", "higher", 0.005
)
FRAGMENTATION = MetricSpec(
    "fragmentation_gpus", "fragmented free GPUs (mean)", "GPUs", "lower", 0.5, 0.05
)
BLOCKED_WAIT = MetricSpec("blocked_wait_s", "mean wait", "s", "lower", 300.0, 0.05)
BLOCKED_STARTED = MetricSpec("blocked_started", "share started", "fraction", "higher", 0.01)
QUEUE_WAIT_P95 = MetricSpec("queue_wait_p95_s", "wait p95", "s", "lower", 300.0, 0.05)
QUEUE_SHARE = MetricSpec("queue_share", "share of allocated GPU-hours", "fraction", "toward", 0.005)


@dataclass(frozen=True)
class SeedOutcome:
    """What one replay amounts to, for the impact metrics.

    ``job_waits``: per job of the snapshot that was pending at its ``as_of``, ``(wait_s,
    started)`` (a job still pending at the end counts with its wait so far). ``queue_wait_p95_s``:
    per queue, the p95 wait of its jobs pending at the start or arriving during the replay.
    ``queue_share``: per queue, its fraction of the GPU-seconds allocated during the replay.
    """

    seed: int
    allocation_util: float
    fragmentation_gpus: float
    job_waits: Mapping[str, tuple[float, bool]]
    queue_wait_p95_s: Mapping[str, float]
    queue_share: Mapping[str, float]


# -- running the replays --------------------------------------------------------------------------


def replay_policy(snapshot: ClusterSnapshot, queue_order: str | None) -> Policy:
    """The snapshot's own policy, with ``queue_order`` (weighing queues by weight) if given."""
    policy = policy_of(snapshot)
    if queue_order is None:
        return policy
    return replace(policy, queue_order=queue_order, fair_share_basis="weight")


def run_outcomes(
    snapshot: ClusterSnapshot,
    policy: Policy,
    changes: Sequence[Any],
    settings: RecommendSettings,
) -> list[SeedOutcome]:
    """One :class:`SeedOutcome` per seed of ``settings`` for ``policy`` with ``changes``."""
    pending = tuple(snapshot.jobs.index[snapshot.jobs["state"].to_numpy() == "pending"])
    measured: list[tuple[dict, dict, dict]] = []
    summaries = replay(
        snapshot,
        policy,
        settings.horizon_s,
        settings.seeds,
        changes=changes,
        observe=lambda sim: measured.append(measure(sim, pending)),
    )
    return [
        SeedOutcome(
            seed=summary.seed,
            allocation_util=summary.allocation_util,
            fragmentation_gpus=summary.fragmentation_mean_gpus,
            job_waits=waits,
            queue_wait_p95_s=p95,
            queue_share=share,
        )
        for summary, (waits, p95, share) in zip(summaries, measured, strict=True)
    ]


def measure(sim: Simulator, job_ids: Sequence[str]) -> tuple[dict, dict, dict]:
    """Per-job waits of ``job_ids``, per-queue wait p95 and share of allocated GPU-seconds."""
    now = sim.now
    waits: dict[str, tuple[float, bool]] = {}
    for job_id in job_ids:
        job = sim.job_by_id.get(job_id)
        if job is None:
            continue
        started = job.first_started is not None
        waits[job_id] = ((job.first_started if started else now) - job.submitted, started)

    by_queue: dict[str, list[float]] = {}
    for job in sim.jobs:
        if job.state == "waiting" or (job.first_started is not None and job.first_started < 0):
            continue  # not arrived yet, or already running when the snapshot was taken
        end = job.first_started if job.first_started is not None else now
        by_queue.setdefault(job.spec.queue_name, []).append(end - job.submitted)
    p95 = {q: float(np.quantile(w, 0.95)) for q, w in by_queue.items()}

    seconds: dict[str, float] = {}
    records = list(sim.closed_allocations)
    for active in sim.active_allocations.values():
        records.extend(active)
    for record in records:
        held = min(record.end, now) - max(record.start, 0.0)
        if held > 0:
            queue = sim.jobs[record.job].spec.queue_name
            seconds[queue] = seconds.get(queue, 0.0) + held * len(record.gids)
    total = sum(seconds.values())
    share = {q: s / total for q, s in seconds.items()} if total > 0 else {}
    return waits, p95, share


# -- judging --------------------------------------------------------------------------------------


def stats(values: Sequence[float], digits: int) -> dict[str, float]:
    array = np.asarray(values, dtype=float)
    return {
        "mean": round(float(array.mean()), digits),
        "min": round(float(array.min()), digits),
        "max": round(float(array.max()), digits),
        "stdev": round(float(array.std(ddof=1)) if len(array) > 1 else 0.0, digits),
    }


def _digits(spec: MetricSpec) -> int:
    return {"fraction": 4, "s": 1, "GPUs": 2}.get(spec.unit, 4)


def compare(
    spec: MetricSpec,
    current: Sequence[float],
    proposed: Sequence[float],
    subject: str,
    target: float | None = None,
) -> dict[str, Any]:
    """One metric row: current and proposed per-seed values (paired by seed), their delta with
    its spread, and the verdict (see the module doc)."""
    c = np.asarray(current, dtype=float)
    p = np.asarray(proposed, dtype=float)
    if spec.better == "toward":
        if target is None:
            raise ValueError(f"{spec.name}: a 'toward' metric needs a target")
        gain = np.abs(c - target) - np.abs(p - target)
    elif spec.better == "higher":
        gain = p - c
    else:
        gain = c - p
    mean_gain = float(gain.mean())
    noise = float(gain.std(ddof=1)) if len(gain) > 1 else 0.0
    floor = spec.noise_floor(float(c.mean()))
    measurable = abs(mean_gain) > floor and abs(mean_gain) > noise
    verdict = NO_EFFECT if not measurable else IMPROVES if mean_gain > 0 else HARMS
    digits = _digits(spec)
    row: dict[str, Any] = {
        "metric": spec.name,
        "label": spec.label,
        "subject": subject,
        "unit": spec.unit,
        "better": spec.better,
        "current": stats(c, digits),
        "proposed": stats(p, digits),
        "delta": stats(p - c, digits),
        "noise": round(noise, digits),
        "floor": round(floor, digits),
        "verdict": verdict,
    }
    if target is not None:
        row["target"] = round(float(target), digits)
    return row


def metric_rows(
    plan: ImpactPlan, current: Sequence[SeedOutcome], proposed: Sequence[SeedOutcome]
) -> list[dict[str, Any]]:
    """The rows for ``plan``: cluster utilisation and fragmentation, the plan's jobs' wait and
    how many of them started, and each plan queue's wait p95 and share (rows whose value is
    missing in some seed are left out: nothing to compare)."""

    def column(outcomes: Sequence[SeedOutcome], pick) -> list[float] | None:
        values = [pick(o) for o in outcomes]
        return None if any(v is None or not math.isfinite(v) for v in values) else values

    rows = [
        compare(
            ALLOCATION_UTIL,
            [o.allocation_util for o in current],
            [o.allocation_util for o in proposed],
            "cluster",
        ),
        compare(
            FRAGMENTATION,
            [o.fragmentation_gpus for o in current],
            [o.fragmentation_gpus for o in proposed],
            "cluster",
        ),
    ]
    if plan.jobs:
        subject = _jobs_subject(plan)
        for spec, pick in (
            (BLOCKED_WAIT, lambda o: _mean_wait(o, plan.jobs)),
            (BLOCKED_STARTED, lambda o: _started_share(o, plan.jobs)),
        ):
            cur, pro = column(current, pick), column(proposed, pick)
            if cur is not None and pro is not None:
                rows.append(compare(spec, cur, pro, subject))
    for queue in plan.queues:
        cur = column(current, lambda o, q=queue: o.queue_wait_p95_s.get(q))
        pro = column(proposed, lambda o, q=queue: o.queue_wait_p95_s.get(q))
        if cur is not None and pro is not None:
            rows.append(compare(QUEUE_WAIT_P95, cur, pro, f"queue:{queue}"))
        target = plan.fair_share.get(queue)
        if target is not None:
            cur = [o.queue_share.get(queue, 0.0) for o in current]
            pro = [o.queue_share.get(queue, 0.0) for o in proposed]
            rows.append(compare(QUEUE_SHARE, cur, pro, f"queue:{queue}", target))
    return rows


def _jobs_subject(plan: ImpactPlan) -> str:
    if len(plan.jobs) == 1:
        return f"job:{plan.jobs[0]}"
    return f"{plan.jobs_label} ({len(plan.jobs)})"


def _mean_wait(outcome: SeedOutcome, jobs: Sequence[str]) -> float | None:
    waits = [outcome.job_waits[j][0] for j in jobs if j in outcome.job_waits]
    return float(np.mean(waits)) if waits else None


def _started_share(outcome: SeedOutcome, jobs: Sequence[str]) -> float | None:
    known = [outcome.job_waits[j][1] for j in jobs if j in outcome.job_waits]
    return sum(known) / len(known) if known else None


@dataclass(frozen=True)
class Assessment:
    verdict: str
    rows: tuple[dict[str, Any], ...]
    harm: tuple[str, ...]
    tradeoffs: tuple[str, ...]
    headline: str


def assess(
    plan: ImpactPlan,
    current: Sequence[SeedOutcome],
    proposed: Sequence[SeedOutcome],
    horizon_s: float,
) -> Assessment:
    """Rows, harms, trade-offs and the overall verdict of ``plan``'s replays.

    A row that harms is a harm, except a worse wait of a queue in ``plan.tradeoff_queues`` (above
    its fair share: its longer wait is the price of the others' fairer share), which is listed
    as a trade-off. The verdict is ``harms`` when anything harms, else ``improves`` when any
    row improves, else ``no measurable effect``.
    """
    rows = metric_rows(plan, current, proposed)
    harm: list[str] = []
    tradeoffs: list[str] = []
    for row in rows:
        if row["verdict"] != HARMS:
            continue
        text = describe(row)
        queue = row["subject"].removeprefix("queue:")
        if row["metric"] == QUEUE_WAIT_P95.name and queue in plan.tradeoff_queues:
            tradeoffs.append(text + " (above its fair share)")
        else:
            harm.append(text)
    better = [describe(r) for r in rows if r["verdict"] == IMPROVES]
    if harm:
        verdict = HARMS
        headline = "predicted harm: " + "; ".join(harm[:MAX_LISTED])
    elif better:
        verdict = IMPROVES
        headline = "predicted: " + "; ".join(better[:MAX_LISTED])
    else:
        verdict = NO_EFFECT
        headline = (
            f"no measurable effect predicted over {format_value(horizon_s, 's')} "
            f"({len(current)} seed(s))"
        )
    return Assessment(verdict, tuple(rows), tuple(harm), tuple(tradeoffs), headline)


Outcomes = Callable[[Policy, Sequence[Change]], list[SeedOutcome]]


def simulated_impact(
    snapshot: ClusterSnapshot,
    plan: ImpactPlan,
    settings: RecommendSettings,
    baselines: dict[str | None, list[SeedOutcome]],
) -> tuple[dict[str, Any], Assessment]:
    """The impact of ``plan`` as JSON, and its assessment. ``baselines`` caches the current
    runs by queue order across calls."""

    def outcomes(policy: Policy, changes: Sequence[Change]) -> list[SeedOutcome]:
        if changes:
            return run_outcomes(snapshot, policy, changes, settings)
        if plan.queue_order not in baselines:
            baselines[plan.queue_order] = run_outcomes(snapshot, policy, (), settings)
        return baselines[plan.queue_order]

    return estimate_impact(snapshot, plan, settings, outcomes)


def estimate_impact(
    snapshot: ClusterSnapshot, plan: ImpactPlan, settings: RecommendSettings, outcomes: Outcomes
) -> tuple[dict[str, Any], Assessment]:
    """The impact of ``plan`` as JSON, and its assessment, with the replays' outcomes from
    ``outcomes(policy, changes)`` (the current setting is ``changes=()``), which may cache
    them."""
    policy = replay_policy(snapshot, plan.queue_order)
    current = outcomes(policy, ())
    proposed = outcomes(policy, plan.changes)
    assessment = assess(plan, current, proposed, settings.horizon_s)
    impact = {
        "method": "simulated",
        "verdict": assessment.verdict,
        "headline": assessment.headline,
        "horizon_s": settings.horizon_s,
        "seeds": list(settings.seeds),
        "arrivals": "resampled from the snapshot's submissions in the last "
        f"{format_value(DEFAULT_LOOKBACK_S, 's')}",
        "queue_order": policy.queue_order,
        "metrics": list(assessment.rows),
        "harm": list(assessment.harm),
        "tradeoffs": list(assessment.tradeoffs),
        "note": plan.note,
    }
    return impact, assessment


# -- estimates apart from the cycle (issue #17) ---------------------------------------------------
#
# The cycle stores a draft's impact as *pending*, with its plan as JSON and the GPU-hours at
# stake; an impact task replays it later (diagnosis/actions/workflow/impact.py) and stores what
# :func:`landed_impact` makes of the estimate. Replays of large clusters use a reduced model.

PENDING_METHOD = "pending"
PENDING = "impact pending"
REDUCED_FROM_GPUS = 8192
REDUCED_SEEDS = 1
REDUCED_HORIZON_S = 3600.0
CHANGE_TYPES: dict[str, type] = {
    cls.__name__: cls for cls in (SetPlacement, SetQueueWeight, DrainNode, ResumeNode)
}


def change_as_dict(change: Change) -> dict[str, Any]:
    return {"type": type(change).__name__, **asdict(change)}


def change_from_dict(data: Mapping[str, Any]) -> Change:
    fields = {k: v for k, v in data.items() if k != "type"}
    return CHANGE_TYPES[str(data["type"])](**fields)


def plan_as_dict(plan: ImpactPlan) -> dict[str, Any]:
    """``plan`` as plain JSON (:func:`plan_from_dict` reads it back)."""
    return {
        "changes": [change_as_dict(c) for c in plan.changes],
        "jobs": list(plan.jobs),
        "queues": list(plan.queues),
        "fair_share": {q: float(v) for q, v in plan.fair_share.items()},
        "tradeoff_queues": sorted(plan.tradeoff_queues),
        "queue_order": plan.queue_order,
        "jobs_label": plan.jobs_label,
        "note": plan.note,
    }


def plan_from_dict(data: Mapping[str, Any]) -> ImpactPlan:
    return ImpactPlan(
        changes=tuple(change_from_dict(c) for c in data.get("changes") or ()),
        jobs=tuple(data.get("jobs") or ()),
        queues=tuple(data.get("queues") or ()),
        fair_share=dict(data.get("fair_share") or {}),
        tradeoff_queues=frozenset(data.get("tradeoff_queues") or ()),
        queue_order=data.get("queue_order"),
        jobs_label=str(data.get("jobs_label") or "blocked jobs"),
        note=str(data.get("note") or ""),
    )


def outcome_as_dict(outcome: SeedOutcome) -> dict[str, Any]:
    return {
        "seed": outcome.seed,
        "allocation_util": outcome.allocation_util,
        "fragmentation_gpus": outcome.fragmentation_gpus,
        "job_waits": {j: [w, s] for j, (w, s) in outcome.job_waits.items()},
        "queue_wait_p95_s": dict(outcome.queue_wait_p95_s),
        "queue_share": dict(outcome.queue_share),
    }


def outcome_from_dict(data: Mapping[str, Any]) -> SeedOutcome:
    return SeedOutcome(
        seed=int(data["seed"]),
        allocation_util=float(data["allocation_util"]),
        fragmentation_gpus=float(data["fragmentation_gpus"]),
        job_waits={j: (float(w), bool(s)) for j, (w, s) in data["job_waits"].items()},
        queue_wait_p95_s={q: float(v) for q, v in data["queue_wait_p95_s"].items()},
        queue_share={q: float(v) for q, v in data["queue_share"].items()},
    )


def outcomes_key(
    queue_order: str | None, changes: Sequence[Change], settings: RecommendSettings
) -> str:
    """What a replay's outcomes depend on besides the snapshot: the queue order, the changes,
    the seeds and the horizon (with the snapshot's digest, the cache key of its outcomes)."""
    return json.dumps(
        {
            "queue_order": queue_order,
            "changes": [change_as_dict(c) for c in changes],
            "seeds": list(settings.seeds),
            "horizon_s": settings.horizon_s,
        },
        sort_keys=True,
    )


def gpu_hours_at_stake(snapshot: ClusterSnapshot, plan: ImpactPlan, horizon_s: float) -> float:
    """What the estimate is prioritised by: the GPUs of the jobs the change is meant to help
    (the plan's jobs; without any, its queues' pending jobs) × the replay horizon, in hours."""
    jobs = snapshot.jobs
    helped = jobs.loc[[j for j in plan.jobs if j in jobs.index]]
    if helped.empty and plan.queues:
        queue = jobs["queue"].where(jobs["queue"].notna(), jobs["tenant"])
        helped = jobs[(jobs["state"] == "pending") & queue.isin(list(plan.queues)).to_numpy()]
    gpus = float((helped["pods"] * helped["gpus_per_pod"]).sum()) if len(helped) else 0.0
    return gpus * horizon_s / 3600.0


def pending_impact(
    snapshot: ClusterSnapshot, plan: ImpactPlan, settings: RecommendSettings
) -> dict[str, Any]:
    """The impact a draft is stored with until its estimate lands: its plan and its stake."""
    return {
        "method": PENDING_METHOD,
        "verdict": PENDING,
        "headline": "impact pending: its replay runs apart from the cycle and lands here",
        "plan": plan_as_dict(plan),
        "stake_gpu_h": round(gpu_hours_at_stake(snapshot, plan, settings.horizon_s), 1),
    }


def impact_settings_for(
    gpus: int, settings: RecommendSettings, *, reduced_from_gpus: int = REDUCED_FROM_GPUS
) -> tuple[RecommendSettings, str]:
    """The replay settings for a cluster of ``gpus`` GPUs and the model's name: ``full`` (the
    settings as given), or from ``reduced_from_gpus`` on ``reduced`` (the first seed only and
    at most :data:`REDUCED_HORIZON_S`; its error against the full model: docs/operations.md)."""
    if gpus < reduced_from_gpus:
        return settings, "full"
    reduced = replace(
        settings,
        seeds=settings.seeds[:REDUCED_SEEDS],
        horizon_s=min(settings.horizon_s, REDUCED_HORIZON_S),
    )
    return reduced, "reduced"


def landed_impact(
    pending: Mapping[str, Any], impact: Mapping[str, Any], assessment: Assessment, model: str
) -> dict[str, Any]:
    """The stored impact once its estimate lands: what the recommendation kept beside its
    pending impact (summary, advice, basis, findings...), the estimate, and the verdict,
    preselection, harm and trade-offs (the draft's and the replay's) that follow from it; the
    plan replayed, as ``replay_plan``."""
    out = {k: v for k, v in pending.items() if k not in ("plan", "queued_at")}
    if "plan" in pending:  # kept to estimate it again on a later snapshot (at approve, apply)
        out["replay_plan"] = pending["plan"]
    out.update(impact)
    out["model"] = model
    out["verdict"] = assessment.verdict
    out["harm"] = list(assessment.harm)
    out["tradeoffs"] = list(dict.fromkeys([*pending.get("tradeoffs", ()), *assessment.tradeoffs]))
    out["preselect"] = assessment.verdict == IMPROVES and not assessment.harm
    return out


# -- words ----------------------------------------------------------------------------------------


def format_value(value: float, unit: str) -> str:
    if unit == "fraction":
        return f"{100 * value:.1f}%"
    if unit == "s":
        if abs(value) >= 3600:
            return f"{value / 3600:.1f} h"
        return f"{value / 60:.0f} min"
    if unit == "GPUs":
        return f"{value:.1f} GPUs"
    return f"{value:g}"


def format_delta(value: float, unit: str) -> str:
    sign = "+" if value >= 0 else "-"
    if unit == "fraction":
        return f"{sign}{100 * abs(value):.1f} pts"
    return sign + format_value(abs(value), unit)


def describe(row: Mapping[str, Any]) -> str:
    """``allocation utilization of cluster: 47.0% → 55.4% (+8.4 pts; seeds +6.1 pts..+9.9 pts)``"""
    unit = row["unit"]
    delta = row["delta"]
    spread = (
        f"; seeds {format_delta(delta['min'], unit)}..{format_delta(delta['max'], unit)}"
        if delta["min"] != delta["max"]
        else ""
    )
    subject = "" if row["subject"] == "cluster" else f" of {row['subject']}"
    target = f", fair share {format_value(row['target'], unit)}" if "target" in row else ""
    return (
        f"{row['label']}{subject}: {format_value(row['current']['mean'], unit)} → "
        f"{format_value(row['proposed']['mean'], unit)} "
        f"({format_delta(delta['mean'], unit)}{spread}{target})"
    )
