"""Builders for the database rows a test sets up directly (snapshots: tests/support/builders.py),
for example:

    rec = make_recommendation(cluster)  # proposed: raise queue team-b's weight from 1 to 3
    drain = make_recommendation(
        cluster, "drain-node", "node:n1", {"to": "drained"}, findings=[xid], state="approved"
    )
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

from diagnosis.models import Cluster, Finding, Recommendation

QUEUE_WEIGHT_CHANGE = {"from": 1, "to": 3}  # team-b's weight in the sim's small scenario is 1


def make_recommendation(
    cluster: Cluster,
    kind: str = "queue-weight",
    target: str = "queue:team-b",
    change: dict[str, Any] | None = None,
    *,
    findings: Iterable[Finding] = (),
    **fields: Any,
) -> Recommendation:
    """A recommendation of ``cluster``, ``proposed`` unless ``state=`` says otherwise, motivated
    by ``findings``; any other model field goes in ``fields``. Without a ``change``, a
    ``queue-weight`` raises the weight from 1 to 3; any other kind must say its change."""
    if change is None:
        if kind != "queue-weight":
            raise ValueError(f"make_recommendation: say the change of a {kind} recommendation")
        change = dict(QUEUE_WEIGHT_CHANGE)
    rec = Recommendation.objects.create(
        cluster=cluster, kind=kind, target=target, change=change, **fields
    )
    rec.motivating_findings.add(*findings)
    return rec


def stepped_seed_config(start: datetime, step_s: int) -> dict[str, Any]:
    """The ``scheduler_config`` of a sim cluster running the demo's seed scenario from ``start``,
    ``step_s`` simulated seconds per cycle (tests drive its clock, not the wall)."""
    return {
        "scenario": "seed",
        "seed": 0,
        "clock": "step",
        "step_s": step_s,
        "started_at": start.replace(microsecond=0).isoformat(),
    }
