"""Alertmanager → incidents: the webhook payload parser, the endpoint (auth, dedup by fingerprint,
episodes, resolution, out-of-order deliveries), and a real Alertmanager (Debian's
prometheus-alertmanager on loopback) delivering to the live test server."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import requests
from celery._state import _set_task_join_will_block
from django.contrib.auth.models import User
from rest_framework.test import APIClient

from diagnosis.actions.records.snapshots import import_snapshot
from diagnosis.choices import IncidentState
from diagnosis.core import snapshot as snapshot_format
from diagnosis.edge.sources import alertmanager as am
from diagnosis.models import ApiToken, Cluster, InboundAlertBatch, Incident
from tests.support.alert_delivery import deliver_alerts
from tests.support.alertmanager_server import AlertmanagerServer
from tests.support.processes import wait_until
from tests.support.world import sender_client, token_client

STARTS = "2026-11-29T07:51:12.123456789Z"
XID_LABELS = {
    "alertname": "GPUXidError",
    "cluster": "prod",
    "Hostname": "gpu-a-1",
    "gpu": "3",
    "UUID": "GPU-5f1e6a2b-0000-4000-8000-000000000003",
    "err_code": "79",
    "err_msg": "GPU has fallen off the bus",
    "severity": "critical",
}


def alert(status: str = "firing", starts: str = STARTS, ends: str | None = None, **labels):
    return {
        "status": status,
        "labels": {**XID_LABELS, **labels},
        "annotations": {"summary": "Xid 79 on gpu-a-1"},
        "startsAt": starts,
        "endsAt": ends or "0001-01-01T00:00:00Z",
        "generatorURL": "http://prometheus.example:9090/graph?g0.expr=DCGM_FI_DEV_XID_ERRORS",
        "fingerprint": "d4f1c2b3a4e5f607",
    }


def payload(*alerts: dict[str, Any], status: str = "firing") -> dict[str, Any]:
    return {
        "version": "4",
        "groupKey": '{}:{alertname="GPUXidError"}',
        "truncatedAlerts": 0,
        "status": status,
        "receiver": "gpuobs",
        "groupLabels": {"alertname": "GPUXidError"},
        "commonLabels": {"alertname": "GPUXidError"},
        "commonAnnotations": {},
        "externalURL": "http://alertmanager.example:9093",
        "alerts": list(alerts),
    }


# -- the parser (pure) ---------------------------------------------------------------------------


def test_parse_keeps_what_the_incident_needs() -> None:
    message = am.parse_webhook(payload(alert()))
    (parsed,) = message.alerts
    assert parsed.starts_at == datetime(2026, 11, 29, 7, 51, 12, 123456, tzinfo=UTC)
    assert parsed.ends_at is None  # Go's zero time
    assert parsed.name == "GPUXidError"
    assert parsed.fingerprint == "d4f1c2b3a4e5f607"


def test_parse_names_every_bad_field() -> None:
    broken = payload(
        {**alert(), "startsAt": "soon", "labels": {"gpu": 3}},
        {**alert(status="resolved"), "fingerprint": None},
    )
    broken["version"] = "3"
    with pytest.raises(am.AlertmanagerPayloadError) as caught:
        am.parse_webhook(broken)
    assert caught.value.errors == [
        "version: expected '4' (Alertmanager's webhook format)",
        "alerts[0].startsAt: 'soon' is not an RFC 3339 time with a zone",
        "alerts[0].labels: expected an object of string values",
        "alerts[1].fingerprint: required field is missing",
        "alerts[1].endsAt: a resolved alert needs its end time",
    ]


def test_classify_reads_dcgm_exporter_labels() -> None:
    gpu = am.classify(am.parse_webhook(payload(alert())).alerts[0], am.AlertRules())
    assert gpu == am.GpuAlert(
        kind="xid",
        cluster="prod",
        node="gpu-a-1",
        gpu_index=3,
        gpu_uuid="GPU-5f1e6a2b-0000-4000-8000-000000000003",
        xid=79,
    )


def test_classify_by_xid_label_alone_strips_the_scrape_port() -> None:
    labels = {"alertname": "SomethingElse", "xid": "48", "instance": "gpu-h-1:9400"}
    raw = {**alert(), "labels": labels}
    gpu = am.classify(am.parse_webhook(payload(raw)).alerts[0], am.AlertRules())
    assert (gpu.kind, gpu.xid, gpu.node, gpu.gpu_index) == ("xid", 48, "gpu-h-1", None)


def test_classify_health_alert_and_ignore_the_rest() -> None:
    rules = am.AlertRules.of(health_alerts=["NodeGPUHealth"])
    health = {
        **alert(),
        "labels": {"alertname": "NodeGPUHealth", "node": "gpu-a-2", "device": "nvidia5"},
    }
    other = {**alert(), "labels": {"alertname": "HighCPU", "node": "gpu-a-2"}}
    parsed = am.parse_webhook(payload(health, other)).alerts
    gpu = am.classify(parsed[0], rules)
    assert (gpu.kind, gpu.node, gpu.gpu_index, gpu.xid) == ("gpu-health", "gpu-a-2", 5, None)
    assert am.classify(parsed[1], rules) is None


# -- the endpoint --------------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def _tasks_in_process(celery_eager: None) -> None:
    """The receiver's task runs in-process, as in the embedded mode (a worker reads it in
    production: tests/faults/test_alert_burst.py)."""


@pytest.fixture
def prod(make_cluster) -> Cluster:
    """A cluster whose latest snapshot has a job on gpu-a-1 GPUs 0-7 and one on gpu-a-2."""
    cluster = make_cluster("prod")
    document = {
        "format": snapshot_format.FORMAT,
        "cluster": "prod",
        "as_of": "2026-11-29T07:50:00Z",
        "nodes": [
            {"name": "gpu-a-1", "pool": "a100", "gpus": 8, "state": "ready"},
            {"name": "gpu-a-2", "pool": "a100", "gpus": 8, "state": "ready"},
        ],
        "jobs": [
            {
                "id": "team-a/llm",
                "tenant": "research",
                "queue": "team-a",
                "state": "running",
                "submitted": "2026-11-29T06:00:00Z",
                "pods": 1,
                "gpus_per_pod": 8,
                "allocation": [{"node": "gpu-a-1", "gpus": [0, 1, 2, 3, 4, 5, 6, 7]}],
            },
            {
                "id": "team-b/eval",
                "tenant": "team-b",
                "state": "running",
                "submitted": "2026-11-29T06:00:00Z",
                "pods": 1,
                "gpus_per_pod": 2,
                "allocation": [{"node": "gpu-a-2", "gpus": [0, 1]}],
            },
        ],
    }
    import_snapshot(snapshot_format.load(document))
    return cluster


@pytest.fixture
def reporter(make_user) -> User:
    """Alertmanager's user: no role; its token (:func:`bearer`) may write alerts."""
    return make_user("alertmanager")


def bearer(user: User) -> APIClient:
    """``user``'s token scoped to the alerts of every cluster there is now."""
    return sender_client(user, "alerts", *Cluster.objects.all(), keyword="Bearer")


def deliver(client: APIClient, body: dict[str, Any], query: str = ""):
    """Post a webhook body; the task the receiver sends on commit runs here."""
    return deliver_alerts(client, body, f"/api/v1/alertmanager{query}")


def outcome_of(response, number: int = 0) -> str:
    """What alert ``number`` of a delivery did, once its batch was read."""
    batch = response.json()["batch"]
    alerts = InboundAlertBatch.objects.get(pk=batch).results if batch else response.json()["alerts"]
    return alerts[number]["outcome"]


@pytest.mark.django_db
def test_an_xid_alert_opens_an_incident_with_meaning_jobs_and_tenants(prod, reporter) -> None:
    response = deliver(bearer(reporter), payload(alert()))
    assert response.status_code == 202
    assert outcome_of(response) == "opened"
    incident = Incident.objects.get(cluster=prod)
    assert (incident.node, incident.gpu_index, incident.xid_code) == ("gpu-a-1", 3, 79)
    assert incident.state == IncidentState.OPEN
    assert incident.opened_at == datetime(2026, 11, 29, 7, 51, 12, 123456, tzinfo=UTC)
    assert incident.details["xid"]["meaning"] == "GPU has fallen off the bus."
    assert incident.details["xid"]["action"] == "reboot-node"
    assert incident.summary.startswith("Xid 79 on gpu-a-1 GPU 3:")
    assert [j["id"] for j in incident.details["jobs"]] == ["team-a/llm"]
    assert incident.details["tenants"] == ["research"]
    assert incident.source == "alertmanager"


@pytest.mark.django_db
def test_redelivery_updates_the_same_incident(prod, reporter) -> None:
    client = bearer(reporter)
    deliver(client, payload(alert()))
    response = deliver(client, payload(alert()))
    assert outcome_of(response) == "updated"
    incident = Incident.objects.get()
    assert incident.details["deliveries"] == 2


@pytest.mark.django_db
def test_resolved_alert_resolves_and_a_late_firing_copy_does_not_reopen(prod, reporter) -> None:
    client = bearer(reporter)
    deliver(client, payload(alert()))
    ended = "2026-11-29T08:10:00Z"
    deliver(client, payload(alert("resolved", ends=ended), status="resolved"))
    incident = Incident.objects.get()
    assert incident.state == IncidentState.RESOLVED
    assert incident.resolved_at == datetime(2026, 11, 29, 8, 10, tzinfo=UTC)
    late = deliver(client, payload(alert()))  # at-least-once: the old firing notification
    assert outcome_of(late) == "stale"
    assert Incident.objects.get().state == IncidentState.RESOLVED


@pytest.mark.django_db
def test_a_new_episode_reopens(prod, reporter) -> None:
    client = bearer(reporter)
    deliver(client, payload(alert()))
    deliver(client, payload(alert("resolved", ends="2026-11-29T08:10:00Z"), status="resolved"))
    response = deliver(client, payload(alert(starts="2026-11-29T09:00:00Z")))
    assert outcome_of(response) == "reopened"
    incident = Incident.objects.get()
    assert incident.state == IncidentState.OPEN
    assert incident.resolved_at is None
    assert len(incident.details["episodes"]) == 2


@pytest.mark.django_db
def test_resolution_before_the_firing_keeps_it_resolved(prod, reporter) -> None:
    client = bearer(reporter)
    deliver(client, payload(alert("resolved", ends="2026-11-29T08:10:00Z"), status="resolved"))
    deliver(client, payload(alert()))
    assert Incident.objects.get().state == IncidentState.RESOLVED


@pytest.mark.django_db
def test_other_alerts_are_acknowledged_and_ignored(prod, reporter) -> None:
    other = {**alert(), "labels": {"alertname": "HighCPU", "cluster": "prod"}}
    response = deliver(bearer(reporter), payload(other))
    assert response.status_code == 202
    assert outcome_of(response) == "ignored"
    assert not Incident.objects.exists()


@pytest.mark.django_db
def test_the_receiver_url_names_the_cluster(prod, make_cluster, reporter) -> None:
    make_cluster("staging")
    deliver(bearer(reporter), payload(alert()), "?cluster=staging")
    assert Incident.objects.get().cluster.name == "staging"


@pytest.mark.django_db
def test_an_alert_for_an_unknown_cluster_opens_nothing(prod, reporter) -> None:
    response = deliver(bearer(reporter), payload(alert(cluster="elsewhere")))
    assert outcome_of(response) == "unknown-cluster"
    assert not Incident.objects.exists()


@pytest.mark.django_db
def test_a_malformed_payload_is_400_with_the_fields(prod, reporter) -> None:
    response = deliver(bearer(reporter), {"version": "4", "alerts": [{"status": "on fire"}]})
    assert response.status_code == 400
    errors = response.json()["errors"]
    assert errors["alerts[0].status"] == ["expected 'firing' or 'resolved', got 'on fire'"]
    assert errors["alerts[0].startsAt"] == ["required field is missing"]


@pytest.mark.django_db
def test_anonymous_is_401_and_a_viewer_403(prod, bob) -> None:
    assert deliver(APIClient(), payload(alert())).status_code == 401
    assert deliver(token_client(bob, "Bearer"), payload(alert())).status_code == 403
    assert not Incident.objects.exists()


# -- a real Alertmanager -------------------------------------------------------------------------

TOKEN_KEY = secrets.token_hex(20)  # the receiver's bearer token, fixed for the session


@pytest.fixture(scope="module")
def alertmanager_url(live_server, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Debian's Alertmanager on a free loopback port, delivering every alert to the live test
    server's webhook with the session's bearer token; stopped at the end of the module."""
    receiver = {
        "name": "gpuobs",
        "webhook_configs": [
            {
                "url": f"{live_server.url}/api/v1/alertmanager",
                "send_resolved": True,
                "http_config": {"authorization": {"type": "Bearer", "credentials": TOKEN_KEY}},
            }
        ],
    }
    server = AlertmanagerServer(
        tmp_path_factory.mktemp("alertmanager"),
        receiver,
        group_by=["alertname", "cluster", "Hostname", "gpu"],
    )
    try:
        server.start()
        yield server.url
    finally:
        server.stop()
        # Celery keeps its "inside a task" guard in one flag for the whole process, and an eager
        # task puts back what it saw on entry: two live-server threads reading this module's
        # webhooks at once can leave it set, and every later ``result.get()`` of this test
        # process would raise "Never call result.get() within a task!".
        _set_task_join_will_block(False)


@pytest.fixture
def am_receiver(make_user) -> User:
    user = make_user("alertmanager")
    token, _ = ApiToken.issue(user, "alertmanager", days=None, key=TOKEN_KEY)
    token.kinds = ["alerts"]
    token.save(update_fields=["kinds"])
    return user


def post_alert(url: str, starts: datetime, ends: datetime | None = None, **labels: str) -> None:
    body: dict[str, Any] = {
        "labels": {**XID_LABELS, "cluster": "am-live", **labels},
        "annotations": {"summary": "Xid on a live test"},
        "startsAt": starts.isoformat(),
    }
    if ends is not None:
        body["endsAt"] = ends.isoformat()
    response = requests.post(f"{url}/api/v2/alerts", json=[body], timeout=5)
    assert response.status_code == 200, response.text


@pytest.mark.alertmanager
@pytest.mark.django_db(transaction=True)
def test_alertmanager_delivers_an_xid_and_its_resolution(alertmanager_url, am_receiver) -> None:
    cluster = Cluster.objects.create(name="am-live")
    ApiToken.objects.get(user=am_receiver).clusters.add(cluster)
    starts = datetime.now(UTC).replace(microsecond=0) - timedelta(seconds=5)
    post_alert(alertmanager_url, starts, gpu="5", err_code="48")

    incident = wait_until(
        lambda: Incident.objects.filter(cluster=cluster, gpu_index=5).first(),
        "Alertmanager's notification to open the incident",
    )
    assert (incident.node, incident.xid_code, incident.state) == ("gpu-a-1", 48, "open")
    assert incident.details["xid"]["code"] == 48
    assert incident.details["alert"]["fingerprint"]

    post_alert(alertmanager_url, starts, ends=datetime.now(UTC), gpu="5", err_code="48")
    wait_until(
        lambda: Incident.objects.filter(pk=incident.pk, state=IncidentState.RESOLVED).exists(),
        "Alertmanager's resolved notification",
    )
    assert Incident.objects.filter(cluster=cluster).count() == 1


@pytest.mark.alertmanager
@pytest.mark.django_db(transaction=True)
def test_alertmanager_group_of_two_gpus_opens_two_incidents(alertmanager_url, am_receiver) -> None:
    cluster = Cluster.objects.create(name="am-live")
    ApiToken.objects.get(user=am_receiver).clusters.add(cluster)
    starts = datetime.now(UTC).replace(microsecond=0)
    post_alert(alertmanager_url, starts, gpu="1", err_code="79", Hostname="gpu-b-1")
    post_alert(alertmanager_url, starts, gpu="2", err_code="79", Hostname="gpu-b-1")
    wait_until(
        lambda: Incident.objects.filter(cluster=cluster, node="gpu-b-1").count() == 2,
        "two incidents, one per GPU",
    )
    fingerprints = set(Incident.objects.values_list("fingerprint", flat=True))
    assert len(fingerprints) == 2
