"""Recommendations proposed again unchanged follow their cluster's recommend clock (issue #35):
a steady recommend step writes no recommendation row, yet every reader sees
``last_proposed_as_of`` as the latest step that proposed it -- kept, no longer proposed,
changed, superseded, an older snapshot recorded late."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from django.db import connection

from diagnosis.actions.workflow.proposals import record_recommendations
from diagnosis.core.recommend.base import RecommendSettings
from diagnosis.core.rules.engine import run_rules
from diagnosis.models import Recommendation
from tests.support.builders import AS_OF, SnapshotBuilder

pytestmark = pytest.mark.django_db

NO_REPLAYS = RecommendSettings(simulate=False)


def at(minutes: float) -> datetime:
    return AS_OF + timedelta(minutes=minutes)


def starving(minutes: float, jobs: int = 3, *, busy: tuple[int, ...] = ()):
    """Jobs j0... each bursty with memory loaded on a node of its own (data-starvation: an
    advisory recommendation per job), but those in ``busy``, which run flat out."""
    builder = SnapshotBuilder(as_of=at(minutes)).pool("a100", nodes=jobs)
    bursty = {"util": 0.3, "util_p10": 0.0, "util_p90": 0.8}
    for i in range(jobs):
        metrics = {"util": 0.95} if i in busy else bursty
        builder.job(f"j{i}", node=f"a100-{i:03d}", ran="1h", fb_used_frac=0.5, **metrics)
    return builder.build()


def step(cluster, snap) -> dict:
    return record_recommendations(cluster, snap, run_rules(snap), {}, NO_REPLAYS)


def advisories(cluster) -> dict[str, datetime]:
    rows = Recommendation.objects.filter(cluster=cluster, kind="advisory")
    return dict(rows.values_list("target", "last_proposed_as_of"))


def rows_written(cluster, snap) -> int:
    """Rows of the recommendations table inserted or updated by one step (PostgreSQL's counters
    of the transaction, read inside it)."""

    def written() -> int:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT n_tup_ins + n_tup_upd FROM pg_stat_xact_user_tables "
                "WHERE relname = 'diagnosis_recommendation'"
            )
            return cursor.fetchone()[0]

    before = written()
    step(cluster, snap)
    return written() - before


def test_a_recommendation_proposed_every_step_reads_the_latest_step(make_cluster):
    cluster = make_cluster()
    for minutes in (0, 1, 2, 3):
        step(cluster, starving(minutes))
    assert advisories(cluster) == {f"job:j{i}": at(3) for i in range(3)}
    rec = Recommendation.objects.get(cluster=cluster, target="job:j0")
    assert rec.proposed_as_of == at(0)


def test_one_no_longer_proposed_keeps_the_last_step_that_proposed_it(make_cluster):
    cluster = make_cluster()
    for minutes in (0, 1, 2):
        step(cluster, starving(minutes))
    step(cluster, starving(3, busy=(0,)))
    step(cluster, starving(4, busy=(0,)))
    assert advisories(cluster) == {"job:j0": at(2), "job:j1": at(4), "job:j2": at(4)}


def test_one_proposed_again_after_a_pause_reads_the_clock_again(make_cluster):
    cluster = make_cluster()
    for minutes in (0, 1):
        step(cluster, starving(minutes))
    step(cluster, starving(2, busy=(0,)))
    for minutes in (3, 4, 5):
        step(cluster, starving(minutes))
    assert advisories(cluster)["job:j0"] == at(5)
    row = Recommendation.objects.filter(cluster=cluster, target="job:j0")
    assert row.values_list("proposed_on_clock", flat=True).get()


def test_readers_filter_and_order_by_the_time_they_read(make_cluster):
    cluster = make_cluster()
    for minutes in (0, 1):
        step(cluster, starving(minutes))
    step(cluster, starving(2, busy=(1,)))
    step(cluster, starving(3, busy=(1,)))
    recent = Recommendation.objects.filter(cluster=cluster, last_proposed_as_of__gte=at(3))
    assert sorted(recent.values_list("target", flat=True)) == ["job:j0", "job:j2"]
    oldest = Recommendation.objects.filter(cluster=cluster).order_by("last_proposed_as_of")[0]
    assert oldest.target == "job:j1"


def test_a_recommendation_loaded_through_a_relation_reads_the_clock(make_cluster):
    cluster = make_cluster()
    for minutes in (0, 1, 2):
        step(cluster, starving(minutes))
    rec = cluster.recommendations.get(target="job:j2")
    base = Recommendation._base_manager.get(pk=rec.pk)  # no annotation: the property reads
    assert (rec.last_proposed_as_of, base.last_proposed_as_of) == (at(2), at(2))


def test_an_older_snapshot_recorded_late_moves_no_clock(make_cluster):
    cluster = make_cluster()
    for minutes in (0, 1, 5):
        step(cluster, starving(minutes))
    step(cluster, starving(3))
    cluster.refresh_from_db()
    assert cluster.recommend_clock_at == at(5)
    assert set(advisories(cluster).values()) == {at(3)}  # the step's time, as before the clock


def test_setting_the_time_writes_it_as_the_recommendations_own(make_cluster):
    cluster = make_cluster()
    for minutes in (0, 1, 2):
        step(cluster, starving(minutes))
    rec = Recommendation.objects.get(cluster=cluster, target="job:j0")
    rec.last_proposed_as_of = at(1)
    rec.save(update_fields=["last_proposed_as_of"])
    step(cluster, starving(3, busy=(0,)))
    assert advisories(cluster)["job:j0"] == at(1)


@pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL's row counters")
def test_a_steady_step_writes_no_recommendation_row(make_cluster):
    cluster = make_cluster()
    for minutes in (0, 1):  # the first step inserts them, the second puts them on the clock
        step(cluster, starving(minutes, jobs=20))
    assert rows_written(cluster, starving(2, jobs=20)) == 0
    assert rows_written(cluster, starving(3, jobs=20)) == 0
    assert len(advisories(cluster)) == 20


@pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL's row counters")
def test_a_step_writes_one_row_when_one_of_20_is_no_longer_proposed(make_cluster):
    cluster = make_cluster()
    for minutes in (0, 1, 2):
        step(cluster, starving(minutes, jobs=20))
    assert rows_written(cluster, starving(3, jobs=20, busy=(0,))) == 1
    assert rows_written(cluster, starving(4, jobs=20, busy=(0,))) == 0
