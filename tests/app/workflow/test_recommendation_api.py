"""The recommendations API (/api/recommendations/) and the write switch
(/api/v1/clusters/{cluster}/writes): who reads what, the workflow's actions with 403 by role and
409 by state, token and session (CSRF) authentication, bad input named."""

from __future__ import annotations

import pytest
from django.test import Client
from rest_framework.authtoken.models import Token

from diagnosis.models import AuditEntry, Recommendation
from tests.support.records import make_recommendation
from tests.support.world import logged_in_client

pytestmark = [pytest.mark.django_db, pytest.mark.lab("lab-api", dry_run=False)]

LIST = "/api/recommendations/"


@pytest.fixture
def rec(lab) -> Recommendation:
    return make_recommendation(
        lab,
        "queue-weight",
        "queue:team-b",
        {"from": 1, "to": 3},
        impact={"summary": "Raise queue team-b's weight from 1 to 3.", "verdict": "improves"},
    )


@pytest.fixture
def post(celery_eager, django_capture_on_commit_callbacks):
    """POST as a user, running what the action sends on commit in-process."""

    def send(user, url: str, body: dict | None = None, client: Client | None = None):
        client = client or logged_in_client(user)
        with django_capture_on_commit_callbacks(execute=True):
            return client.post(url, body or {}, content_type="application/json")

    return send


def url(rec: Recommendation, action: str = "") -> str:
    return f"{LIST}{rec.pk}/" + (f"{action}/" if action else "")


# -- reading -------------------------------------------------------------------------------------


def test_anonymous_callers_are_refused(rec) -> None:
    assert Client().get(LIST).status_code == 401


def test_a_viewer_lists_and_reads_one_with_its_audit_trail(rec, bob) -> None:
    client = logged_in_client(bob)

    listed = client.get(LIST).json()
    one = client.get(url(rec)).json()

    assert [r["target"] for r in listed["results"]] == ["queue:team-b"]
    assert listed["results"][0]["summary"] == "Raise queue team-b's weight from 1 to 3."
    assert (one["cluster"], one["state"], one["audit"]) == ("lab-api", "proposed", [])


def test_no_role_and_a_tenant_manager_see_no_recommendation(rec, nobody, mallory) -> None:
    for user in (nobody, mallory):
        client = logged_in_client(user)
        assert client.get(LIST).json()["results"] == []
        assert client.get(url(rec)).status_code == 404


def test_the_list_filters_by_cluster_state_and_kind(rec, make_cluster, bob) -> None:
    other = make_cluster("other")
    make_recommendation(other, "drain-node", "node:n1", {"to": "drained"})
    client = logged_in_client(bob)

    def targets(query: str) -> list[str]:
        return sorted(r["target"] for r in client.get(LIST + query).json()["results"])

    assert targets("?cluster=other") == ["node:n1"]
    assert targets("?kind=queue-weight") == ["queue:team-b"]
    assert targets("?state=approved") == []
    assert targets("") == ["node:n1", "queue:team-b"]


def test_a_bad_filter_is_a_400_naming_it(rec, bob) -> None:
    response = logged_in_client(bob).get(LIST + "?state=done")

    assert response.status_code == 400
    assert "state" in response.json()["errors"]


# -- the workflow --------------------------------------------------------------------------------


def test_request_approve_apply_through_the_api(rec, lab, carol, dave, post) -> None:
    requested = post(carol, url(rec, "request")).json()
    approved = post(dave, url(rec, "approve")).json()
    sent = post(dave, url(rec, "apply")).json()
    applied = logged_in_client(dave).get(url(rec)).json()

    assert requested["requested_by"] == "carol"
    assert approved["state"] == "approved"
    assert sent["state"] == "applying"  # the answer comes before the actuate task has run
    assert applied["state"] == "applied"
    assert applied["dry_run_result"]["before"] == 1.0
    assert applied["apply_result"]["after"] == 3
    assert [e["action"] for e in applied["audit"]][-2:] == ["apply-requested", "apply"]


def test_a_viewer_gets_403_for_every_action(rec, bob, post) -> None:
    for action in ("request", "approve", "reject", "dry-run", "apply", "rollback"):
        assert post(bob, url(rec, action)).status_code == 403, action
    assert not AuditEntry.objects.exists()


def test_approving_ones_own_request_is_403(rec, carol, post) -> None:
    post(carol, url(rec, "request"))

    response = post(carol, url(rec, "approve"))

    assert response.status_code == 403
    assert "someone other than" in response.json()["detail"]


def test_an_action_the_state_forbids_is_409_with_the_reason(rec, carol, dave, post) -> None:
    post(carol, url(rec, "request"))
    post(dave, url(rec, "approve"))

    response = post(dave, url(rec, "approve"))

    assert response.status_code == 409
    assert "approved" in response.json()["detail"]


def test_reject_keeps_the_reason(rec, carol, post) -> None:
    response = post(carol, url(rec, "reject"), {"reason": "team-b runs fine"})

    assert response.json()["state"] == "rejected"
    assert response.json()["status_message"] == "team-b runs fine"


def test_a_reason_too_long_is_a_400(rec, carol, post) -> None:
    response = post(carol, url(rec, "reject"), {"reason": "x" * 2001})

    assert response.status_code == 400
    assert "reason" in response.json()["errors"]


def test_rollback_answers_201_with_the_undoing_recommendation(rec, carol, dave, post) -> None:
    post(carol, url(rec, "request"))
    post(dave, url(rec, "approve"))
    post(dave, url(rec, "apply"))

    response = post(carol, url(rec, "rollback"))

    assert response.status_code == 201
    undo = logged_in_client(carol).get(f"{LIST}{response.json()['id']}/").json()
    assert (undo["rollback_of"], undo["state"], undo["change"]) == (
        rec.pk,
        "proposed",  # requested by carol; someone else approves it (issue #12)
        {"from": 3, "to": 1.0},
    )
    assert post(carol, url(rec)).status_code == 405  # the detail itself takes no POST


def test_a_token_authenticates_a_machine(rec, dave) -> None:
    token = Token.objects.create(user=dave)

    response = Client().get(LIST, HTTP_AUTHORIZATION=f"Token {token.key}")

    assert response.status_code == 200


def test_the_browser_session_needs_its_csrf_token(rec, carol) -> None:
    client = Client(enforce_csrf_checks=True)
    client.force_login(carol)

    response = client.post(url(rec, "request"))

    assert response.status_code == 403
    assert "CSRF" in response.json()["detail"]


# -- the write switch ----------------------------------------------------------------------------

WRITES = "/api/v1/clusters/{}/writes"


def test_anyone_who_reads_the_cluster_sees_the_switch(make_cluster, bob) -> None:
    make_cluster("east")

    assert logged_in_client(bob).get(WRITES.format("east")).json() == {
        "cluster": "east",
        "enabled": False,
    }


def test_only_an_admin_turns_writes_on(make_cluster, carol, alice, post) -> None:
    cluster = make_cluster("east")

    refused = post(carol, WRITES.format("east"), {"enabled": True})
    allowed = post(alice, WRITES.format("east"), {"enabled": True})

    assert refused.status_code == 403
    assert allowed.json() == {"cluster": "east", "enabled": True}
    cluster.refresh_from_db()
    assert cluster.dry_run is False
    assert AuditEntry.objects.get(cluster=cluster).action == "writes-enabled"


def test_the_switch_needs_a_boolean(make_cluster, alice, post) -> None:
    make_cluster("east")

    response = post(alice, WRITES.format("east"), {"enabled": "maybe"})

    assert response.status_code == 400
    assert "enabled" in response.json()["errors"]


def test_a_viewer_may_not_re_check_an_apply(lab, bob, post) -> None:
    applying = make_recommendation(lab, state="applying", apply_key="k1")
    response = post(bob, url(applying, "re-check"))
    assert response.status_code == 403
    assert not AuditEntry.objects.filter(recommendation=applying).exists()
