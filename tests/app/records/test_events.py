"""record_scheduler_events: normalized scheduler events stored once each, with the cursor."""

from __future__ import annotations

import re
from datetime import UTC, datetime

import pytest

from diagnosis.actions.records.events import SchedulerEventError, record_scheduler_events
from diagnosis.edge.schedulers.base import EventBatch
from diagnosis.models import Cluster, SchedulerEvent

pytestmark = pytest.mark.django_db


def event(key: str, time: str = "2026-11-29T07:59:00Z", **fields) -> dict:
    return {
        "time": time,
        "kind": "failed_scheduling",
        "job": "17",
        "node": None,
        "reason": "Resources",
        "message": "job 17 pending: Resources",
        "dedup_key": key,
        **fields,
    }


def test_events_are_stored_with_their_fields_and_the_cursor_advances(make_cluster) -> None:
    cluster = make_cluster("slurm-a")

    result = record_scheduler_events(cluster, EventBatch([event("17:Resources")], cursor="c1"))

    row = SchedulerEvent.objects.get(cluster=cluster)
    assert (row.kind, row.job_external_id, row.node, row.reason) == (
        "failed_scheduling",
        "17",
        "",
        "Resources",
    )
    assert row.time == datetime(2026, 11, 29, 7, 59, tzinfo=UTC)
    assert row.dedup_key == "17:Resources"
    assert (result.stored, result.duplicates, result.cursor) == (1, 0, "c1")
    assert Cluster.objects.get(pk=cluster.pk).event_cursor == "c1"


def test_recording_the_same_batch_again_changes_nothing(make_cluster) -> None:
    cluster = make_cluster("slurm-a")
    batch = EventBatch([event("a"), event("b", kind="started")], cursor="c1")
    record_scheduler_events(cluster, batch)
    before = list(SchedulerEvent.objects.filter(cluster=cluster).values())

    result = record_scheduler_events(cluster, batch)

    assert (result.stored, result.duplicates) == (0, 2)
    assert list(SchedulerEvent.objects.filter(cluster=cluster).values()) == before


def test_a_key_repeated_within_one_batch_is_stored_once(make_cluster) -> None:
    cluster = make_cluster("slurm-a")

    result = record_scheduler_events(
        cluster, EventBatch([event("a"), event("a", message="again")], cursor=None)
    )

    assert (result.stored, result.duplicates) == (1, 1)
    assert SchedulerEvent.objects.get(cluster=cluster).message == "job 17 pending: Resources"


def test_out_of_order_events_are_stored_by_their_own_time(make_cluster) -> None:
    cluster = make_cluster("slurm-a")
    record_scheduler_events(cluster, EventBatch([event("late", "2026-11-29T08:00:00Z")], "c2"))

    record_scheduler_events(cluster, EventBatch([event("early", "2026-11-29T07:00:00Z")], "c3"))

    keys = list(SchedulerEvent.objects.filter(cluster=cluster).values_list("dedup_key", flat=True))
    assert keys == ["late", "early"]  # newest first, whatever the order of arrival
    assert SchedulerEvent.objects.get(dedup_key="early").time.hour == 7


def test_the_same_key_in_two_clusters_is_two_events(make_cluster) -> None:
    first, second = make_cluster("slurm-a"), make_cluster("slurm-b")

    record_scheduler_events(first, EventBatch([event("a")], cursor=None))
    result = record_scheduler_events(second, EventBatch([event("a")], cursor=None))

    assert result.stored == 1
    assert SchedulerEvent.objects.filter(dedup_key="a").count() == 2


def test_an_event_without_a_key_is_keyed_by_its_content(make_cluster) -> None:
    cluster = make_cluster("slurm-a")
    batch = EventBatch([event(""), event("", reason="Priority")], cursor=None)

    record_scheduler_events(cluster, batch)
    again = record_scheduler_events(cluster, batch)

    assert again.stored == 0
    keys = SchedulerEvent.objects.filter(cluster=cluster).values_list("dedup_key", flat=True)
    assert len(set(keys)) == 2
    assert all(key.startswith("sha256:") for key in keys)


def test_a_batch_without_a_cursor_keeps_the_stored_one(make_cluster) -> None:
    cluster = make_cluster("slurm-a")
    record_scheduler_events(cluster, EventBatch([], cursor="c7"))

    result = record_scheduler_events(cluster, EventBatch([event("a")], cursor=None))

    assert result.cursor == "c7"
    assert Cluster.objects.get(pk=cluster.pk).event_cursor == "c7"


@pytest.mark.parametrize(
    ("bad", "field"),
    [
        ({"kind": "exploded"}, "events[1].kind"),
        ({"time": "yesterday"}, "events[1].time"),
        ({"time": "2026-11-29T07:59:00"}, "events[1].time"),
        ({"time": None}, "events[1].time"),
    ],
)
def test_a_malformed_event_is_named_and_nothing_is_stored(make_cluster, bad, field) -> None:
    cluster = make_cluster("slurm-a")

    with pytest.raises(SchedulerEventError, match="^" + re.escape(field)):
        record_scheduler_events(cluster, EventBatch([event("a"), event("b", **bad)], "c9"))

    assert not SchedulerEvent.objects.filter(cluster=cluster).exists()
    assert Cluster.objects.get(pk=cluster.pk).event_cursor == ""
