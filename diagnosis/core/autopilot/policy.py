"""A remediation policy's terms, checked, and whether a recommendation matches them.

A policy names one recommendation kind the autopilot may apply and a condition on it:

- ``drain-node``: ``{"xid_codes": [79, 48]}`` -- the drain's motivating Xid findings carry one of
  these codes; every code must be of the Xid catalogue's drain class
  (``xid_catalog.drain_class``); an empty list means the whole class;
- ``gang-release``: ``{"min_gpus": 200, "min_hold_s": 3600}`` -- the released partial gang holds
  at least ``min_gpus`` GPUs and has held them at least ``min_hold_s`` seconds.

Placement and queue weights are never the autopilot's (``KINDS``): their effect is a prediction
two people weigh each time.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from diagnosis.core import xid_catalog

DRAIN_NODE = "drain-node"
GANG_RELEASE = "gang-release"
KINDS = (DRAIN_NODE, GANG_RELEASE)
NEVER = {
    "placement-policy": "placement (binpack) changes are never applied by a policy",
    "queue-weight": "queue weights are never applied by a policy",
    "advisory": "advice has nothing to apply",
}

DRY_RUN = "dry-run"
ENFORCE = "enforce"
MODES = (DRY_RUN, ENFORCE)

MINUTES_PER_DAY = 24 * 60


@dataclass(frozen=True)
class Budgets:
    """How much one policy may do: at most ``per_pool_per_hour`` actions in one pool in any hour,
    at most ``pool_out_share`` of a pool's GPUs out of scheduling at once (a drain's guard), at
    most ``per_hour`` actions in any hour over its whole scope."""

    per_pool_per_hour: int = 1
    pool_out_share: float = 0.1
    per_hour: int = 2

    def errors(self) -> list[str]:
        out = []
        if not 0 <= self.per_pool_per_hour <= 1000:
            out.append("budgets.per_pool_per_hour: a whole number from 0 to 1000")
        if not 0 <= self.per_hour <= 1000:
            out.append("budgets.per_hour: a whole number from 0 to 1000")
        if not 0 <= self.pool_out_share <= 1:
            out.append("budgets.pool_out_share: a fraction from 0 to 1")
        return out


@dataclass(frozen=True)
class QuietWindow:
    """Minutes of the day (UTC) in which the policy does nothing, ``start`` included, ``end``
    excluded; a window past midnight (22:00-06:00) wraps. ``start == end``: no window."""

    start_minute: int
    end_minute: int

    def contains(self, minute_of_day: int) -> bool:
        start, end = self.start_minute, self.end_minute
        if start == end:
            return False
        if start < end:
            return start <= minute_of_day < end
        return minute_of_day >= start or minute_of_day < end

    def errors(self) -> list[str]:
        if not (
            0 <= self.start_minute < MINUTES_PER_DAY and 0 <= self.end_minute < MINUTES_PER_DAY
        ):
            return ["quiet window: minutes of the day from 0 to 1439"]
        return []

    def label(self) -> str:
        def hhmm(m: int) -> str:
            return f"{m // 60:02d}:{m % 60:02d}"

        return f"{hhmm(self.start_minute)}-{hhmm(self.end_minute)} UTC"


@dataclass(frozen=True)
class PolicySpec:
    """One approved policy as the autopilot reads it. ``clusters`` and ``pools`` empty: every
    cluster (resp. pool) the policy is stored for."""

    id: int
    name: str
    kind: str
    condition: Mapping[str, Any]
    mode: str = DRY_RUN
    clusters: frozenset[str] = frozenset()
    pools: frozenset[str] = frozenset()
    budgets: Budgets = field(default_factory=Budgets)
    quiet: QuietWindow | None = None

    @property
    def enforcing(self) -> bool:
        return self.mode == ENFORCE


@dataclass(frozen=True)
class Candidate:
    """An open recommendation the autopilot may act on, with the facts its conditions read:
    ``pool`` of the target, the Xid codes of a drain's motivating findings, the GPUs a drain takes
    out of scheduling (``gpus_out``), a gang's GPUs held and for how long, and the impact
    estimate's ``verdict`` and ``harm``."""

    recommendation: int
    cluster: str
    kind: str
    target: str
    pool: str | None = None
    xid_codes: tuple[int, ...] = ()
    gpus_out: int = 0
    gpus_held: int = 0
    hold_s: float = 0.0
    verdict: str = ""
    harm: tuple[str, ...] = ()


def condition_errors(kind: str, condition: Mapping[str, Any]) -> list[str]:
    """What is wrong with a condition for ``kind`` (empty: it is good), each naming its field."""
    if kind in NEVER:
        return [f"kind: {NEVER[kind]}"]
    if kind not in KINDS:
        return [f"kind: one of {', '.join(KINDS)}"]
    if not isinstance(condition, Mapping):
        return ["condition: an object"]
    allowed = {"xid_codes"} if kind == DRAIN_NODE else {"min_gpus", "min_hold_s"}
    errors = [
        f"condition.{key}: not a field of a {kind} condition"
        for key in condition
        if key not in allowed
    ]
    if kind == DRAIN_NODE:
        codes = condition.get("xid_codes", [])
        if not isinstance(codes, list) or not all(
            isinstance(c, int) and not isinstance(c, bool) for c in codes
        ):
            return [*errors, "condition.xid_codes: a list of Xid codes"]
        outside = sorted(set(codes) - xid_catalog.drain_class())
        if outside:
            errors.append(
                "condition.xid_codes: not of the catalogue's drain class: "
                + ", ".join(str(c) for c in outside)
            )
        return errors
    for key in ("min_gpus", "min_hold_s"):
        value = condition.get(key)
        if isinstance(value, bool) or not isinstance(value, int | float) or value < 1:
            errors.append(f"condition.{key}: a number of at least 1")
    return errors


def policy_errors(spec: PolicySpec) -> list[str]:
    """Every problem of a policy's terms at once (empty: it may be stored)."""
    errors = condition_errors(spec.kind, spec.condition)
    if spec.mode not in MODES:
        errors.append(f"mode: one of {', '.join(MODES)}")
    errors += spec.budgets.errors()
    if spec.quiet is not None:
        errors += spec.quiet.errors()
    return errors


def drain_codes_of(spec: PolicySpec) -> frozenset[int]:
    codes = spec.condition.get("xid_codes") or []
    return frozenset(codes) if codes else xid_catalog.drain_class()


def mismatch(spec: PolicySpec, candidate: Candidate) -> str:
    """Why ``candidate`` is not the policy's to act on (empty: it matches)."""
    if candidate.kind != spec.kind:
        return f"a {candidate.kind}, the policy is for {spec.kind}"
    if spec.clusters and candidate.cluster not in spec.clusters:
        return f"cluster {candidate.cluster} is outside the policy's scope"
    if spec.pools and candidate.pool not in spec.pools:
        return f"pool {candidate.pool} is outside the policy's scope"
    if spec.kind == DRAIN_NODE:
        codes = drain_codes_of(spec)
        if not set(candidate.xid_codes) & codes:
            found = ", ".join(str(c) for c in candidate.xid_codes) or "none"
            return f"no Xid of the condition (codes found: {found})"
        return ""
    need_gpus = float(spec.condition.get("min_gpus") or 0)
    need_hold = float(spec.condition.get("min_hold_s") or 0)
    if candidate.gpus_held < need_gpus:
        return f"holds {candidate.gpus_held} GPUs, the condition needs {need_gpus:g}"
    if candidate.hold_s < need_hold:
        return f"held for {candidate.hold_s:.0f} s, the condition needs {need_hold:g} s"
    return ""


def first_match(policies: Sequence[PolicySpec], candidate: Candidate) -> PolicySpec | None:
    """The policy (lowest id first) whose terms the candidate matches; None: no policy's."""
    for spec in sorted(policies, key=lambda p: p.id):
        if not mismatch(spec, candidate):
            return spec
    return None
