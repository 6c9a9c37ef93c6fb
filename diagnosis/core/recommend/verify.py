"""Verification of applied recommendations (DESIGN.md section 8.2): pure core, no Django.

After a change is applied, every later cycle makes an :class:`Observation` of its target: the
target metric (what the change was meant to move), whether the new setting shows in the
snapshot (``in_effect``) and how many of the motivating findings the cycle still reports.
:func:`judge` turns the observations and the baseline (the metric when it was applied) into a
:class:`Judgement`:

- ``verified``: the setting is in effect, none of the motivating findings is reported any more,
  and the metric is not worse than the baseline (beyond the tolerance);
- ``worse``: the mean of the last ``settings.cycles`` judged observations is worse than the
  baseline by more than the tolerance (``max(floor, tolerance × |baseline|)``): a rollback is
  due;
- ``inconclusive``: neither after ``settings.max_cycles`` observations (the change stays
  applied; nobody is asked to do anything);
- ``watching``: not yet decided.

Target metrics, per kind:

- ``placement-policy``: the pool's ``free-fragmented`` GPUs in the cycle's GPU-hour accounting
  (lower is better);
- ``queue-weight``: the GPUs the queue holds (higher is better), judged only while the queue
  still has pending demand;
- ``drain-node``: none; verified once the node shows cordoned or drained.

A rollback (a recommendation undoing another) is verified once its setting is in effect.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from diagnosis.core.recommend.base import DRAIN_NODE, PLACEMENT_POLICY, QUEUE_WEIGHT
from diagnosis.core.recommend.fair_share import queue_shares
from diagnosis.core.rules.facts import SnapshotFacts
from diagnosis.core.snapshot import ClusterSnapshot, format_time
from diagnosis.core.vocabulary import UNAVAILABLE_NODE_STATES

WATCHING = "watching"
VERIFIED = "verified"
WORSE = "worse"
INCONCLUSIVE = "inconclusive"


@dataclass(frozen=True)
class VerifySettings:
    """``cycles``: observations averaged before a change is judged worse; ``max_cycles``: after
    this many observations, stop watching; ``tolerance`` (relative) and ``floor`` (absolute, in
    the metric's unit): how much worse than the baseline counts as worse."""

    cycles: int = 3
    max_cycles: int = 12
    tolerance: float = 0.10
    floor: float = 1.0

    def __post_init__(self) -> None:
        if self.cycles < 1 or self.max_cycles < self.cycles:
            raise ValueError("verification needs 1 <= cycles <= max_cycles")
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
            metric=_number(data.get("metric")),
            in_effect=data.get("in_effect"),
            motivating_open=int(data.get("motivating_open") or 0),
            note=str(data.get("note") or ""),
        )


@dataclass(frozen=True)
class Judgement:
    status: str
    reason: str


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
        for pool in (accounting or {}).get("pools") or ():
            if pool.get("pool") == name:
                bucket = (pool.get("buckets") or {}).get("free-fragmented") or {}
                return _number(bucket.get("gpus")), ""
        return None, f"pool {name} is not in the cycle's accounting"
    if kind == QUEUE_WEIGHT:
        share = queue_shares(snapshot, facts).queues.get(name)
        if share is None:
            return None, f"queue {name} is not in the snapshot"
        if share.pending_gpus <= 0:
            return None, f"queue {name} has no pending demand: nothing to judge"
        return float(share.held_gpus), ""
    return None, ""


def in_effect(kind: str, target: str, to: Any, snapshot: ClusterSnapshot) -> bool | None:
    """Whether the snapshot shows the target at the value ``to`` (None: it does not say)."""
    name = target.partition(":")[2]
    if kind == PLACEMENT_POLICY:
        current = snapshot.placement(name)
        return None if current is None else current == to
    if kind == QUEUE_WEIGHT:
        queues = snapshot.queues
        if name not in queues.index or _number(to) is None:
            return None
        weight = _number(queues.at[name, "weight"])
        return weight is not None and math.isclose(weight, float(to))
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
) -> Judgement:
    """What the observations so far say about an applied change (see the module doc)."""
    if not observations:
        return Judgement(WATCHING, "no cycle since it was applied")
    last = observations[-1]
    metric = None if rollback else metric_for(kind)
    if metric is None:
        if last.in_effect:
            return Judgement(VERIFIED, "the new setting shows in the snapshot")
        if len(observations) >= settings.max_cycles:
            return Judgement(
                INCONCLUSIVE, f"the setting did not show in {len(observations)} cycles"
            )
        return Judgement(WATCHING, "waiting for the setting to show in the snapshot")

    judged = [o.metric for o in observations if o.metric is not None]
    if baseline is not None and len(judged) >= settings.cycles:
        recent = judged[-settings.cycles :]
        mean = sum(recent) / len(recent)
        if _worse(metric, baseline, mean, settings):
            return Judgement(
                WORSE,
                f"{metric.label}: {_fmt(baseline)} before, mean {_fmt(mean)} over the last "
                f"{len(recent)} cycles ({metric.better} is better; tolerance "
                f"{_fmt(settings.margin(baseline))})",
            )
    not_worse = (
        baseline is None
        or last.metric is None
        or not _worse(metric, baseline, last.metric, settings)
    )
    if last.in_effect is not False and last.motivating_open == 0 and not_worse:
        now = "" if last.metric is None else f"; {metric.label}: {_fmt(last.metric)}"
        was = "" if baseline is None else f" (was {_fmt(baseline)})"
        return Judgement(VERIFIED, f"the motivating findings are gone{now}{was}")
    if len(observations) >= settings.max_cycles:
        return Judgement(
            INCONCLUSIVE,
            f"after {len(observations)} cycles {last.motivating_open} motivating finding(s) "
            "are still reported, and the metric is not worse",
        )
    return Judgement(WATCHING, f"{last.motivating_open} motivating finding(s) still reported")


def _worse(metric: TargetMetric, baseline: float, value: float, settings: VerifySettings) -> bool:
    margin = settings.margin(baseline)
    if metric.better == "lower":
        return value > baseline + margin
    return value < baseline - margin


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or value is None:
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def _fmt(value: float) -> str:
    return f"{value:g}" if float(value).is_integer() else f"{value:.1f}"
