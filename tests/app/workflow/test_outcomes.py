"""Every workflow step says what happened (issue #26.2): a dry run the scheduler refused says
refused, with the scheduler's reason, on the page and in the API's ``outcome``; an accepted one
names the command; an apply says applied with the command; the badge says "Requested" once
someone asked for the change. Transactional: the dry run and the apply that a step sends on
commit run inside the request, as in the embedded mode, before its answer is written."""

from __future__ import annotations

import pytest

from diagnosis.models import Recommendation
from tests.support.records import make_recommendation
from tests.support.world import logged_in_client

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.lab("lab-outcomes", dry_run=False),
]


@pytest.fixture
def missing_queue(lab) -> Recommendation:
    return make_recommendation(lab, "queue-weight", "queue:no-such-queue", {"from": 1, "to": 3})


@pytest.fixture
def good(lab) -> Recommendation:
    return make_recommendation(lab, "queue-weight", "queue:team-b", {"from": 1, "to": 3})


@pytest.fixture
def post(celery_eager):
    def send(user, rec: Recommendation, action: str):
        return logged_in_client(user).post(
            f"/api/recommendations/{rec.pk}/{action}/", {}, content_type="application/json"
        )

    return send


@pytest.fixture
def press(celery_eager):
    """A workflow button on the page; the page it lands on, as text."""

    def send(user, rec: Recommendation, action: str) -> str:
        answer = logged_in_client(user).post(
            f"/clusters/{rec.cluster.name}/recommendations/{rec.pk}/{action}/", follow=True
        )
        assert answer.status_code == 200
        return answer.content.decode()

    return send


def test_a_refused_dry_run_says_refused_with_the_schedulers_reason_in_the_api(
    missing_queue, carol, post
) -> None:
    answer = post(carol, missing_queue, "dry-run")

    assert answer.status_code == 200
    outcome = answer.json()["outcome"]
    assert outcome["kind"] == "refused"
    assert "no-such-queue" in outcome["message"]


def test_an_approval_whose_dry_run_is_refused_says_so_on_the_page(
    missing_queue, carol, dave, post, press
) -> None:
    post(carol, missing_queue, "request")

    page = press(dave, missing_queue, "approve")

    assert "The scheduler refused the dry run" in page
    assert "no-such-queue" in page
    assert "a dry run was sent" not in page


def test_an_accepted_dry_run_names_the_command(good, carol, post) -> None:
    outcome = post(carol, good, "dry-run").json()["outcome"]

    assert outcome["kind"] == "accepted"
    assert "sim apply" in outcome["message"]


def test_an_apply_says_applied_with_the_command(good, carol, dave, post) -> None:
    post(carol, good, "request")
    post(dave, good, "approve")

    answer = post(dave, good, "apply").json()

    assert (answer["state"], answer["outcome"]["kind"]) == ("applied", "applied")
    assert answer["apply_result"]["command"] in answer["outcome"]["message"]


def test_the_badge_says_requested_once_someone_asked(good, carol, press) -> None:
    page = press(carol, good, "request")

    assert 'id="rec-state">Requested<' in page
