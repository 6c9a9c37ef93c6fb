"""The Drain button of an incident drains (issue #26.3), on the real simulator: with someone's
rollback of an earlier drain open (``drained → ready``), a drain for the node's new fault
supersedes that resume, visibly, and writes a drain -- never the resume; a pure on-call may do
it alone; while the resume is being applied, the drain is refused with the reason."""

from __future__ import annotations

import pytest

from diagnosis.actions.oncall.drain import drain_for_incident, drain_impact
from diagnosis.actions.workflow.base import WorkflowError
from diagnosis.actions.workflow.review import (
    approve_recommendation,
    request_apply,
    request_rollback,
)
from diagnosis.models import AuditEntry, Incident, Recommendation
from tests.support.records import make_recommendation, run_cycles
from tests.support.world import logged_in_client

pytestmark = [pytest.mark.django_db, pytest.mark.lab("lab-drain", dry_run=False)]


@pytest.fixture
def node(lab) -> str:
    return run_cycles(lab, 1).cluster.snapshots.latest("as_of").load_document()["nodes"][0]["name"]


@pytest.fixture
def open_resume(lab, node, carol, erin, run_tasks) -> Recommendation:
    """An applied drain of ``node`` (erin's) and carol's open request to put it back."""
    drain = make_recommendation(lab, "drain-node", f"node:{node}", {"to": "drained"})
    run_tasks(approve_recommendation, drain, erin)
    drain = run_tasks(request_apply, drain, erin)
    assert drain.state == "applied", drain.status_message
    return request_rollback(drain, carol)


@pytest.fixture
def incident(lab, node) -> Incident:
    return Incident.objects.create(
        cluster=lab, node=node, gpu_index=0, xid_code=79, fingerprint=f"{node}/0/79"
    )


def node_state(lab, node: str) -> str:
    document = run_cycles(lab, 1).cluster.snapshots.latest("as_of").load_document()
    return next(n["state"] for n in document["nodes"] if n["name"] == node)


def test_the_drain_of_an_incident_with_an_open_resume_drains(
    lab, node, open_resume, incident, erin, run_tasks
) -> None:
    rec = run_tasks(drain_for_incident, incident, erin)

    assert rec.pk != open_resume.pk
    assert (rec.rollback_of_id, rec.change["to"]) == (None, "drained")
    assert "resume" not in (rec.apply_result or rec.dry_run_result).get("command", "")
    assert rec.approved_by == erin  # a pure on-call, alone
    assert node_state(lab, node) != "ready"


def test_the_superseded_resume_says_why_and_is_audited(open_resume, incident, erin, run_tasks):
    run_tasks(drain_for_incident, incident, erin)

    open_resume.refresh_from_db()
    assert open_resume.state == "superseded"
    assert f"incident {incident.pk}" in open_resume.status_message
    assert AuditEntry.objects.filter(
        recommendation=open_resume, actor="erin", action="superseded-by-drain"
    ).exists()


def test_a_resume_being_applied_refuses_the_drain_with_the_reason(open_resume, incident, erin):
    Recommendation.objects.filter(pk=open_resume.pk).update(state="applying")

    with pytest.raises(WorkflowError, match="back in service right now"):
        drain_for_incident(incident, erin)


def test_the_incident_page_drain_with_an_open_resume_is_not_refused(
    lab, open_resume, incident, erin, celery_eager, django_capture_on_commit_callbacks
) -> None:
    url = f"/clusters/{lab.name}/incidents/{incident.pk}/drain/"
    client = logged_in_client(erin)
    shown = drain_impact(lab, incident)["job_ids"]  # what the confirmation shows
    with django_capture_on_commit_callbacks(execute=True):
        answer = client.post(url, {"job": shown}, follow=True)

    incident.refresh_from_db()
    assert incident.drain.change["to"] == "drained"
    assert f"Drain of {incident.node}: Apply sent to the scheduler" in answer.content.decode()
    assert '"kind": "drain-node"' in incident.drain.apply_result["command"]


def test_the_drain_confirmation_shows_the_exact_command(lab, incident, erin) -> None:
    page = logged_in_client(erin).get(f"/clusters/{lab.name}/incidents/{incident.pk}/drain/")

    html = page.content.decode()
    assert 'id="drain-command"' in html
    assert "sim apply" in html
    assert "drain-node" in html
    assert f"node:{incident.node}" in html
