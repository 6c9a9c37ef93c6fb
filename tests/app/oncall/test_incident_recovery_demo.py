"""Issue #32 item 13: the demo shows recovery. The seed scenario (``manage.py demo``; the
simulator, diagnosis/core/simulate/scenarios.py) reports Xid 79 on gpu-100 GPU 3 at 2:00 and
repairs that GPU 30 simulated minutes after someone drains gpu-100. So on the stepped demo
cluster: erin drains from the incident, the repaired GPU makes gpuobs propose putting the node
back (the drain's rollback), carol requests it and dave approves and applies it, the Xid
finding resolves once the node has been back and healthy for the healthy period, and so does the
incident. The Xid 13 on gpu-090 GPU 1 (application-level) resolves with its finding though
nobody acknowledged it.

The browser walk of the same path is tests/app/browser/test_browser_recovery.py."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from diagnosis.actions.oncall.drain import drain_for_incident
from diagnosis.actions.oncall.incidents import resolve_incident_by
from diagnosis.actions.workflow.review import set_cluster_writes
from diagnosis.models import Cluster, Finding, Incident, Recommendation
from tests.support.records import request_approve_apply, run_cycles, seed_demo_cluster

pytestmark = pytest.mark.django_db

STEP_S = 600
TO_THE_XID = 13  # the Xid 79 comes at 2:00, the 12th cycle's snapshot


@pytest.fixture
def demo(alice) -> Iterator[Cluster]:
    with seed_demo_cluster("recovery", STEP_S) as cluster:
        run_cycles(cluster, TO_THE_XID)
        set_cluster_writes(cluster, alice, enabled=True)
        yield cluster


def xid_incident(cluster: Cluster, node: str, index: int) -> Incident:
    return Incident.objects.get(cluster=cluster, node=node, gpu_index=index, source="rule:xid")


def cycles_until(cluster: Cluster, condition, limit: int) -> int:
    """Run cycles until ``condition()`` holds; how many it took (fails past ``limit``)."""
    for number in range(1, limit + 1):
        run_cycles(cluster, 1)
        if condition():
            return number
    pytest.fail(f"not reached in {limit} cycles")


def test_the_repaired_gpu_resolves_its_incident_through_a_resume(
    demo, erin, carol, dave, django_capture_on_commit_callbacks, celery_eager
):
    incident = xid_incident(demo, "gpu-100", 3)
    with django_capture_on_commit_callbacks(execute=True):
        drain = drain_for_incident(incident, erin)
    drain.refresh_from_db()
    assert drain.state == "applied"

    def resume() -> Recommendation | None:
        return drain.rollbacks.first()

    # repaired 30 min after the drain: the next cycle that sees it proposes the resume
    took = cycles_until(demo, lambda: resume() is not None, limit=6)
    assert took >= 3
    incident.refresh_from_db()
    assert incident.state == "mitigating"  # the node is still out: not resolved yet
    assert incident.details["health"]["gpu_health"] == "ok"
    undo = resume()
    assert (undo.state, undo.change["to"], undo.target) == ("proposed", "ready", "node:gpu-100")
    assert incident.history.filter(kind="resume-proposed").exists()

    undo = request_approve_apply(undo, carol, dave, django_capture_on_commit_callbacks)
    assert undo.state == "applied"
    cycles_until(demo, lambda: xid_incident(demo, "gpu-100", 3).state == "resolved", limit=6)

    incident.refresh_from_db()
    assert Finding.objects.get(pk=incident.finding_id).state == "resolved"
    assert incident.resolved_by is None
    assert incident.history.filter(kind="resolved", actor="system:cycle").exists()
    assert drain.rollbacks.count() == 1  # proposed once


def test_a_drained_incident_resolved_by_hand_still_gets_its_resume(
    demo, erin, django_capture_on_commit_callbacks, celery_eager
):
    """erin resolves the incident right after the drain (the GPU "reseated"): the node must not
    stay out for good."""
    incident = xid_incident(demo, "gpu-100", 3)
    with django_capture_on_commit_callbacks(execute=True):
        drain = drain_for_incident(incident, erin)
    resolve_incident_by(xid_incident(demo, "gpu-100", 3), erin, note="GPU reseated")

    cycles_until(demo, lambda: drain.rollbacks.exists(), limit=6)

    undo = drain.rollbacks.get()
    assert (undo.state, undo.change["to"]) == ("proposed", "ready")
    assert xid_incident(demo, "gpu-100", 3).history.filter(kind="resume-proposed").exists()


def test_the_application_level_xid_incident_resolves_with_its_finding_unacknowledged(demo):
    incident = xid_incident(demo, "gpu-090", 1)
    assert incident.state == "open"
    cycles_until(demo, lambda: xid_incident(demo, "gpu-090", 1).state == "resolved", limit=8)
    incident.refresh_from_db()
    assert Finding.objects.get(pk=incident.finding_id).state == "resolved"
    assert incident.acknowledged_at is None
    assert "nobody had to acknowledge" in incident.details["resolution"]
