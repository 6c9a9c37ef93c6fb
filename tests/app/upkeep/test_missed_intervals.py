"""Issue #29, item 7: intervals without a cycle say why: a previous cycle still running (its
cycle lock held) is not blamed on beat, Redis or the workers."""

from __future__ import annotations

from datetime import timedelta

import pytest
import redis

from diagnosis.actions.records.cycles import record_missed_intervals
from diagnosis.actions.upkeep.health import database_now
from diagnosis.models import ClusterCycle
from diagnosis.tasks import cycle_lock_key, cycles_running

pytestmark = pytest.mark.django_db


@pytest.fixture
def late(make_cluster):
    """A cluster whose last cycle attempt is five periods old."""
    cluster = make_cluster("late")
    ClusterCycle.objects.create(
        cluster=cluster, as_of=database_now(), ran_at=database_now() - timedelta(seconds=300)
    )
    return cluster


def missed_reason(cluster) -> str:
    return ClusterCycle.objects.filter(cluster=cluster, ok=False).latest("id").error


def test_a_cycle_still_running_is_named(late) -> None:
    assert record_missed_intervals([late.pk], 60, running=frozenset({late.pk})) == [late.pk]
    assert missed_reason(late).endswith(": the previous cycle is still running")


def test_nothing_sent_is_named_so(late) -> None:
    record_missed_intervals([late.pk], 60)
    assert missed_reason(late).endswith("none was sent or taken (beat, Redis or every worker away)")


def test_a_held_redis_lock_is_a_running_cycle(late, settings, redis_url) -> None:
    settings.REDIS_URL = redis_url
    client = redis.Redis.from_url(redis_url)
    client.set(cycle_lock_key(late.pk), "token", px=5000)
    try:
        assert cycles_running([late.pk]) == {late.pk}
    finally:
        client.delete(cycle_lock_key(late.pk))
    assert cycles_running([late.pk]) == frozenset()
