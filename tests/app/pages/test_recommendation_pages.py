"""The recommendation pages: the list (with the write switch), one recommendation (change,
dry-run diff, plotly impact, audit trail, the buttons its reader may press), the form posts,
and the admin's write switch."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth.models import Permission
from django.test import Client

from diagnosis.actions.workflow.review import (
    approve_recommendation,
    reject_recommendation,
    request_recommendation,
)
from diagnosis.models import AuditEntry, Cluster, Recommendation
from tests.support.records import make_recommendation
from tests.support.world import logged_in_client

pytestmark = [pytest.mark.django_db, pytest.mark.lab("lab-pages", dry_run=False)]

IMPACT = {
    "method": "simulated",
    "verdict": "improves",
    "headline": "predicted: wait p95 of queue:team-b: 2.0 h → 1.1 h",
    "summary": "Raise queue team-b's weight from 1 to 3: it holds 4 of 32 GPUs.",
    "seeds": [0, 1, 2],
    "horizon_s": 10800,
    "metrics": [
        {
            "metric": "queue_wait_p95_s",
            "label": "wait p95",
            "unit": "s",
            "subject": "queue:team-b",
            "current": {"mean": 7200.0, "min": 7000.0, "max": 7400.0, "stdev": 200.0},
            "proposed": {"mean": 3960.0, "min": 3800.0, "max": 4100.0, "stdev": 150.0},
            "delta": {"mean": -3240.0, "min": -3300.0, "max": -3200.0, "stdev": 50.0},
            "verdict": "improves",
        }
    ],
    "harm": [],
    "tradeoffs": ["wait p95 of queue:team-a: 20 min → 35 min (above its fair share)"],
}


@pytest.fixture
def rec(lab) -> Recommendation:
    return make_recommendation(
        lab, "queue-weight", "queue:team-b", {"from": 1, "to": 3}, impact=IMPACT
    )


def list_url(cluster: Cluster) -> str:
    return f"/clusters/{cluster.name}/recommendations/"


def detail_url(rec: Recommendation) -> str:
    return f"/clusters/{rec.cluster.name}/recommendations/{rec.pk}/"


def buttons(html: str) -> list[str]:
    return re.findall(r'id="action-([a-z-]+)"', html)


@pytest.fixture
def press(celery_eager, django_capture_on_commit_callbacks):
    def post(user, rec: Recommendation, action: str, **form):
        with django_capture_on_commit_callbacks(execute=True):
            return logged_in_client(user).post(f"{detail_url(rec)}{action}/", form)

    return post


# -- reading -------------------------------------------------------------------------------------


def test_the_list_needs_a_login(rec) -> None:
    response = Client().get(list_url(rec.cluster))

    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/")


def test_the_list_shows_open_recommendations_and_the_switch(rec, bob) -> None:
    html = logged_in_client(bob).get(list_url(rec.cluster)).content.decode()

    assert detail_url(rec) in html
    assert "Raise queue team-b" in html
    assert "Only an admin turns writes on or off." in html
    assert 'id="enable-writes"' not in html
    assert 'id="disable-writes"' not in html


def test_the_list_filters_by_state(rec, bob) -> None:
    Recommendation.objects.filter(pk=rec.pk).update(state="rejected")
    client = logged_in_client(bob)

    assert detail_url(rec) not in client.get(list_url(rec.cluster)).content.decode()
    assert detail_url(rec) in client.get(list_url(rec.cluster) + "?state=closed").content.decode()


def test_no_role_gets_404(rec, nobody) -> None:
    client = logged_in_client(nobody)

    assert client.get(list_url(rec.cluster)).status_code == 404
    assert client.get(detail_url(rec)).status_code == 404


def test_a_recommendation_of_another_cluster_is_404(rec, make_cluster, bob) -> None:
    make_cluster("other")

    response = logged_in_client(bob).get(f"/clusters/other/recommendations/{rec.pk}/")

    assert response.status_code == 404


def test_the_detail_shows_change_impact_chart_and_tradeoffs(rec, bob) -> None:
    html = logged_in_client(bob).get(detail_url(rec)).content.decode()

    assert 'id="proposed-diff"' in html
    assert 'data-figure="impact-chart-figure"' in html
    assert '<td class="num">2.0 h</td><td class="num">1.1 h</td>' in html  # now, proposed
    assert "above its fair share" in html
    assert buttons(html) == []  # a viewer presses nothing


def test_the_detail_shows_the_dry_run_diff_and_the_audit_trail(
    rec, carol, dave, celery_eager, django_capture_on_commit_callbacks
) -> None:
    request_recommendation(rec, carol)
    with django_capture_on_commit_callbacks(execute=True):
        approve_recommendation(rec, dave)

    html = logged_in_client(carol).get(detail_url(rec)).content.decode()

    assert 'id="dry-run-command"' in html
    assert "sim apply {&quot;kind&quot;: &quot;queue-weight&quot;" in html
    audit = html[html.index('id="audit"') :]
    assert audit.index("request") < audit.index("approve") < audit.index("dry-run")


def test_the_detail_page_costs_a_fixed_number_of_queries(
    rec, carol, dave, bob, django_assert_max_num_queries
) -> None:
    request_recommendation(rec, carol)
    client = logged_in_client(bob)
    client.get(detail_url(rec))  # warm the session

    with django_assert_max_num_queries(12):
        client.get(detail_url(rec))


# -- buttons -------------------------------------------------------------------------------------


def test_an_sre_may_request_what_nobody_asked_for(rec, carol) -> None:
    html = logged_in_client(carol).get(detail_url(rec)).content.decode()

    assert buttons(html) == ["request", "dry-run", "reject"]


def test_the_requester_sees_no_approve_but_another_sre_does(rec, carol, dave) -> None:
    request_recommendation(rec, carol)

    mine = buttons(logged_in_client(carol).get(detail_url(rec)).content.decode())
    theirs = buttons(logged_in_client(dave).get(detail_url(rec)).content.decode())

    assert "approve" not in mine
    assert theirs == ["approve", "dry-run", "reject"]


def test_an_approved_change_offers_apply_and_says_when_writes_are_off(
    rec, carol, dave, celery_eager, django_capture_on_commit_callbacks
) -> None:
    Cluster.objects.filter(pk=rec.cluster_id).update(dry_run=True)
    request_recommendation(rec, carol)
    with django_capture_on_commit_callbacks(execute=True):
        approve_recommendation(rec, dave)

    html = logged_in_client(dave).get(detail_url(rec)).content.decode()

    assert buttons(html) == ["apply", "dry-run", "reject"]
    assert "writes are off for this cluster: a dry run only" in html


# -- posting -------------------------------------------------------------------------------------


def test_pressing_approve_approves_and_comes_back(rec, carol, dave, press) -> None:
    request_recommendation(rec, carol)

    response = press(dave, rec, "approve")

    assert response.status_code == 302
    assert response["Location"] == detail_url(rec)
    rec.refresh_from_db()
    assert (rec.state, rec.approved_by) == ("approved", dave)


def test_a_viewer_pressing_approve_gets_403(rec, carol, bob, press) -> None:
    request_recommendation(rec, carol)

    assert press(bob, rec, "approve").status_code == 403
    rec.refresh_from_db()
    assert rec.state == "proposed"


def test_a_forbidden_state_comes_back_with_the_reason(rec, carol, dave, press) -> None:
    reject_recommendation(rec, carol)

    page = logged_in_client(dave).post(f"{detail_url(rec)}apply/", follow=True)

    assert page.redirect_chain == [(detail_url(rec), 302)]
    assert "cannot apply a recommendation that is rejected" in page.content.decode()


def test_reject_takes_a_reason(rec, carol, press) -> None:
    press(carol, rec, "reject", reason="not now")

    rec.refresh_from_db()
    assert (rec.state, rec.status_message) == ("rejected", "not now")


def test_the_whole_loop_by_buttons(rec, lab, carol, dave, press) -> None:
    press(carol, rec, "request")
    press(dave, rec, "approve")
    press(dave, rec, "apply")

    rec.refresh_from_db()
    assert rec.state == "applied"
    html = logged_in_client(dave).get(detail_url(rec)).content.decode()
    assert 'id="applied-command"' in html
    assert buttons(html) == ["rollback"]


def test_an_unknown_action_is_404(rec, carol) -> None:
    assert logged_in_client(carol).post(f"{detail_url(rec)}explode/").status_code == 404


def test_actions_take_only_post(rec, carol) -> None:
    assert logged_in_client(carol).get(f"{detail_url(rec)}approve/").status_code == 405


# -- the write switch ----------------------------------------------------------------------------


def test_an_admin_turns_writes_on_from_the_list(make_cluster, alice, carol) -> None:
    cluster = make_cluster("east")
    html = logged_in_client(alice).get(list_url(cluster)).content.decode()
    assert 'id="enable-writes"' in html

    refused = logged_in_client(carol).post("/clusters/east/writes/", {"enabled": "on"})
    confirm = {"enabled": "on", "confirm": "yes"}
    allowed = logged_in_client(alice).post("/clusters/east/writes/", confirm)

    assert refused.status_code == 403
    assert allowed.status_code == 302
    cluster.refresh_from_db()
    assert cluster.dry_run is False


def test_turning_writes_on_asks_first_naming_what_becomes_writable(make_cluster, alice) -> None:
    cluster = make_cluster("east", scheduler_kind="sim")
    approved = make_recommendation(cluster, state="approved")

    asked = logged_in_client(alice).post("/clusters/east/writes/", {"enabled": "on"})

    html = asked.content.decode()
    assert 'id="writes-confirm"' in html
    assert f"#{approved.pk} queue-weight queue:team-b" in html
    cluster.refresh_from_db()
    assert cluster.dry_run is True


def test_after_turning_writes_on_the_admin_lands_back_on_the_change(make_cluster, alice) -> None:
    cluster = make_cluster("east")
    rec = make_recommendation(cluster, state="approved")
    page = f"/clusters/east/recommendations/{rec.pk}/"
    assert 'id="enable-writes-here"' in logged_in_client(alice).get(page).content.decode()

    landed = logged_in_client(alice).post(
        "/clusters/east/writes/", {"enabled": "on", "confirm": "yes", "next": page}
    )

    assert landed["Location"] == page


def test_a_foreign_next_lands_on_the_list(make_cluster, alice) -> None:
    make_cluster("east")
    body = {"enabled": "on", "confirm": "yes", "next": "https://evil.example/"}

    landed = logged_in_client(alice).post("/clusters/east/writes/", body)

    assert landed["Location"] == "/clusters/east/recommendations/"


def test_the_admin_site_keeps_the_switch_for_admins(make_cluster, make_user, alice) -> None:
    cluster = make_cluster("east")
    staff = make_user("sam", staff=True, roles=("sre",))
    staff.user_permissions.add(
        *Permission.objects.filter(codename__in=["change_cluster", "view_cluster"])
    )
    form = {
        "name": "east",
        "scheduler_kind": "sim",
        "scheduler_config": "{}",
        "metrics_kind": "sim",
        "metrics_config": "{}",
        "enabled": "on",
        "status": "unknown",
    }
    url = f"/admin/diagnosis/cluster/{cluster.pk}/change/"

    page = logged_in_client(staff).get(url).content.decode()
    logged_in_client(staff).post(url, form)  # dry_run is not in the form: read-only for sam
    cluster.refresh_from_db()
    assert 'name="dry_run"' not in page
    assert cluster.dry_run is True

    response = logged_in_client(alice).post(url, form)  # the box left unticked: writes on
    cluster.refresh_from_db()
    assert response.status_code == 302
    assert cluster.dry_run is False
    entry = AuditEntry.objects.get(cluster=cluster)
    assert (entry.actor, entry.action) == ("alice", "writes-enabled")
