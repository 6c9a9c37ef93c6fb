"""The autopilot API and pages (diagnosis/api/autopilot.py, diagnosis/pages/autopilot.py): roles
gate every write (an SRE writes, another SRE approves, only an admin turns the kill switch), a
manager or a user without a role reads nothing, bad terms are a 400 naming the field, an edit
needs approval again, the replay and the schema answer. The world of users: tests/support/world.py.
"""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from diagnosis.api.autopilot import ACTIONS
from diagnosis.api.urls import POLICY_ACTIONS
from diagnosis.models import AutopilotSwitch, RemediationPolicy
from tests.support.autopilot import approved_policy
from tests.support.world import logged_in_client

pytestmark = pytest.mark.django_db

POLICIES = "/api/v1/autopilot/policies"
DRAIN = {
    "name": "xid-drain",
    "kind": "drain-node",
    "condition": {"xid_codes": [79, 48]},
    "per_pool_per_hour": 1,
    "pool_out_share": 0.05,
    "per_hour": 3,
    "quiet_start_minute": 9 * 60,
    "quiet_end_minute": 17 * 60,
    "mode": "enforce",
}


def api(user) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def test_an_sre_writes_a_policy_that_awaits_someone_elses_approval(carol, dave) -> None:
    answer = api(carol).post(POLICIES, DRAIN, format="json")

    assert answer.status_code == 201, answer.content
    body = answer.json()
    assert (body["state"], body["written_by"], body["approved_by"]) == ("proposed", "carol", None)
    own = api(carol).post(f"{POLICIES}/{body['id']}/approve", format="json")
    assert own.status_code == 403
    assert "someone other than" in own.json()["detail"]
    approved = api(dave).post(f"{POLICIES}/{body['id']}/approve", format="json")
    assert approved.status_code == 200
    assert (approved.json()["state"], approved.json()["approved_by"]) == ("approved", "dave")
    actions = [a["action"] for a in api(dave).get(f"{POLICIES}/{body['id']}").json()["approvals"]]
    assert actions == ["policy-write", "policy-approve"]


@pytest.mark.parametrize("person", ["bob", "erin", "mallory"])
def test_a_viewer_oncall_or_manager_may_not_write_a_policy(person, make_user, request) -> None:
    user = request.getfixturevalue(person)

    assert api(user).post(POLICIES, DRAIN, format="json").status_code == 403


def test_on_call_may_not_approve_a_drain_policy_alone(carol, erin) -> None:
    policy = api(carol).post(POLICIES, DRAIN, format="json").json()

    assert api(erin).post(f"{POLICIES}/{policy['id']}/approve").status_code == 403


def test_a_manager_and_a_user_without_a_role_read_no_policy(carol, dave, mallory, nobody) -> None:
    policy = approved_policy(carol, dave)
    for user in (mallory, nobody):
        assert api(user).get(POLICIES).json() == []
        assert api(user).get(f"{POLICIES}/{policy.pk}").status_code == 404
        assert api(user).get(f"{POLICIES}/{policy.pk}/replay").status_code == 404


@pytest.mark.parametrize(
    ("change", "field", "words"),
    [
        ({"condition": {"xid_codes": [79, 13]}}, "condition", "not of the catalogue's drain class"),
        ({"kind": "placement-policy"}, "kind", "not a valid choice"),
        ({"pool_out_share": 2}, "pool_out_share", "less than or equal to 1"),
        ({"quiet_end_minute": None}, "quiet_window", "give both its start and its end"),
        ({"clusters": ["nowhere"]}, "clusters", "no cluster named nowhere"),
        ({"condition": {"min_gpus": 3}}, "condition", "not a field of a drain-node condition"),
    ],
)
def test_bad_terms_are_a_400_naming_the_field(carol, change, field, words) -> None:
    answer = api(carol).post(POLICIES, {**DRAIN, **change}, format="json")

    assert answer.status_code == 400
    assert words in str(answer.json()["errors"][field])
    assert answer.json()["detail"].startswith("invalid request")
    assert not RemediationPolicy.objects.exists()


def test_an_edit_is_a_new_version_that_needs_approval_again(carol, dave) -> None:
    policy = approved_policy(carol, dave)
    terms = {k: v for k, v in DRAIN.items() if k != "name"}

    edited = api(dave).put(f"{POLICIES}/{policy.pk}", {**terms, "per_hour": 1}, format="json")

    assert edited.status_code == 200
    body = edited.json()
    assert (body["version"], body["state"], body["approved_by"]) == (2, "proposed", None)
    assert body["written_by"] == "dave"
    assert api(dave).post(f"{POLICIES}/{policy.pk}/approve").status_code == 403
    assert api(carol).post(f"{POLICIES}/{policy.pk}/approve").json()["state"] == "approved"


def test_only_an_admin_turns_the_kill_switch_and_everyone_may_read_it(alice, bob, carol) -> None:
    switch = "/api/v1/autopilot/switch"
    assert api(carol).post(switch, {"stopped": True}, format="json").status_code == 403

    answer = api(alice).post(switch, {"stopped": True, "reason": "incident review"}, format="json")

    assert answer.json() == {"stopped": True, "reason": "incident review"}
    assert api(bob).get(switch).json()["stopped"] is True
    assert AutopilotSwitch.objects.get().changed_by == alice


def test_the_replay_answers_and_refuses_a_bad_period(carol, dave) -> None:
    policy = approved_policy(carol, dave)

    answer = api(carol).get(f"{POLICIES}/{policy.pk}/replay?days=3")
    assert answer.status_code == 200
    assert (answer.json()["days"], answer.json()["would_apply"]) == (3, [])
    assert api(carol).get(f"{POLICIES}/{policy.pk}/replay?days=99").status_code == 400


def test_the_schema_describes_the_autopilot(bob) -> None:
    schema = api(bob).get("/api/v1/schema", HTTP_ACCEPT="application/json").content.decode()

    assert "/api/v1/autopilot/policies/{policy_id}/replay" in schema
    assert "PolicyTerms" in schema


def test_a_proposed_version_is_rejected_with_its_reason_and_only_once(carol, dave) -> None:
    policy = api(carol).post(POLICIES, DRAIN, format="json").json()
    url = f"{POLICIES}/{policy['id']}/reject"

    rejected = api(dave).post(url, {"reason": "too wide"}, format="json")

    assert rejected.status_code == 200
    assert rejected.json()["state"] == "rejected"
    assert rejected.json()["approvals"][-1]["after"] == {"state": "rejected", "reason": "too wide"}
    again = api(dave).post(url, format="json")
    assert again.status_code == 409
    assert "cannot reject a policy that is rejected" in again.json()["detail"]
    too_long = api(dave).post(f"{POLICIES}/{policy['id']}/retire", {"reason": "x" * 501})
    assert list(too_long.json()["errors"]) == ["reason"]


def test_an_approved_policy_is_retired_and_acts_no_more(carol, dave) -> None:
    policy = approved_policy(carol, dave)

    retired = api(carol).post(f"{POLICIES}/{policy.pk}/retire", format="json")

    assert retired.status_code == 200
    policy.refresh_from_db()
    assert policy.state == "retired"


def test_an_unknown_policy_action_is_no_path(carol, dave) -> None:
    policy = approved_policy(carol, dave)

    assert api(carol).post(f"{POLICIES}/{policy.pk}/explode").status_code == 404
    policy.refresh_from_db()
    assert policy.state == "approved"


def test_each_policy_action_is_its_own_operation(bob) -> None:
    schema = api(bob).get("/api/v1/schema", HTTP_ACCEPT="application/json").json()
    prefix = "/api/v1/autopilot/policies/{policy_id}/"
    actions = {
        path.removeprefix(prefix): item["post"]
        for path, item in schema["paths"].items()
        if path.startswith(prefix) and "post" in item
    }

    assert set(POLICY_ACTIONS) == set(ACTIONS) == set(actions)
    assert "requestBody" not in actions["approve"]
    assert "requestBody" in actions["reject"]
    assert {o["operationId"] for o in actions.values()} == {
        f"autopilot_policy_{name}" for name in ACTIONS
    }
    assert all("409" in o["responses"] for o in actions.values())


# -- the pages ------------------------------------------------------------------------------------


def test_the_autopilot_page_lists_policies_and_the_switch(carol, dave, bob) -> None:
    approved_policy(carol, dave)

    html = logged_in_client(bob).get("/autopilot/").content.decode()

    assert "xid-drain" in html
    assert 'id="kill-switch"' in html
    assert "Stop every policy" not in html  # bob is no admin


def test_a_manager_gets_a_404_for_the_autopilot_pages(carol, dave, mallory) -> None:
    policy = approved_policy(carol, dave)
    client = logged_in_client(mallory)

    assert client.get("/autopilot/").status_code == 404
    assert client.get(f"/autopilot/{policy.pk}/").status_code == 404


def test_a_policy_written_on_the_page_is_approved_by_another_on_its_page(carol, dave) -> None:
    form = {
        "name": "gangs",
        "kind": "gang-release",
        "min_gpus": "200",
        "min_hold_minutes": "60",
        "per_pool_per_hour": "1",
        "pool_out_percent": "10",
        "per_hour": "2",
        "quiet_start": "22:00",
        "quiet_end": "06:00",
        "mode": "dry-run",
    }
    written = logged_in_client(carol).post("/autopilot/new/", form)
    policy = RemediationPolicy.objects.get(name="gangs")
    assert written.status_code == 302
    assert policy.condition == {"min_gpus": 200, "min_hold_s": 3600}
    assert (policy.quiet_start_minute, policy.quiet_end_minute) == (22 * 60, 6 * 60)
    assert "Approve</button>" not in logged_in_client(carol).get(written.url).content.decode()

    logged_in_client(dave).post(f"/autopilot/{policy.pk}/approve/")

    policy.refresh_from_db()
    assert (policy.state, policy.approved_by) == ("approved", dave)


def test_a_bad_time_on_the_form_is_a_400_naming_it(carol) -> None:
    form = {
        "name": "x",
        "kind": "drain-node",
        "per_pool_per_hour": "1",
        "pool_out_percent": "10",
        "per_hour": "2",
        "quiet_start": "25:99",
        "quiet_end": "06:00",
        "mode": "dry-run",
    }
    answer = logged_in_client(carol).post("/autopilot/new/", form)

    assert answer.status_code == 400
    assert "Write the time as HH:MM (UTC)." in answer.content.decode()


def test_the_policy_page_shows_the_replay_when_asked(carol, dave, bob) -> None:
    policy = approved_policy(carol, dave)

    html = logged_in_client(bob).get(f"/autopilot/{policy.pk}/?replay=1").content.decode()

    assert "it would have applied 0 changes" in html
    assert "policy-approve" in html


def test_the_kill_switch_page_is_an_admins(alice, carol) -> None:
    assert logged_in_client(carol).post("/autopilot/switch/", {"stopped": "1"}).status_code == 403

    logged_in_client(alice).post("/autopilot/switch/", {"stopped": "1", "reason": "drill"})

    assert AutopilotSwitch.objects.get().stopped is True


def test_the_autopilot_page_in_chinese(carol, dave, bob) -> None:
    approved_policy(carol, dave)

    html = logged_in_client(bob).get("/autopilot/", HTTP_ACCEPT_LANGUAGE="zh-hans").content
    assert "自动驾驶" in html.decode()
