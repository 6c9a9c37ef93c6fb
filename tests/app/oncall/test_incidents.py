"""Issue #16: on-call's incidents, on hand-built histories -- the jobs hit at the time of the
fault, the lifecycle with its healthy-period auto-resolve, the page and the API for every source
(the xid rule and Alertmanager), acknowledge / resolve / note, the drain whose impact is computed
at confirmation, the links and the manager's scope."""

from __future__ import annotations

from datetime import timedelta

import pytest
from rest_framework.test import APIClient

from diagnosis.actions.oncall.drain import drain_for_incident
from diagnosis.actions.oncall.incidents import acknowledge_incident
from diagnosis.actions.records.cycles import record_cycle
from diagnosis.models import (
    AuditEntry,
    Incident,
    Recommendation,
    SchedulerEvent,
    Snapshot,
    Tenant,
)
from tests.support.alert_delivery import deliver_alerts
from tests.support.builders import AS_OF, SnapshotBuilder
from tests.support.world import logged_in_client, sender_client

pytestmark = pytest.mark.django_db

XID_AT = "5m"  # the Xid, five minutes before AS_OF


def before_the_xid():
    """10 minutes before AS_OF: victim (hpo) on n1's 8 GPUs, bystander (vision) on n2."""
    b = SnapshotBuilder(as_of=AS_OF - timedelta(minutes=10), cluster="oncall")
    b.node("n1", gpus=8).node("n2", gpus=8).queue("hpo").queue("vision")
    b.job("victim", tenant="hpo", node="n1", gpus_per_pod=8, ran="1h")
    b.job("bystander", tenant="vision", node="n2", gpus_per_pod=8, ran="1h")
    return b


def after_the_xid(*, as_of=AS_OF, health="unhealthy", xid=True, node_state="ready"):
    """At ``as_of``: victim failed at the Xid second; latecomer (vision) placed on n1 GPU 3
    afterwards; n1's GPU 3 ``health``."""
    b = SnapshotBuilder(as_of=as_of, cluster="oncall")
    b.node("n1", gpus=8, state=node_state).node("n2", gpus=8).queue("hpo").queue("vision")
    shift = as_of - AS_OF
    ago = lambda minutes: (timedelta(minutes=minutes) + shift).total_seconds()  # noqa: E731
    b.job("victim", tenant="hpo", state="failed", started=ago(65), ended=ago(5))
    b.job("latecomer", tenant="vision", allocation=[("n1", [3])], gpus_per_pod=1, ran=ago(2))
    b.job("bystander", tenant="vision", node="n2", gpus_per_pod=8, ran=ago(70))
    if xid:
        b.gpu("n1", 3, xid=[(79, ago(5))], health=health)
    else:
        b.gpu("n1", 3, health=health)
    if shift == timedelta(0):
        b.event("failed", ago=XID_AT, job="victim", node="n1", reason="Xid79")
    return b


@pytest.fixture
def oncall(make_cluster):
    cluster = make_cluster("oncall", metrics_kind="none")
    record_cycle(cluster, before_the_xid().build())
    record_cycle(cluster, after_the_xid().build())
    return cluster


def the_incident(cluster) -> Incident:
    return Incident.objects.get(cluster=cluster, source="rule:xid")


def later(cluster, minutes, **kwargs):
    record_cycle(cluster, after_the_xid(as_of=AS_OF + timedelta(minutes=minutes), **kwargs).build())


# -- jobs hit ------------------------------------------------------------------------------------


def test_the_xid_opens_one_incident_at_the_xid_time(oncall):
    incident = the_incident(oncall)
    assert (incident.node, incident.gpu_index, incident.xid_code) == ("n1", 3, 79)
    assert incident.opened_at == AS_OF - timedelta(minutes=5)
    assert incident.state == "open"


def test_a_job_that_failed_at_the_xid_second_is_hit(oncall):
    jobs = {j["id"]: j for j in the_incident(oncall).details["jobs"]}
    assert jobs["victim"]["state"] == "failed"
    assert jobs["victim"]["tenant"] == "hpo"
    assert jobs["victim"]["gpu_hours_lost"] == 8.0  # 8 GPUs for the hour it ran
    assert the_incident(oncall).details["tenants"] == ["hpo"]


def test_a_job_placed_on_the_gpu_afterwards_is_not_hit(oncall):
    assert [j["id"] for j in the_incident(oncall).details["jobs"]] == ["victim"]


# -- lifecycle -----------------------------------------------------------------------------------


def test_it_stays_open_while_the_gpu_is_unhealthy_and_resolves_after_the_healthy_period(
    oncall, erin
):
    acknowledge_incident(the_incident(oncall), erin)
    for minutes in (20, 40, 60):  # the Xid is out of the window; the GPU stays unhealthy
        later(oncall, minutes, xid=False)
        assert the_incident(oncall).state == "acknowledged"
    later(oncall, 70, xid=False, health="ok")
    assert the_incident(oncall).state == "acknowledged"  # healthy, not yet for the period
    later(oncall, 95, xid=False, health="ok")
    assert the_incident(oncall).state == "acknowledged"
    later(oncall, 100, xid=False, health="ok")
    incident = the_incident(oncall)
    assert incident.state == "resolved"
    assert incident.resolved_by is None
    assert incident.history.filter(kind="resolved", actor="system:cycle").exists()


def test_an_unacknowledged_incident_stays_open_however_long_the_gpu_is_healthy(oncall):
    for minutes in (20, 60, 120):
        later(oncall, minutes, xid=False, health="ok")
    assert the_incident(oncall).state == "open"


def test_a_cordoned_node_keeps_it_open(oncall, erin):
    acknowledge_incident(the_incident(oncall), erin)
    for minutes in (20, 60, 120):
        later(oncall, minutes, xid=False, health="ok", node_state="cordoned")
    assert the_incident(oncall).state == "acknowledged"
    assert the_incident(oncall).healthy_since is None


def test_each_step_is_a_history_row_with_who_and_an_audit_row(oncall, erin):
    client = logged_in_client(erin)
    incident = the_incident(oncall)
    base = f"/clusters/oncall/incidents/{incident.pk}"
    client.post(f"{base}/acknowledge/")
    client.post(f"{base}/note/", {"text": "reseating the GPU"})
    client.post(f"{base}/resolve/", {"note": "replaced"})
    rows = list(incident.history.values_list("kind", "actor", "state_after"))
    assert rows[0][0] == "opened"
    assert ("acknowledged", "erin", "acknowledged") in rows
    assert ("note", "erin", "") in rows
    assert ("resolved", "erin", "resolved") in rows
    actions = set(
        AuditEntry.objects.filter(target=f"incident:{incident.pk}").values_list("action", flat=True)
    )
    assert actions == {"incident-acknowledge", "incident-note", "incident-resolve"}


def test_a_viewer_may_read_but_not_acknowledge(oncall, bob):
    client = logged_in_client(bob)
    incident = the_incident(oncall)
    assert client.get(f"/clusters/oncall/incidents/{incident.pk}/").status_code == 200
    assert client.post(f"/clusters/oncall/incidents/{incident.pk}/acknowledge/").status_code == 403
    assert the_incident(oncall).state == "open"


def test_an_empty_note_is_refused_with_a_message(oncall, erin):
    response = logged_in_client(erin).post(
        f"/clusters/oncall/incidents/{the_incident(oncall).pk}/note/", {"text": "  "}, follow=True
    )
    assert "a note needs some text" in response.content.decode()
    assert not the_incident(oncall).history.filter(kind="note").exists()


@pytest.mark.parametrize(("action", "field"), [("note", "text"), ("resolve", "note")])
def test_a_nul_in_a_note_or_resolution_is_refused_with_a_message(oncall, erin, action, field):
    response = logged_in_client(erin).post(
        f"/clusters/oncall/incidents/{the_incident(oncall).pk}/{action}/",
        {field: "reseated\x00"},
        follow=True,
    )
    assert response.status_code == 200
    assert "may not hold a NUL character" in response.content.decode()
    assert the_incident(oncall).state == "open"
    assert not the_incident(oncall).history.filter(kind__in=["note", "resolved"]).exists()


# -- the page ------------------------------------------------------------------------------------


def test_the_page_says_what_broke_who_is_hit_and_links_the_finding(oncall, erin):
    incident = the_incident(oncall)
    html = logged_in_client(erin).get(f"/clusters/oncall/incidents/{incident.pk}/").content
    text = html.decode()
    assert "GPU has fallen off the bus." in text
    assert 'href="/clusters/oncall/jobs/victim/"' in text
    assert f'href="/clusters/oncall/findings/{incident.finding_id}/"' in text
    assert 'id="action-drain"' in text


def test_the_finding_links_its_incident(oncall, erin):
    incident = the_incident(oncall)
    text = logged_in_client(erin).get(f"/clusters/oncall/findings/{incident.finding_id}/")
    assert f'href="/clusters/oncall/incidents/{incident.pk}/"' in text.content.decode()


def test_the_list_shows_the_incident_with_its_job_hit(oncall, bob):
    text = logged_in_client(bob).get("/clusters/oncall/incidents/").content.decode()
    assert f'href="/clusters/oncall/incidents/{the_incident(oncall).pk}/"' in text
    assert "victim" in text
    assert "latecomer" not in text


# -- Alertmanager --------------------------------------------------------------------------------


def alert_body():
    labels = {
        "alertname": "GPUXidError",
        "cluster": "oncall",
        "Hostname": "n2",
        "gpu": "1",
        "err_code": "79",
        "severity": "critical",
    }
    return {
        "version": "4",
        "status": "firing",
        "receiver": "gpuobs",
        "groupKey": "{}",
        "alerts": [
            {
                "status": "firing",
                "labels": labels,
                "annotations": {"summary": "Xid 79 on n2"},
                "startsAt": (AS_OF - timedelta(minutes=1)).isoformat().replace("+00:00", "Z"),
                "endsAt": "0001-01-01T00:00:00Z",
                "fingerprint": "a1b2c3d4e5f60718",
            }
        ],
    }


@pytest.fixture
def alerted(oncall, make_user):
    client = sender_client(make_user("alertmanager"), "alerts", oncall)
    assert deliver_alerts(client, alert_body()).status_code == 202
    return Incident.objects.get(cluster=oncall, source="alertmanager")


def test_an_alertmanager_incident_shows_on_the_list_and_its_page(alerted, erin):
    client = logged_in_client(erin)
    assert (
        f"/clusters/oncall/incidents/{alerted.pk}/"
        in client.get("/clusters/oncall/incidents/").content.decode()
    )
    text = client.get(f"/clusters/oncall/incidents/{alerted.pk}/").content.decode()
    assert "GPU has fallen off the bus." in text
    assert "bystander" in text  # on n2 GPU 1 when the alert fired


def test_an_alertmanager_incident_names_the_jobs_at_the_alerts_time(oncall, make_user):
    body = alert_body()
    body["alerts"][0]["labels"].update(Hostname="n1", gpu="3")
    body["alerts"][0]["startsAt"] = (
        (AS_OF - timedelta(minutes=5)).isoformat().replace("+00:00", "Z")
    )
    client = sender_client(make_user("alertmanager"), "alerts", oncall)
    assert deliver_alerts(client, body).status_code == 202
    incident = Incident.objects.get(cluster=oncall, source="alertmanager")
    assert [j["id"] for j in incident.details["jobs"]] == ["victim"]  # not latecomer
    assert incident.history.filter(kind="opened").exists()


def test_an_alertmanager_incident_can_be_acknowledged_in_the_api(alerted, erin):
    client = APIClient()
    client.force_authenticate(erin)
    response = client.post(f"/api/v1/clusters/oncall/incidents/{alerted.pk}/acknowledge")
    assert response.status_code == 200
    assert response.json()["state"] == "acknowledged"
    assert response.json()["acknowledged_by"] == "erin"


def test_the_api_lists_incidents_and_refuses_a_bad_state(oncall, bob):
    client = APIClient()
    client.force_authenticate(bob)
    listed = client.get("/api/v1/clusters/oncall/incidents").json()
    assert [j["id"] for j in listed["results"][0]["jobs"]] == ["victim"]
    assert client.get("/api/v1/clusters/oncall/incidents?state=nope").status_code == 400


def test_a_second_acknowledge_is_a_409(oncall, erin):
    client = APIClient()
    client.force_authenticate(erin)
    path = f"/api/v1/clusters/oncall/incidents/{the_incident(oncall).pk}/acknowledge"
    assert client.post(path).status_code == 200
    assert client.post(path).status_code == 409


def test_anonymous_gets_nothing(oncall):
    assert APIClient().get("/api/v1/clusters/oncall/incidents").status_code in (401, 403)


# -- the manager's scope -------------------------------------------------------------------------


def test_a_manager_never_sees_another_tenants_job_in_an_incident(oncall, mallory):
    Tenant.objects.get(cluster=oncall, name="hpo").managers.add(mallory)
    client = logged_in_client(mallory)
    incident = the_incident(oncall)
    page = client.get(f"/clusters/oncall/incidents/{incident.pk}/")
    assert page.status_code == 200  # hpo's job was the one hit
    text = page.content.decode()
    assert "victim" in text
    assert "latecomer" not in text  # vision's job on the node's GPU now
    assert "bystander" not in text
    api = APIClient()
    api.force_authenticate(mallory)
    assert "latecomer" not in str(
        api.get(f"/api/v1/clusters/oncall/incidents/{incident.pk}").json()
    )


def test_a_manager_of_the_other_tenant_sees_no_incident(oncall, mallory):
    Tenant.objects.get(cluster=oncall, name="vision").managers.add(mallory)
    client = logged_in_client(mallory)
    assert client.get(f"/clusters/oncall/incidents/{the_incident(oncall).pk}/").status_code == 404
    assert "victim" not in client.get("/clusters/oncall/incidents/").content.decode()


# -- the drain -----------------------------------------------------------------------------------


def store_now(cluster, jobs, minutes=1):
    """A newer snapshot whose n1 holds ``jobs`` (id, gpus)."""
    b = SnapshotBuilder(as_of=AS_OF + timedelta(minutes=minutes), cluster="oncall")
    b.node("n1", gpus=8).node("n2", gpus=8).queue("vision")
    for job_id, gpus in jobs:
        b.job(job_id, tenant="vision", allocation=[("n1", gpus)], gpus_per_pod=len(gpus))
    Snapshot.store(cluster, b.document())


def test_the_drain_impact_is_computed_at_confirmation_time(oncall, erin):
    # the cycle proposed the drain of n1 long ago, with the jobs of then (both ended since)
    stale = Recommendation.objects.get(cluster=oncall, kind="drain-node", target="node:n1")
    stale.impact = {**stale.impact, "jobs_to_evict": [{"id": "done-1"}, {"id": "done-2"}]}
    stale.save()
    incident = the_incident(oncall)
    client = logged_in_client(erin)
    store_now(oncall, [("latecomer", [3])])
    shown = client.get(f"/clusters/oncall/incidents/{incident.pk}/drain/").content.decode()
    assert "latecomer" in shown
    assert "done-1" not in shown
    store_now(oncall, [("latecomer", [3]), ("newcomer", [4, 5])], minutes=2)  # before the click

    again = client.post(f"/clusters/oncall/incidents/{incident.pk}/drain/", {"job": "latecomer"})

    assert 'id="drain-changed"' in again.content.decode()
    assert "newcomer" in again.content.decode()
    stale.refresh_from_db()
    assert stale.state == "proposed"
    client.post(
        f"/clusters/oncall/incidents/{incident.pk}/drain/", {"job": ["latecomer", "newcomer"]}
    )
    stale.refresh_from_db()
    assert [j["id"] for j in stale.impact["jobs_to_evict"]] == ["latecomer", "newcomer"]
    assert stale.state == "applying"  # one on-call approval sufficed
    assert stale.approved_by == erin


def test_after_the_drain_the_incident_is_mitigating_and_says_so(oncall, erin):
    store_now(oncall, [("latecomer", [3])])
    rec = drain_for_incident(the_incident(oncall), erin)
    incident = the_incident(oncall)
    assert incident.state == "mitigating"
    assert incident.drain == rec
    text = logged_in_client(erin).get(f"/clusters/oncall/incidents/{incident.pk}/").content
    assert f'href="/clusters/oncall/recommendations/{rec.pk}/"' in text.decode()
    assert incident.history.filter(kind="mitigating", actor="erin").exists()


def test_an_evicted_job_says_which_drain_preempted_it(oncall, erin):
    store_now(oncall, [("latecomer", [3])])
    rec = drain_for_incident(the_incident(oncall), erin)
    Recommendation.objects.filter(pk=rec.pk).update(state="applied")
    SchedulerEvent.objects.create(  # the scheduler's word that the drain evicted it
        cluster=oncall,
        time=AS_OF + timedelta(minutes=2),
        kind="evicted",
        node="n1",
        job_external_id="latecomer",
        dedup_key="latecomer-evicted",
    )
    later(oncall, 3)  # the cycle matches the scheduler's events to the drain
    text = logged_in_client(erin).get("/clusters/oncall/jobs/latecomer/").content.decode()
    assert "preempted by the drain of n1 for incident <a" in text
    assert f"#{the_incident(oncall).pk}" in text


def test_an_evicted_job_without_the_schedulers_event_names_the_drain_as_why(oncall, erin):
    """Issue #32 item 7: the scheduler sent no eviction event, but the applied drain is why."""
    store_now(oncall, [("latecomer", [3])])
    rec = drain_for_incident(the_incident(oncall), erin)
    Recommendation.objects.filter(pk=rec.pk).update(state="applied")
    evicted = after_the_xid(as_of=AS_OF + timedelta(minutes=3))
    latecomer = next(j for j in evicted.doc["jobs"] if j["id"] == "latecomer")
    latecomer.update(state="preempted", preemptions=1, allocation=[])
    record_cycle(oncall, evicted.build())
    incident = the_incident(oncall)  # the incident keeps the eviction (its drain's evidence)
    drain = incident.details["drain"]
    drain["evicted"] = {"latecomer": (AS_OF + timedelta(minutes=2)).isoformat()}
    Incident.objects.filter(pk=incident.pk).update(details={**incident.details, "drain": drain})
    assert not SchedulerEvent.objects.filter(cluster=oncall, job_external_id="latecomer").exists()

    text = logged_in_client(erin).get("/clusters/oncall/jobs/latecomer/").content.decode()
    panel = text[text.index('id="preemptions-title"') :]
    assert "Evicted by the drain of n1 for incident <a" in panel
    assert "sent no event" not in panel


def test_a_viewer_cannot_drain(oncall, bob):
    incident = the_incident(oncall)
    response = logged_in_client(bob).post(f"/clusters/oncall/incidents/{incident.pk}/drain/")
    assert response.status_code == 403
    assert the_incident(oncall).drain is None


def test_an_alert_for_a_gpu_the_rule_already_opened_joins_that_incident(oncall, make_user):
    opened = the_incident(oncall)
    body = alert_body()
    body["alerts"][0]["labels"].update(Hostname="n1", gpu="3")
    client = sender_client(make_user("alertmanager"), "alerts", oncall)
    assert deliver_alerts(client, body).status_code == 202
    incident = Incident.objects.get(cluster=oncall, node="n1", gpu_index=3)  # one, not two
    assert incident.pk == opened.pk
    assert incident.source == "alertmanager"
    assert incident.finding_id == opened.finding_id


def test_the_incident_pages_cost_a_bounded_number_of_queries(
    oncall, erin, django_assert_max_num_queries
):
    client = logged_in_client(erin)
    incident = the_incident(oncall)
    client.get("/")
    for path in (
        "/clusters/oncall/incidents/",
        f"/clusters/oncall/incidents/{incident.pk}/",
        f"/clusters/oncall/incidents/{incident.pk}/drain/",
    ):
        with django_assert_max_num_queries(12):
            assert client.get(path).status_code == 200
