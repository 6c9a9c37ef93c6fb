"""Issue #29, item 1: the Alertmanager receiver stores the batch and answers 202; a task reads
it into incidents once, whoever sends it how often; a batch whose task was lost is read by the
sweep; each sender has a rate of its own."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.cache import cache
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from diagnosis.actions.oncall.inbound import record_alert_batch, record_pending_alert_batches
from diagnosis.models import InboundAlertBatch, InboundState, Incident
from tests.app.oncall.test_alertmanager import alert, bearer, payload, prod, reporter
from tests.support.throttles import api_rates

pytestmark = pytest.mark.django_db
__all__ = ["prod", "reporter"]  # fixtures used by name


def post(client, body):
    """A delivery whose task is not run (no worker reads the test's Redis, and the test's
    transaction never commits): what the receiver itself did."""
    return client.post("/api/v1/alertmanager", body, format="json")


def test_the_receiver_stores_the_batch_and_answers_202_before_any_incident(prod, reporter):
    other = {**alert(), "labels": {"alertname": "HighCPU"}, "fingerprint": "cpu0000000000001"}
    response = post(bearer(reporter), payload(alert(), other))
    assert response.status_code == 202
    assert [a["outcome"] for a in response.json()["alerts"]] == ["queued", "ignored"]
    batch = InboundAlertBatch.objects.get(pk=response.json()["batch"])
    assert (batch.state, batch.alerts, batch.sender) == (InboundState.PENDING, 1, reporter)
    assert not Incident.objects.exists()


def distinct_alerts(count: int) -> list[dict]:
    """``count`` GPU alerts on gpu-a-1's eight GPUs, each with a fingerprint of its own."""
    return [{**alert(gpu=str(i % 8)), "fingerprint": f"burst{i:011d}"} for i in range(count)]


def test_the_receivers_queries_do_not_grow_with_the_batchs_alerts(prod, reporter):
    """What guards issue #29 (posts of 11-27 s, each alert read inside the request) whatever
    the machine's load: a 100-alert post costs the request the queries a 1-alert post does."""
    client = bearer(reporter)
    post(client, payload(*distinct_alerts(1)))  # the sender's first request: its lookups
    with CaptureQueriesContext(connection) as one:
        post(client, payload(*distinct_alerts(1)))
    with CaptureQueriesContext(connection) as hundred:
        response = post(client, payload(*distinct_alerts(100)))
    assert response.status_code == 202
    assert {a["outcome"] for a in response.json()["alerts"]} == {"queued"}
    assert len(hundred) == len(one), [q["sql"] for q in hundred.captured_queries]
    assert not Incident.objects.exists()


def test_a_batch_is_read_once_whoever_sends_its_task_again(prod, reporter):
    batch = post(bearer(reporter), payload(alert())).json()["batch"]
    assert record_alert_batch(batch)["outcome"] == "recorded"
    assert record_alert_batch(batch)["outcome"] == "taken"  # a redelivered task
    stored = InboundAlertBatch.objects.get(pk=batch)
    assert stored.state == InboundState.DONE
    assert [r["outcome"] for r in stored.results] == ["opened"]
    assert Incident.objects.get().details["deliveries"] == 1


def test_a_batch_claimed_by_a_dead_task_is_read_by_the_sweep(prod, reporter, settings):
    batch = post(bearer(reporter), payload(alert())).json()["batch"]
    long_ago = timezone.now() - timedelta(seconds=settings.CELERY_TASK_TIME_LIMIT + 60)
    InboundAlertBatch.objects.filter(pk=batch).update(received_at=long_ago, claimed_at=long_ago)
    assert record_pending_alert_batches() == [batch]
    assert Incident.objects.filter(cluster=prod).count() == 1
    assert record_pending_alert_batches() == []


def test_a_fresh_batch_is_left_to_its_own_task(prod, reporter):
    post(bearer(reporter), payload(alert()))
    assert record_pending_alert_batches() == []


def test_a_repeated_delivery_of_an_episode_reads_no_window_again(prod, reporter):
    """Alertmanager re-sends a firing group at every repeat interval: the jobs found at the
    first delivery stay, so the repeat costs a few queries, not the windows over history."""
    client = bearer(reporter)
    first = post(client, payload(alert())).json()["batch"]
    again = post(client, payload(alert())).json()["batch"]
    with CaptureQueriesContext(connection) as opened:
        assert record_alert_batch(first)["outcome"] == "recorded"
    opened_count = len(opened)
    with CaptureQueriesContext(connection) as repeated:
        assert record_alert_batch(again)["outcome"] == "recorded"
    assert len(repeated) < opened_count - 2, (len(repeated), opened_count)
    incident = Incident.objects.get()
    assert incident.details["deliveries"] == 2
    assert [j["id"] for j in incident.details["jobs"]] == ["team-a/llm"]


def test_a_sender_past_its_rate_is_429(prod, reporter, settings):
    api_rates(settings, sender="2/min")
    client = bearer(reporter)
    codes = [post(client, payload(alert())).status_code for _ in range(3)]
    assert codes == [202, 202, 429]
    assert InboundAlertBatch.objects.count() == 2
    cache.clear()
