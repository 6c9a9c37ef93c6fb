"""The impact on today's numbers (issue #26.4): approving a change estimates its impact again on
the cluster's latest snapshot (the ``impact`` queue; the page shows the figures' snapshot time,
and "re-estimating" while it runs); an estimate that differs materially from the one approved
withdraws the approval and asks again; one sent is not sent again while it runs (bounded)."""

from __future__ import annotations

import pytest

from diagnosis.actions.workflow.impact import request_reestimate
from diagnosis.actions.workflow.review import approve_recommendation, request_recommendation
from diagnosis.core.recommend.impact import PENDING
from diagnosis.edge.collection import collect_snapshot
from diagnosis.models import AuditEntry, Recommendation, Snapshot
from diagnosis.tasks import estimate_impact
from tests.support.records import make_recommendation, run_cycles
from tests.support.world import logged_in_client

pytestmark = pytest.mark.django_db

PLAN = {"changes": [{"type": "SetQueueWeight", "queue": "team-b", "weight": 3.0}]}


@pytest.fixture
def estimated(lab, carol) -> Recommendation:
    """A queue-weight change estimated on the lab's first snapshot, requested by carol; the
    simulator has been read once more since (a newer stored snapshot)."""
    first = run_cycles(lab, 1)
    rec = make_recommendation(
        lab, impact={"method": "pending", "verdict": PENDING, "plan": PLAN, "stake_gpu_h": 1.0}
    )
    estimate_impact(rec.pk)
    Snapshot.store(lab, collect_snapshot(lab, previous_as_of=first.as_of))
    request_recommendation(rec, carol)
    rec.refresh_from_db()
    return rec


def latest_as_of(rec: Recommendation) -> str:
    return Snapshot.objects.filter(cluster=rec.cluster).latest("as_of").as_of.isoformat()


def test_approve_estimates_the_impact_again_on_the_latest_snapshot(estimated, dave, run_tasks):
    first = estimated.impact["estimate"]["snapshot_as_of"]

    rec = run_tasks(approve_recommendation, estimated, dave)

    assert first < latest_as_of(rec)
    assert rec.impact["estimate"]["snapshot_as_of"] == latest_as_of(rec)
    assert "reestimating" not in rec.impact
    assert rec.state == "approved"


def test_a_materially_different_estimate_withdraws_the_approval(estimated, dave, run_tasks):
    # the estimate the approver saw said something today's replay never says
    Recommendation.objects.filter(pk=estimated.pk).update(
        impact={**estimated.impact, "verdict": "estimated on an older snapshot"}
    )

    rec = run_tasks(approve_recommendation, estimated, dave)

    assert rec.state == "proposed"
    assert rec.approved_by is None
    assert rec.requested_by is not None
    assert rec.status_message.startswith("approval withdrawn: re-estimated on the snapshot of")
    assert AuditEntry.objects.filter(
        recommendation=rec, actor="system:impact", action="approval-withdrawn-estimate-changed"
    ).exists()


def test_one_re_estimate_is_in_flight_at_a_time(estimated, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=False) as sent:
        first = request_reestimate(estimated)
        again = request_reestimate(estimated)

    assert (first, again, len(sent)) == (True, False, 1)


def test_the_page_shows_the_figures_snapshot_time_and_re_estimating(
    estimated, dave, django_capture_on_commit_callbacks
) -> None:
    with django_capture_on_commit_callbacks(execute=False):  # the re-estimate still to run
        approve_recommendation(estimated, dave)

    page = logged_in_client(dave).get(
        f"/clusters/{estimated.cluster.name}/recommendations/{estimated.pk}/"
    )

    html = page.content.decode()
    assert 'id="impact-as-of"' in html
    assert estimated.impact["estimate"]["snapshot_as_of"][:16].replace("T", " ") in html
    assert 'id="impact-reestimating"' in html
