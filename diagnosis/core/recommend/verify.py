"""Verification of applied recommendations (docs/recommendations.md#workflow): pure core, no Django.

After a change is applied, every later cycle makes an :class:`Observation` of its target: the
target metric (what the change was meant to move), whether the new setting shows in the
snapshot (``in_effect``) and how many of the motivating findings the cycle still reports.
:func:`judge` turns the observations and the baseline (the metric when it was applied) into a
:class:`Judgement`:

- ``verified``: for ``settings.good_cycles`` consecutive good cycles the setting was in effect,
  none of the motivating findings was open and the target metric was better than the baseline
  (a cycle whose metric cannot be judged, e.g. a queue with no pending demand, neither counts
  nor breaks the run; one with a motivating finding open breaks it). Never while a motivating
  finding is open;
- ``worse``: the last ``settings.cycles`` judged observations in a row were each worse than the
  baseline by more than the tolerance (``max(floor, tolerance × |baseline|)``): a rollback is
  due;
- ``regressed``: it was verified, and then its target metric was worse than the baseline as
  above for ``settings.cycles`` judged cycles in a row -- never while the metric is better than
  before (issue #26.6: a verdict is decided over a window, so noise does not flip it). A
  rollback is due; it is watched again and verified again after the good cycles in a row;
- ``inconclusive``: neither after ``settings.max_cycles`` observations (the change stays
  applied; nobody is asked to do anything);
- ``watching``: not yet decided.

A motivating finding that comes back after verification, or a setting that stops showing, is a
*signal* (``Judgement.signals``: "finding returned"), shown beside the verdict, not a verdict.

The :class:`Judgement` carries the verdict and the checks behind it (``why``), made by the one
function :func:`judge`: a page showing both can never show them contradicting each other.
:func:`advance` is one cycle of an applied change's verification: the observation added to its
record, the verdict, and the state it moves to (what the cycle stores and audits).

Target metrics, per kind:

- ``placement-policy``: the pool's ``free-fragmented`` GPUs in the cycle's GPU-hour accounting
  (lower is better);
- ``queue-weight``: the GPUs the queue holds (higher is better), judged only while the queue
  still has pending demand;
- ``gang-release``: the GPUs held by partial gangs in the job's pool (``held-by-partial-gang``
  in the cycle's accounting; lower is better); in effect once the job no longer holds GPUs
  while pending;
- ``drain-node``: none; verified once the node shows cordoned or drained.

A rollback (a recommendation undoing another) is verified once its setting is in effect.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from diagnosis.core.numbers import finite_number
from diagnosis.core.recommend.base import DRAIN_NODE, GANG_RELEASE, PLACEMENT_POLICY, QUEUE_WEIGHT
from diagnosis.core.recommend.fair_share import queue_shares
from diagnosis.core.rules.facts import SnapshotFacts
from diagnosis.core.snapshot import ClusterSnapshot, format_time
from diagnosis.core.vocabulary import UNAVAILABLE_NODE_STATES

WATCHING = "watching"
VERIFIED = "verified"
WORSE = "worse"
REGRESSED = "regressed"
INCONCLUSIVE = "inconclusive"


@dataclass(frozen=True)
class VerifySettings:
    """``cycles``: judged cycles in a row worse than the baseline before a change is judged
    worse (or, once verified, regressed); ``good_cycles``:
    consecutive good cycles before it is verified; ``max_cycles``: after this many observations
    without a verdict, stop watching (and, once verified, how many more cycles it is watched for
    a regression); ``tolerance`` (relative) and ``floor`` (absolute, in the metric's unit): how
    much worse than the baseline counts as worse."""

    cycles: int = 3
    max_cycles: int = 12
    tolerance: float = 0.10
    floor: float = 1.0
    good_cycles: int = 3

    def __post_init__(self) -> None:
        if self.cycles < 1 or self.max_cycles < self.cycles:
            raise ValueError("verification needs 1 <= cycles <= max_cycles")
        if not 1 <= self.good_cycles <= self.max_cycles:
            raise ValueError("verification needs 1 <= good_cycles <= max_cycles")
        if self.tolerance < 0 or self.floor < 0:
            raise ValueError("tolerance and floor must not be negative")

    def margin(self, baseline: float) -> float:
        return max(self.floor, self.tolerance * abs(baseline))


@dataclass(frozen=True)
class TargetMetric:
    name: str
    label: str
    better: str  # "higher" or "lower"


METRICS: Mapping[str, TargetMetric] = {
    PLACEMENT_POLICY: TargetMetric(
        "free_fragmented_gpus", "free GPUs stranded by fragmentation in the pool", "lower"
    ),
    QUEUE_WEIGHT: TargetMetric("held_gpus", "GPUs the queue holds", "higher"),
    GANG_RELEASE: TargetMetric(
        "partial_gang_gpus", "GPUs held by partial gangs in the pool", "lower"
    ),
}


def metric_for(kind: str) -> TargetMetric | None:
    """The target metric of a kind of change (None: verified by its effect alone)."""
    return METRICS.get(kind)


@dataclass(frozen=True)
class Observation:
    as_of: str
    metric: float | None  # None: not judged this cycle (e.g. a queue with no pending demand)
    in_effect: bool | None  # None: the snapshot does not report the setting
    motivating_open: int
    note: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {
            "as_of": self.as_of,
            "metric": self.metric,
            "in_effect": self.in_effect,
            "motivating_open": self.motivating_open,
            "note": self.note,
        }

    @classmethod
    def of(cls, data: Mapping[str, Any]) -> Observation:
        return cls(
            as_of=str(data.get("as_of", "")),
            metric=finite_number(data.get("metric")),
            in_effect=data.get("in_effect"),
            motivating_open=int(data.get("motivating_open") or 0),
            note=str(data.get("note") or ""),
        )


@dataclass(frozen=True)
class Check:
    """One condition of the verdict, as the page lists it under "why"."""

    label: str
    ok: bool
    detail: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {"label": self.label, "ok": self.ok, "detail": self.detail}


@dataclass(frozen=True)
class Judgement:
    status: str
    reason: str
    why: tuple[Check, ...] = ()
    good_cycles: int = 0
    rollback: bool = False  # a rollback is due (worse, or regressed)
    signals: tuple[str, ...] = ()  # shown beside the verdict: "finding returned", ...

    def as_dict(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "reason": self.reason,
            "why": [c.as_dict() for c in self.why],
            "good_cycles": self.good_cycles,
            "rollback_due": self.rollback,
            "signals": list(self.signals),
        }


def measure(
    kind: str,
    target: str,
    snapshot: ClusterSnapshot,
    accounting: Mapping[str, Any] | None,
    facts: SnapshotFacts | None = None,
) -> tuple[float | None, str]:
    """The target metric of a change in one snapshot, and a note when it cannot be judged."""
    name = target.partition(":")[2]
    if kind == PLACEMENT_POLICY:
        return _pool_bucket(accounting, name, "free-fragmented")
    if kind == GANG_RELEASE:
        jobs = snapshot.jobs
        if name not in jobs.index:
            return None, f"job {name} is not in the snapshot"
        return _pool_bucket(accounting, str(jobs.at[name, "pool"]), "held-by-partial-gang")
    if kind == QUEUE_WEIGHT:
        share = queue_shares(snapshot, facts).queues.get(name)
        if share is None:
            return None, f"queue {name} is not in the snapshot"
        if share.pending_gpus <= 0:
            return None, f"queue {name} has no pending demand: nothing to judge"
        return float(share.held_gpus), ""
    return None, ""


def _pool_bucket(
    accounting: Mapping[str, Any] | None, pool_name: str, bucket_name: str
) -> tuple[float | None, str]:
    """A pool's GPUs in one accounting bucket of the cycle."""
    for pool in (accounting or {}).get("pools") or ():
        if pool.get("pool") == pool_name:
            bucket = (pool.get("buckets") or {}).get(bucket_name) or {}
            return finite_number(bucket.get("gpus")) or 0.0, ""
    return None, f"pool {pool_name} is not in the cycle's accounting"


def in_effect(kind: str, target: str, to: Any, snapshot: ClusterSnapshot) -> bool | None:
    """Whether the snapshot shows the target at the value ``to`` (None: it does not say)."""
    name = target.partition(":")[2]
    if kind == PLACEMENT_POLICY:
        current = snapshot.placement(name)
        return None if current is None else current == to
    if kind == QUEUE_WEIGHT:
        queues = snapshot.queues
        if name not in queues.index or finite_number(to) is None:
            return None
        weight = finite_number(queues.at[name, "weight"])
        return weight is not None and math.isclose(weight, float(to))
    if kind == GANG_RELEASE:  # released: not pending with GPUs bound (gone from the list too)
        jobs = snapshot.jobs
        if name not in jobs.index:
            return True
        state = str(jobs.at[name, "state"])
        return not (state == "pending" and int(jobs.at[name, "bound_pods"] or 0) > 0)
    if kind == DRAIN_NODE:
        nodes = snapshot.nodes
        if name not in nodes.index:
            return None
        state = str(nodes.at[name, "state"])
        return state in UNAVAILABLE_NODE_STATES if to == "drained" else state == to
    return None


def observe(
    kind: str,
    target: str,
    to: Any,
    motivating: Iterable[tuple[str, str]],
    snapshot: ClusterSnapshot,
    reported: Iterable[tuple[str, str]],
    accounting: Mapping[str, Any] | None,
    facts: SnapshotFacts | None = None,
) -> Observation:
    """One cycle's observation of an applied change. ``reported``: the ``(rule, subject)`` of
    every finding the cycle's diagnosis reported; ``motivating``: those that motivated it."""
    metric, note = measure(kind, target, snapshot, accounting, facts)
    still = set(motivating) & set(reported)
    return Observation(
        as_of=format_time(snapshot.as_of),
        metric=metric,
        in_effect=in_effect(kind, target, to, snapshot),
        motivating_open=len(still),
        note=note,
    )


def judge(
    kind: str,
    baseline: float | None,
    observations: Sequence[Observation],
    settings: VerifySettings,
    *,
    rollback: bool = False,
    verified: bool = False,
    observed: int | None = None,
) -> Judgement:
    """What the observations so far say about an applied change (see the module doc), and why.
    ``verified``: it was verified already; the cycles since are watched for a regression.
    ``observed``: how many cycles were observed in all (the observations kept may be fewer)."""
    if not observations:
        return Judgement(WATCHING, "no cycle since it was applied")
    last = observations[-1]
    count = max(observed or 0, len(observations))
    metric = None if rollback else metric_for(kind)
    if metric is None:
        return _judge_effect(observations, settings, count)

    worse = _worse_run(metric, baseline, observations, settings)
    findings = Check(
        "motivating findings resolved",
        last.motivating_open == 0,
        f"{last.motivating_open} open" if last.motivating_open else "none open",
    )
    effect = Check("setting in effect", last.in_effect is not False, _effect(last.in_effect))
    latest = next((o.metric for o in reversed(observations) if o.metric is not None), None)
    if verified:  # watched for a regression: the metric worse than before, cycles in a row
        signals = _signals(last)
        why = (
            Check(
                f"target metric not worse than before {settings.cycles} cycles in a row",
                worse is None,
                worse or _metric_now(metric, baseline, latest),
            ),
        )
        if worse is not None:
            return Judgement(
                REGRESSED, f"regressed after verification: {worse}", why, 0, True, signals
            )
        also = f"; {', '.join(signals)} (a signal, not a verdict)" if signals else ""
        return Judgement(VERIFIED, f"verified; no regression since{also}", why, signals=signals)
    streak = _good_streak(metric, baseline, observations, settings)
    why = (
        findings,
        effect,
        _metric_check(metric, baseline, latest, worse),
        Check(
            "good cycles in a row",
            streak >= settings.good_cycles,
            f"{streak} of {settings.good_cycles}",
        ),
    )
    good = all(c.ok for c in why)
    if worse is not None:
        return Judgement(WORSE, worse, why, streak, rollback=True)
    if good:
        now = "" if latest is None else f"; {metric.label}: {_fmt(latest)}"
        was = "" if baseline is None else f" (was {_fmt(baseline)})"
        return Judgement(
            VERIFIED,
            f"the motivating findings stayed resolved for {streak} cycles{now}{was}",
            why,
            streak,
        )
    if count >= settings.max_cycles:
        return Judgement(
            INCONCLUSIVE,
            f"no verdict after {count} cycles: {_failed(why)}",
            why,
            streak,
        )
    return Judgement(WATCHING, f"not yet: {_failed(why)}", why, streak)


def _judge_effect(
    observations: Sequence[Observation], settings: VerifySettings, count: int
) -> Judgement:
    """A change judged by its effect alone (a drain, a rollback): the setting shows."""
    last = observations[-1]
    why = (Check("setting in effect", bool(last.in_effect), _effect(last.in_effect)),)
    if last.in_effect:
        return Judgement(VERIFIED, "the new setting shows in the snapshot", why)
    if count >= settings.max_cycles:
        return Judgement(INCONCLUSIVE, f"the setting did not show in {count} cycles", why)
    return Judgement(WATCHING, "waiting for the setting to show in the snapshot", why)


def _effect(in_effect: bool | None) -> str:
    return {True: "shows in the snapshot", False: "does not show in the snapshot"}.get(
        in_effect, "the snapshot does not report it"
    )


def _worse_run(
    metric: TargetMetric,
    baseline: float | None,
    observations: Sequence[Observation],
    settings: VerifySettings,
) -> str | None:
    """Why the metric is worse than the baseline: each of the last ``settings.cycles`` judged
    cycles worse by more than the tolerance (a judged cycle not worse breaks the run; an
    unjudged one neither counts nor breaks it), or None."""
    judged = [o.metric for o in observations if o.metric is not None]
    if baseline is None or len(judged) < settings.cycles:
        return None
    recent = judged[-settings.cycles :]
    if not all(_worse(metric, baseline, value, settings) for value in recent):
        return None
    return (
        f"{metric.label}: {_fmt(baseline)} before, {', '.join(_fmt(v) for v in recent)} in the "
        f"last {len(recent)} cycles ({metric.better} is better; tolerance "
        f"{_fmt(settings.margin(baseline))})"
    )


def _signals(last: Observation) -> tuple[str, ...]:
    """What a verified change's latest cycle shows that is no verdict."""
    out = []
    if last.motivating_open:
        out.append(f"finding returned ({last.motivating_open} open)")
    if last.in_effect is False:
        out.append("setting no longer shows in the snapshot")
    return tuple(out)


def _metric_now(metric: TargetMetric, baseline: float | None, latest: float | None) -> str:
    if latest is None:
        return f"{metric.label}: not judged"
    was = "unknown" if baseline is None else _fmt(baseline)
    return f"{metric.label}: {was} before, {_fmt(latest)} now ({metric.better} is better)"


def _better(metric: TargetMetric, baseline: float | None, value: float) -> bool:
    """Better than the baseline (unknown baseline: nothing to compare, so not held against it;
    a lower-is-better metric at zero cannot improve further)."""
    if baseline is None:
        return True
    if metric.better == "lower":
        return value < baseline or value == baseline == 0
    return value > baseline


def _good_streak(
    metric: TargetMetric,
    baseline: float | None,
    observations: Sequence[Observation],
    settings: VerifySettings,
) -> int:
    """Consecutive good cycles up to the latest (an unjudged metric neither counts nor breaks)."""
    streak = 0
    for o in reversed(observations):
        if o.motivating_open or o.in_effect is False:
            break
        if o.metric is None:
            continue
        if not _better(metric, baseline, o.metric):
            break
        streak += 1
    return streak


def _metric_check(
    metric: TargetMetric, baseline: float | None, latest: float | None, worse: str | None
) -> Check:
    if worse is not None:
        return Check("target metric better than before", False, worse)
    if latest is None:
        return Check("target metric better than before", False, f"{metric.label}: not judged yet")
    return Check(
        "target metric better than before",
        _better(metric, baseline, latest),
        _metric_now(metric, baseline, latest),
    )


def _failed(why: Sequence[Check]) -> str:
    return "; ".join(f"{c.label}: {c.detail}" for c in why if not c.ok)


def _worse(metric: TargetMetric, baseline: float, value: float, settings: VerifySettings) -> bool:
    margin = settings.margin(baseline)
    if metric.better == "lower":
        return value > baseline + margin
    return value < baseline - margin


def _fmt(value: float) -> str:
    return f"{value:g}" if float(value).is_integer() else f"{value:.1f}"


# The states of an applied change that verification moves between (docs/recommendations.md).
APPLIED_STATE, VERIFIED_STATE, REGRESSED_STATE = "applied", "verified", "regressed"


@dataclass(frozen=True)
class Step:
    """One cycle of a change's verification: its state after the cycle, its verification record
    (``data``), the verdict, and the audit action of a state change (``verify``, ``regress``,
    ``verify-worse``; empty: none)."""

    state: str
    data: dict[str, Any]
    judgement: Judgement
    event: str = ""


def watching(data: Mapping[str, Any]) -> bool:
    """Whether a change's verification still observes cycles (not worse, inconclusive, or
    watched long enough after it was verified)."""
    return data.get("status") not in (INCONCLUSIVE, WORSE) and not data.get("watch_ended")


def advance(
    kind: str,
    state: str,
    data: Mapping[str, Any],
    observation: Observation,
    settings: VerifySettings,
    *,
    rollback: bool = False,
    keep: int = 24,
) -> Step:
    """The verification of an applied change (``state``: applied, verified or regressed; its
    record ``data``: baseline, observations, counters) after one more cycle's ``observation``;
    ``keep``: how many observations the record keeps. A regressed change is judged again from its
    regression on, as one not yet verified."""
    out = dict(data)
    observations = [*out.get("observations", []), observation.as_dict()][-keep:]
    cycles = int(out.get("cycles") or 0) + 1
    judged, observed = observations, cycles
    if state == REGRESSED_STATE:
        observed = max(1, cycles - int(out.get("regressed_at_cycle") or 0))
        judged = observations[-observed:]
    judgement = judge(
        kind,
        out.get("baseline"),
        [Observation.of(o) for o in judged],
        settings,
        rollback=rollback,
        verified=state == VERIFIED_STATE,
        observed=observed,
    )
    out.update(observations=observations, cycles=cycles, **judgement.as_dict())
    event, new = "", state
    if judgement.status == VERIFIED and state != VERIFIED_STATE:
        new, event = VERIFIED_STATE, "verify"
        out["verified_at_cycle"] = cycles
    elif judgement.status == VERIFIED:
        if cycles - int(out.get("verified_at_cycle") or 0) >= settings.max_cycles:
            out["watch_ended"] = True  # watched long enough for a regression
    elif judgement.status == REGRESSED:
        new, event = REGRESSED_STATE, "regress"
        out["regressed_at_cycle"] = cycles
    elif judgement.status == WORSE:
        event = "verify-worse"
    return Step(new, out, judgement, event)


# -- the predicted effect, measured after apply (issue #26.6) ------------------------------------


def measure_effect(
    metrics: Iterable[Mapping[str, Any]],
    snapshot: ClusterSnapshot,
    accounting: Mapping[str, Any] | None,
    facts: SnapshotFacts | None = None,
) -> dict[str, float]:
    """What one cycle shows of the impact estimate's metrics (its ``metrics`` rows), keyed
    ``"<metric> <subject>"``: a queue's ``queue_share`` (its share of the GPUs allocated now; the
    cycles' mean approximates the share of GPU-hours) and the cluster's ``fragmentation_gpus``
    (free GPUs stranded by fragmentation in the cycle's accounting). A metric a snapshot cannot
    show (a replay's waits of jobs that are gone) is left out."""
    out: dict[str, float] = {}
    shares = None
    for row in metrics:
        name, subject = str(row.get("metric")), str(row.get("subject") or "")
        key = f"{name} {subject}"
        if name == "queue_share" and subject.startswith("queue:"):
            shares = shares or queue_shares(snapshot, facts)
            total = sum(q.held_gpus for q in shares.queues.values())
            queue = shares.queues.get(subject.removeprefix("queue:"))
            if queue is not None and total > 0:
                out[key] = queue.held_gpus / total
        elif name == "fragmentation_gpus" and subject == "cluster" and accounting:
            pools = accounting.get("pools") or ()
            out[key] = float(
                sum(
                    finite_number(
                        ((p.get("buckets") or {}).get("free-fragmented") or {}).get("gpus")
                    )
                    or 0.0
                    for p in pools
                )
            )
    return out


def add_effect(effect: Mapping[str, Any], measured: Mapping[str, float]) -> dict[str, Any]:
    """The running means of the measured effect (``{key: {"mean", "cycles"}}``) with one more
    cycle's measurement."""
    out = {k: dict(v) for k, v in effect.items()}
    for key, value in measured.items():
        seen = out.get(key) or {"mean": 0.0, "cycles": 0}
        cycles = int(seen["cycles"]) + 1
        out[key] = {"mean": seen["mean"] + (value - seen["mean"]) / cycles, "cycles": cycles}
    return out
