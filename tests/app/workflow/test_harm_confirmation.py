"""A change predicted to harm is approved only with the harm confirmed (issue #26.5): the API
answers 409 naming the harm without ``confirm_harm``, nothing written; with it, the approval's
audit row records the harm; the page's Approve leads to a confirm step that shows the harm."""

from __future__ import annotations

from html import escape

import pytest

from diagnosis.actions.workflow.review import request_recommendation
from diagnosis.models import AuditEntry, Recommendation
from tests.support.records import make_recommendation
from tests.support.world import logged_in_client

pytestmark = pytest.mark.django_db

HARM = "hpo's share 44.2% → 45.1% against a fair share of 40.2%"


@pytest.fixture
def harmful(lab, carol) -> Recommendation:
    rec = make_recommendation(
        lab,
        "placement-policy",
        "pool:a100",
        {"from": "spread", "to": "binpack"},
        impact={"verdict": "harms", "harm": [HARM], "summary": "Binpack pool a100."},
    )
    request_recommendation(rec, carol)
    return rec


def approve_api(user, rec: Recommendation, body: dict | None = None):
    return logged_in_client(user).post(
        f"/api/recommendations/{rec.pk}/approve/", body or {}, content_type="application/json"
    )


def test_the_api_refuses_an_unconfirmed_harm_with_409_naming_it(harmful, dave) -> None:
    answer = approve_api(dave, harmful)

    assert answer.status_code == 409
    assert answer.json()["harm"] == [HARM]
    assert HARM in answer.json()["detail"]
    harmful.refresh_from_db()
    assert (harmful.state, harmful.approved_by) == ("proposed", None)
    assert not AuditEntry.objects.filter(recommendation=harmful, action="approve").exists()


def test_a_confirmed_harm_is_approved_and_the_audit_row_names_it(harmful, dave) -> None:
    answer = approve_api(dave, harmful, {"confirm_harm": True})

    assert answer.status_code == 200
    assert answer.json()["state"] == "approved"
    row = AuditEntry.objects.get(recommendation=harmful, action="approve")
    assert row.after["harm_confirmed"] == [HARM]


def test_a_bad_confirm_flag_is_a_400(harmful, dave) -> None:
    assert approve_api(dave, harmful, {"confirm_harm": "perhaps"}).status_code == 400


def test_the_pages_approve_asks_again_showing_the_harm(harmful, dave) -> None:
    client = logged_in_client(dave)
    url = f"/clusters/{harmful.cluster.name}/recommendations/{harmful.pk}/"

    asked = client.post(url + "approve/", follow=True).content.decode()
    harmful.refresh_from_db()
    state_when_asked = harmful.state
    client.post(url + "approve/", {"confirm_harm": "on"})

    harmful.refresh_from_db()
    assert 'id="confirm-harm"' in asked
    assert escape(HARM) in asked
    assert state_when_asked == "proposed"
    assert harmful.state == "approved"
