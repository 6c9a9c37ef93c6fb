"""The approver queue (issue #20.4): a requested change shows as "awaiting my approval" to the
people who may approve it -- on the recommendations page and through the API's
``awaiting=me`` -- and never to the requester; and requesting it tells the eligible approvers
through the outbound channel (a ``GpuobsApprovalRequested`` alert in a real Alertmanager, with
their names in its ``approvers`` label), resolved once someone approves it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from diagnosis.actions.enqueue import notify_on_commit
from diagnosis.actions.workflow.review import (
    approve_recommendation,
    eligible_approvers,
    request_recommendation,
)
from tests.support.alertmanager_server import AlertmanagerServer, started_alertmanager
from tests.support.processes import wait_until
from tests.support.records import make_recommendation
from tests.support.world import logged_in_client

pytestmark = pytest.mark.django_db


@pytest.fixture
def requested(make_cluster, carol):
    """A queue-weight change carol requested, and one nobody requested yet."""
    cluster = make_cluster("approvals")
    asked = make_recommendation(cluster, target="queue:team-b")
    make_recommendation(cluster, target="queue:team-c")
    return request_recommendation(asked, carol)


def listed(client, cluster_name: str) -> str:
    return client.get(f"/clusters/{cluster_name}/recommendations/?state=awaiting").content.decode()


def test_the_page_lists_a_request_as_awaiting_another_sres_approval(requested, dave) -> None:
    html = listed(logged_in_client(dave), requested.cluster.name)

    assert "1 requested change awaits your approval" in html
    assert "queue:team-b" in html
    assert "queue:team-c" not in html


def test_the_requester_does_not_see_their_own_request_awaiting(requested, carol) -> None:
    html = listed(logged_in_client(carol), requested.cluster.name)

    assert 'id="awaiting-approval"' not in html
    assert "queue:team-b" not in html


def test_the_api_filters_what_awaits_the_callers_approval(requested, carol, dave, bob) -> None:
    def ids(user) -> list[int]:
        answer = logged_in_client(user).get("/api/v1/recommendations/?awaiting=me")
        assert answer.status_code == 200
        body = answer.json()
        return [r["id"] for r in body.get("results", body)]

    assert (ids(dave), ids(carol), ids(bob)) == ([requested.pk], [], [])


def test_the_eligible_approvers_are_the_other_sres_and_admins(requested, alice, dave, erin) -> None:
    assert [p.get_username() for p in eligible_approvers(requested)] == ["alice", "dave"]


@pytest.fixture
def alertmanager(tmp_path: Path) -> Iterator[AlertmanagerServer]:
    with started_alertmanager(tmp_path / "alertmanager") as server:
        yield server


@pytest.mark.alertmanager
def test_a_request_notifies_the_approvers_through_alertmanager(
    settings,
    alertmanager,
    celery_eager,
    django_capture_on_commit_callbacks,
    make_cluster,
    alice,
    carol,
    dave,
) -> None:
    settings.GPUOBS_ALERTMANAGER_URL = alertmanager.url
    settings.GPUOBS_ALERTMANAGER_TIMEOUT_SECONDS = 2
    rec = make_recommendation(make_cluster("approvals-am"), target="queue:team-b")

    with django_capture_on_commit_callbacks(execute=True):
        request_recommendation(rec, carol)

    def approval_alerts() -> list[dict]:
        return [
            a
            for a in alertmanager.alerts()
            if a["labels"].get("alertname") == "GpuobsApprovalRequested"
        ]

    (alert,) = wait_until(approval_alerts, what="the approval alert in Alertmanager")
    assert alert["labels"]["approvers"] == "alice,dave"
    assert alert["labels"]["requested_by"] == "carol"
    assert alert["labels"]["recommendation"] == str(rec.pk)
    assert alert["generatorURL"].endswith(f"/recommendations/{rec.pk}/")
    assert alert["status"]["state"] == "active"

    with django_capture_on_commit_callbacks(execute=True):
        approve_recommendation(rec, dave)
    with django_capture_on_commit_callbacks(execute=True):
        notify_on_commit(rec.cluster_id)  # the next cycle's notify step

    assert wait_until(lambda: not approval_alerts(), what="the approval alert resolved")
