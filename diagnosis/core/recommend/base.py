"""The shapes of the recommendation core (docs/recommendations.md): generators, what they draft, and
the :class:`Recommendation` the engine hands out with its simulated impact.

A generator module defines one module-level ``GENERATOR = Generator(...)``; the registry finds
it. Its ``generate`` is a pure function of a :class:`RecommendContext` (the snapshot, its
diagnosis, the settings) returning :class:`Draft` objects. The engine (``engine.py``) turns each
draft into a :class:`Recommendation`: it runs the draft's :class:`ImpactPlan` through the
simulator, or takes the draft's static impact, and decides ``preselect`` and ``harm`` from it.

Pure core: no Django. :meth:`Recommendation.as_dict` is plain JSON (no NaN) and carries exactly
what ``diagnosis.models.Recommendation`` stores (kind, target, change, impact, motivating
findings by rule and subject).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

import numpy as np

from diagnosis.core.queue_hierarchy import job_queue_names
from diagnosis.core.recommend.fair_share import FairShares, queue_shares

if TYPE_CHECKING:
    from diagnosis.core.rules.base import Finding
    from diagnosis.core.rules.engine import Diagnosis
    from diagnosis.core.rules.facts import SnapshotFacts
    from diagnosis.core.simulate.policy import Change
    from diagnosis.core.snapshot import ClusterSnapshot

# Recommendation kinds (the values of ``diagnosis.choices.RecommendationKind``).
PLACEMENT_POLICY = "placement-policy"
QUEUE_WEIGHT = "queue-weight"
DRAIN_NODE = "drain-node"
GANG_RELEASE = "gang-release"
ADVISORY = "advisory"
KINDS = (DRAIN_NODE, GANG_RELEASE, PLACEMENT_POLICY, QUEUE_WEIGHT, ADVISORY)

# Impact verdicts, per metric and per recommendation.
IMPROVES = "improves"
NO_EFFECT = "no measurable effect"
HARMS = "harms"
NOT_SIMULATED = "not simulated"

DEFAULT_SEEDS = (0, 1, 2)
DEFAULT_HORIZON_S = 3 * 3600.0


@dataclass(frozen=True)
class RecommendSettings:
    """How recommendations are made and their impact estimated.

    ``seeds`` / ``horizon_s``: the replays behind every simulated impact (one per seed, each
    ``horizon_s`` simulated seconds from the snapshot's ``as_of``). ``simulate=False`` skips
    them (the impact then says so and nothing is preselected). ``min_fairness_ratio`` and
    ``fairness_min_wait_s`` govern the queue-weight generator's fairness trigger;
    ``min_partial_holds`` is how many ``gang-partial-hold`` findings in one pool make the
    placement generator propose binpack without a ``fragmentation`` finding.
    """

    seeds: tuple[int, ...] = DEFAULT_SEEDS
    horizon_s: float = DEFAULT_HORIZON_S
    simulate: bool = True
    min_fairness_ratio: float = 0.8
    fairness_min_wait_s: float = 1800.0
    min_partial_holds: int = 2

    def __post_init__(self) -> None:
        if not self.seeds:
            raise ValueError("seeds: give at least one seed")
        if not self.horizon_s > 0:
            raise ValueError("horizon_s must be positive")
        if not 0 < self.min_fairness_ratio <= 1:
            raise ValueError("min_fairness_ratio must lie in (0, 1]")
        if self.min_partial_holds < 1:
            raise ValueError("min_partial_holds must be >= 1")


@dataclass(frozen=True)
class FindingRef:
    """A finding that motivates a recommendation, by its identity ``(rule, subject)`` (the
    stored finding's fingerprint within its cluster)."""

    rule: str
    subject: str
    severity: str | None = None

    @classmethod
    def of(cls, finding: Finding) -> FindingRef:
        return cls(finding.rule, finding.subject, finding.severity)

    def as_dict(self) -> dict[str, Any]:
        return {"rule": self.rule, "subject": self.subject, "severity": self.severity}


@dataclass(frozen=True)
class ImpactPlan:
    """What to simulate for a draft: the simulator ``changes`` of the proposed setting, and what
    to report besides cluster-wide utilisation and fragmentation.

    ``jobs``: the jobs the change is meant to help (blocked or starved), whose wait is reported
    under ``jobs_label``.
    ``queues``: queues whose wait p95 and GPU share are reported. ``fair_share``: each reported
    queue's fair share of the GPUs (fraction of capacity), the target its share is judged
    against. ``tradeoff_queues``: queues above their fair share whose worse wait is the intended
    cost of the change (listed as a trade-off, not a harm). ``queue_order``: the scheduler's
    queue order for both replays (None: what the snapshot reports).
    """

    changes: tuple[Change, ...]
    jobs: tuple[str, ...] = ()
    queues: tuple[str, ...] = ()
    fair_share: Mapping[str, float] = field(default_factory=dict)
    tradeoff_queues: frozenset[str] = frozenset()
    queue_order: str | None = None
    jobs_label: str = "blocked jobs"
    note: str = ""


@dataclass(frozen=True)
class Draft:
    """A generator's proposal before its impact is known.

    ``change`` is ``{"from": current, "to": proposed}`` (plus ``reason`` for a drain); empty for
    an advisory. Exactly one of ``plan`` (simulated impact) and ``static_impact`` (a generator's
    own account, e.g. a drain's capacity cost) is given, or neither for an advisory.
    ``tradeoffs``: known costs of the change that are the point of it, not a predicted harm.
    ``basis``: the numbers the proposal was computed from (shown with it).
    """

    kind: str
    target: str
    change: Mapping[str, Any]
    findings: tuple[FindingRef, ...]
    summary: str
    advisory: str | None = None
    plan: ImpactPlan | None = None
    static_impact: Mapping[str, Any] | None = None
    tradeoffs: tuple[str, ...] = ()
    basis: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Recommendation:
    """One proposed change (or advice) with its predicted impact.

    ``preselect`` is True only when something can be applied and the impact predicts an
    improvement and no harm (a drain for a critical Xid is preselected on the catalog's word:
    its impact is a static account of the capacity it costs). ``harm`` lists every predicted
    harm; a recommendation with any is never preselected.
    """

    generator: str
    kind: str
    target: str
    change: Mapping[str, Any]
    findings: tuple[FindingRef, ...]
    summary: str
    advisory: str | None
    impact: Mapping[str, Any]
    preselect: bool
    harm: tuple[str, ...] = ()
    tradeoffs: tuple[str, ...] = ()
    basis: Mapping[str, Any] = field(default_factory=dict)

    @property
    def key(self) -> str:
        """Stable identity within a cluster: ``kind`` and ``target`` (a newer recommendation
        with the same key supersedes an older one)."""
        return f"{self.kind} {self.target}"

    @property
    def verdict(self) -> str:
        return str(self.impact.get("verdict", NOT_SIMULATED))

    def scheduler_change(self) -> dict[str, Any] | None:
        """The change as a scheduler adapter's ``apply`` takes it
        (``{"kind", "target", "to"[, "reason"]}``); None for an advisory."""
        if self.kind == ADVISORY or not self.change:
            return None
        out = {"kind": self.kind, "target": self.target, "to": self.change.get("to")}
        if "reason" in self.change:
            out["reason"] = self.change["reason"]
        return out

    def finding_keys(self) -> list[tuple[str, str]]:
        """The motivating findings as ``(rule, subject)``: with the cluster, the stored
        findings' fingerprints (to link ``Recommendation.motivating_findings``)."""
        return [(f.rule, f.subject) for f in self.findings]

    def stored_fields(self) -> dict[str, Any]:
        """The fields of ``diagnosis.models.Recommendation``: ``kind``, ``target``, ``change``
        and ``impact``; the impact JSON also keeps what the model has no column for (summary,
        advice, verdict, preselect, harm, trade-offs, basis, generator, motivating findings)."""
        out = self.as_dict()
        impact = out.pop("impact")
        extra = {k: out.pop(k) for k in list(out) if k not in ("kind", "target", "change")}
        return {**out, "impact": {**impact, **extra}}

    def as_dict(self) -> dict[str, Any]:
        return plain(
            {
                "generator": self.generator,
                "kind": self.kind,
                "target": self.target,
                "change": dict(self.change),
                "findings": [f.as_dict() for f in self.findings],
                "summary": self.summary,
                "advisory": self.advisory,
                "impact": dict(self.impact),
                "verdict": self.verdict,
                "preselect": self.preselect,
                "harm": list(self.harm),
                "tradeoffs": list(self.tradeoffs),
                "basis": dict(self.basis),
            }
        )


@dataclass(frozen=True)
class RecommendContext:
    """What a generator sees: the snapshot, its diagnosis (findings) and the settings, and what
    several generators derive from them, computed once for all (a 131,072-GPU diagnosis has
    ~100,000 findings and 160,000 jobs)."""

    snapshot: ClusterSnapshot
    diagnosis: Diagnosis
    settings: RecommendSettings
    facts: SnapshotFacts

    def findings(self, rule: str) -> list[Finding]:
        """The diagnosis's findings of ``rule``, in its order."""
        return list(self._by_rule.get(rule, ()))

    @cached_property
    def _by_rule(self) -> dict[str, list[Finding]]:
        grouped: dict[str, list[Finding]] = {}
        for finding in self.diagnosis.findings:
            grouped.setdefault(finding.rule, []).append(finding)
        return grouped

    @cached_property
    def shares(self) -> FairShares:
        """Every queue's fair share (:func:`~diagnosis.core.recommend.fair_share.queue_shares`)."""
        return queue_shares(self.snapshot, self.facts)

    @cached_property
    def job_queues(self) -> np.ndarray:
        """Each job's queue name, in the order of ``snapshot.jobs``
        (:func:`~diagnosis.core.queue_hierarchy.job_queue_names`)."""
        return job_queue_names(self.snapshot.jobs)


@dataclass(frozen=True)
class Generator:
    id: str
    kind: str
    title: str
    rules: tuple[str, ...]
    doc: str
    generate: Callable[[RecommendContext], list[Draft]]


def plain(value: Any) -> Any:
    """``value`` as plain JSON: numpy scalars as Python numbers, NaN and infinities as None,
    tuples and sets as lists."""
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        items = sorted(value) if isinstance(value, set | frozenset) else value
        return [plain(v) for v in items]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def whole(value: float) -> float | int:
    """``value`` as an int when it is a whole number (weights read as floats)."""
    return int(value) if float(value).is_integer() else float(value)


def optional_text(value: Any) -> str | None:
    """A frame cell as text, None when empty (None or NaN)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    return str(value)
