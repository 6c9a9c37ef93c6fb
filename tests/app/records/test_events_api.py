"""POST /api/v1/clusters/{cluster}/events: token auth, permissions, a batch validated in the
request and answered 202, stored by the worker's task (run in-process here unless a test says
otherwise) idempotently, out-of-order events at their own time, and 400 naming every bad field of
a malformed batch."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from rest_framework.test import APIClient

from diagnosis.actions.records.inbound import record_cluster_batch
from diagnosis.models import Cluster, InboundClusterBatch, SchedulerEvent
from tests.support.alert_delivery import deliver
from tests.support.world import create_machine_user, sender_client, token_client

pytestmark = pytest.mark.django_db

EVENT = {
    "time": "2026-11-29T07:59:00Z",
    "kind": "failed_scheduling",
    "job": "job-9",
    "reason": "Unschedulable",
    "message": "0/128 nodes are available: 128 Insufficient nvidia.com/gpu.",
    "id": "sched-4711",
}


@pytest.fixture
def cluster(make_cluster) -> Cluster:
    return make_cluster("lsf-1", scheduler_kind="slurm")


@pytest.fixture
def sender(db: None) -> User:
    """A machine user (its token, from :func:`sender_client`, may write events to the cluster)."""
    return create_machine_user("event-sender")


def post(client: APIClient, events: Any, cluster: str = "lsf-1"):
    """A post whose stored batch the worker's task reads before this returns."""
    return deliver(client, f"/api/v1/clusters/{cluster}/events", {"events": events}, format="json")


def stored(response) -> dict:
    """What the worker did with the batch a post stored."""
    return InboundClusterBatch.objects.get(pk=response.json()["batch"]).result


def test_a_batch_is_stored_with_its_own_times(cluster, sender) -> None:
    late = {**EVENT, "time": "2026-11-29T07:00:00Z", "kind": "submitted", "id": "sched-4700"}
    response = post(sender_client(sender, "events", cluster), [EVENT, late])
    assert response.status_code == 202
    assert response.json() == {"batch": response.json()["batch"], "received": 2, "state": "pending"}
    assert stored(response) == {"stored": 2, "duplicates": 0}
    rows = list(SchedulerEvent.objects.filter(cluster=cluster).order_by("time"))
    assert [(r.kind, r.time.isoformat()) for r in rows] == [
        ("submitted", "2026-11-29T07:00:00+00:00"),
        ("failed_scheduling", "2026-11-29T07:59:00+00:00"),
    ]
    assert rows[1].dedup_key == "api:sched-4711"


def test_posting_the_same_batch_again_changes_nothing(cluster, sender) -> None:
    client = sender_client(sender, "events", cluster)
    post(client, [EVENT])
    before = list(SchedulerEvent.objects.values_list("id", "time", "kind", "dedup_key"))
    response = post(client, [EVENT])
    assert stored(response) == {"stored": 0, "duplicates": 1}
    assert list(SchedulerEvent.objects.values_list("id", "time", "kind", "dedup_key")) == before


def test_events_without_an_id_are_deduplicated_by_content(cluster, sender) -> None:
    anonymous = {k: v for k, v in EVENT.items() if k != "id"}
    client = sender_client(sender, "events", cluster)
    post(client, [anonymous])
    assert stored(post(client, [anonymous]))["duplicates"] == 1
    assert SchedulerEvent.objects.count() == 1


def test_a_malformed_batch_names_every_bad_field_and_stores_nothing(cluster, sender) -> None:
    bad = [
        EVENT,
        {**EVENT, "id": "b", "time": "yesterday", "kind": "exploded"},
        {**EVENT, "id": "c", "time": "2026-11-29T08:00:00", "nodes": "gpu-1"},
    ]
    response = post(sender_client(sender, "events", cluster), bad)
    assert response.status_code == 400
    assert not InboundClusterBatch.objects.exists()
    errors = response.json()["errors"]  # each bad field by its path
    assert set(errors) == {"events[1].time", "events[1].kind", "events[2].time", "events[2].nodes"}
    assert errors["events[2].nodes"] == ["unknown field"]
    assert SchedulerEvent.objects.count() == 0


def test_an_empty_or_missing_batch_is_refused(cluster, sender) -> None:
    client = sender_client(sender, "events", cluster)
    assert post(client, []).status_code == 400
    response = client.post("/api/v1/clusters/lsf-1/events", {}, format="json")
    assert response.status_code == 400
    assert "events" in response.json()["errors"]


def test_bearer_keyword_is_accepted(cluster, sender) -> None:
    assert (
        post(sender_client(sender, "events", cluster, keyword="Bearer"), [EVENT]).status_code == 202
    )


def test_anonymous_callers_get_401(cluster) -> None:
    assert post(APIClient(), [EVENT]).status_code == 401
    assert SchedulerEvent.objects.count() == 0


def test_a_user_without_the_permission_gets_403(cluster, bob) -> None:
    assert post(token_client(bob), [EVENT]).status_code == 403


def test_staff_and_superusers_may_not_post(cluster, alice) -> None:
    assert post(token_client(alice), [EVENT]).status_code == 403
    assert SchedulerEvent.objects.count() == 0


def test_the_model_permission_alone_grants_nothing(cluster) -> None:
    holder = create_machine_user("old-sender", "add_schedulerevent")
    assert post(token_client(holder), [EVENT]).status_code == 403


def test_a_token_for_another_cluster_gets_404(cluster, make_cluster, sender) -> None:
    other = make_cluster("other", scheduler_kind="slurm")
    assert post(sender_client(sender, "events", other), [EVENT]).status_code == 404
    assert SchedulerEvent.objects.count() == 0


def test_a_token_of_another_kind_gets_403(cluster, sender) -> None:
    assert post(sender_client(sender, "topology", cluster), [EVENT]).status_code == 403


def test_an_unknown_cluster_is_404(cluster, sender) -> None:
    assert (
        post(sender_client(sender, "events", cluster), [EVENT], cluster="nope").status_code == 404
    )


# -- received in the request, stored by the worker (issue #29, item 1) ---------------------------


def test_a_large_batch_is_answered_before_the_store_and_appears_once_the_worker_ran(
    cluster, sender, django_assert_max_num_queries
) -> None:
    """5,000 events (the largest batch): the request is a fixed handful of queries, nothing per
    event; the worker's task then stores every event once, however often it is sent."""
    events = [
        {**EVENT, "id": f"sched-{n}", "time": f"2026-11-29T07:{n // 100 % 60:02d}:{n % 60:02d}Z"}
        for n in range(5000)
    ]
    client = sender_client(sender, "events", cluster)
    with django_assert_max_num_queries(12):
        response = client.post("/api/v1/clusters/lsf-1/events", {"events": events}, format="json")
    assert response.status_code == 202
    assert not SchedulerEvent.objects.exists()
    batch = response.json()["batch"]
    assert client.get(f"/api/v1/clusters/lsf-1/inbound/{batch}").json()["state"] == "pending"

    assert record_cluster_batch(batch)["outcome"] == "recorded"
    assert record_cluster_batch(batch)["outcome"] == "taken"  # a redelivered task

    assert SchedulerEvent.objects.filter(cluster=cluster).count() == 5000
    shown = client.get(f"/api/v1/clusters/lsf-1/inbound/{batch}").json()
    assert (shown["state"], shown["result"]) == ("done", {"stored": 5000, "duplicates": 0})


def test_a_batch_the_store_refuses_is_failed_with_its_reason(cluster, sender) -> None:
    """An event the serializer let through but the store refuses (a kind no longer known, say
    after a downgrade) fails its batch visibly; nothing of it is stored."""
    client = sender_client(sender, "events", cluster)
    response = client.post("/api/v1/clusters/lsf-1/events", {"events": [EVENT]}, format="json")
    batch = response.json()["batch"]
    row = InboundClusterBatch.objects.get(pk=batch)
    row.payload = {"events": [{**row.payload["events"][0], "kind": "exploded"}]}
    row.save()

    assert record_cluster_batch(batch)["outcome"] == "refused"

    shown = client.get(f"/api/v1/clusters/lsf-1/inbound/{batch}").json()
    assert shown["state"] == "failed"
    assert "events[0].kind 'exploded'" in shown["error"]
    assert not SchedulerEvent.objects.exists()
