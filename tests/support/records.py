"""Builders for the database rows a test sets up directly (snapshots: tests/support/builders.py),
for example:

    rec = make_recommendation(cluster)  # proposed: raise queue team-b's weight from 1 to 3
    drain = make_recommendation(
        cluster, "drain-node", "node:n1", {"to": "drained"}, findings=[xid], state="approved"
    )
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager
from datetime import UTC, datetime
from typing import Any

from django.utils import timezone

from diagnosis.actions.records.cycles import run_cluster_cycle
from diagnosis.actions.workflow.review import (
    approve_recommendation,
    request_apply,
    request_recommendation,
)
from diagnosis.edge.sim import runtime as sim_runtime
from diagnosis.models import Cluster, ClusterCycle, Finding, Recommendation, Snapshot

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


def make_finding(cluster: Cluster, rule_id: str, subject: str, state: str) -> Finding:
    """A finding of ``cluster`` in ``state``, first and last seen now."""
    now = timezone.now()
    return Finding.objects.create(
        cluster=cluster,
        rule_id=rule_id,
        subject=subject,
        state=state,
        first_seen=now,
        last_seen=now,
    )


def counting_decodes(monkeypatch: Any) -> list[int]:
    """The list, growing as the test goes on, of the snapshots whose document is decoded
    (``Snapshot.load_document``), by id."""
    decoded: list[int] = []
    original = Snapshot.load_document

    def counting(snapshot: Snapshot):
        decoded.append(snapshot.pk)
        return original(snapshot)

    monkeypatch.setattr(Snapshot, "load_document", counting)
    return decoded


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


SEED_START = datetime(2026, 11, 29, 8, 0, tzinfo=UTC)


@contextmanager
def seed_demo_cluster(name: str, step_s: int, *, start: datetime = SEED_START) -> Iterator[Cluster]:
    """A sim cluster ``name`` running the demo's seed scenario (128 x 8 A100, pool a100 under
    spread) from ``start`` (:data:`SEED_START` unless told), ``step_s`` simulated seconds a
    cycle; its simulator is forgotten afterwards."""
    cluster = Cluster.objects.create(
        name=name,
        scheduler_kind="sim",
        metrics_kind="sim",
        scheduler_config=stepped_seed_config(start, step_s),
    )
    try:
        yield cluster
    finally:
        sim_runtime.forget(cluster.name)


def run_cycles(cluster: Cluster, count: int) -> ClusterCycle:
    """``count`` cycles of ``cluster`` (read afresh each time), each asserted ok; the last."""
    for _ in range(count):
        cycle = run_cluster_cycle(Cluster.objects.get(pk=cluster.pk))
        assert cycle.ok, cycle.error
    return cycle


def binpack_proposal(cluster: Cluster) -> Recommendation:
    """The proposed placement-policy change of pool a100 (the seed scenario's binpack)."""
    return Recommendation.objects.get(
        cluster=cluster, kind="placement-policy", target="pool:a100", state="proposed"
    )


def request_approve_apply(
    rec: Recommendation,
    requester: Any,
    approver: Any,
    on_commit: Callable[..., AbstractContextManager[Any]],
) -> Recommendation:
    """``rec`` requested by ``requester``, then approved and applied by ``approver``, the
    on-commit callbacks of both run (``on_commit`` is pytest-django's
    ``django_capture_on_commit_callbacks``); returned as stored after."""
    request_recommendation(rec, requester)
    with on_commit(execute=True):
        approve_recommendation(rec, approver)
    with on_commit(execute=True):
        request_apply(rec, approver)
    rec.refresh_from_db()
    return rec


def applied_spread(
    cluster: Cluster, *, state: str = "applied", **verification: Any
) -> Recommendation:
    """A change to spread (the seed demo pool's setting) recorded as applied at the latest
    cycle, its verification watching from there with 100 fragmented GPUs before it (every later
    cycle has fewer) unless ``verification`` says otherwise (``baseline=0.0``, ``status=...``)."""
    latest = ClusterCycle.objects.filter(cluster=cluster).latest()
    return make_recommendation(
        cluster,
        "placement-policy",
        "pool:a100",
        {"from": "binpack", "to": "spread"},
        state=state,
        applied_at=timezone.now(),
        apply_result={"before": "binpack", "after": "spread", "command": "sim apply ..."},
        verification={
            "status": "watching",
            "since_as_of": latest.as_of.isoformat(),
            "metric": "free_fragmented_gpus",
            "baseline": 100.0,
            "observations": [],
            **verification,
        },
    )
