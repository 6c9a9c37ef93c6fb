"""Findings follow their rule's clock (issue #35): a cycle no longer writes every open finding's
``last_seen``/``last_hit_at``, yet every reader sees the timestamps the lifecycle gave them --
hit, not hit, resolved after keep_firing_for, hit again, silent -- and a steady cycle writes
finding rows only for what changed."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from django.db import connection

from diagnosis.actions.records.findings import record_findings
from diagnosis.core.rules.engine import run_rules
from diagnosis.models import Finding, FindingEvent
from tests.support.builders import AS_OF, SnapshotBuilder

pytestmark = pytest.mark.django_db

RULE = "data-starvation"  # pending for 10 min, then firing; resolved 5 min after its last hit
WATCHED = "job:j0"


def at(minutes: float) -> datetime:
    return AS_OF + timedelta(minutes=minutes)


def cycle(cluster, minutes: float, *, j0: str = "starving", others: int = 1):
    """Record one evaluation at AS_OF + minutes: job j0 ``starving``, ``busy`` (not hit) or
    ``silent`` (its node sends no GPU metric), and ``others`` jobs j1... starving throughout."""
    builder = SnapshotBuilder(as_of=at(minutes))
    builder.pool("a100", nodes=others + 1)
    bursty = {"util": 0.3, "util_p10": 0.0, "util_p90": 0.8}
    for i in range(others + 1):
        metrics = {"util": 0.9} if (i == 0 and j0 == "busy") else bursty
        if i == 0 and j0 == "silent":
            metrics = {}
        builder.job(
            f"j{i}",
            node=f"a100-{i:03d}",
            waited=3 * 3600 + minutes * 60,
            fb_used_frac=0.5,
            **metrics,
        )
    if j0 == "silent":
        builder.doc["gpus"] = [g for g in builder.doc["gpus"] if g["node"] != "a100-000"]
    return record_findings(cluster, run_rules(builder.build(), only=(RULE,)))


def watched(cluster) -> tuple[str, datetime, datetime | None]:
    row = Finding.objects.get(cluster=cluster, subject=WATCHED)
    return row.state, row.last_seen, row.last_hit_at


def test_a_finding_hit_every_cycle_reads_the_latest_cycle(make_cluster):
    cluster = make_cluster()
    for minutes in (0, 10, 11, 12):
        cycle(cluster, minutes)
    assert watched(cluster) == ("firing", at(12), at(12))


def test_a_firing_finding_not_hit_reads_its_last_hit_and_the_latest_evaluation(make_cluster):
    cluster = make_cluster()
    for minutes in (0, 10, 11):
        cycle(cluster, minutes)
    cycle(cluster, 12, j0="busy")
    cycle(cluster, 13, j0="busy")
    assert watched(cluster) == ("firing", at(13), at(11))


def test_a_finding_resolved_after_keep_firing_for_keeps_its_times_while_the_clock_moves(
    make_cluster,
):
    cluster = make_cluster()
    for minutes in (0, 10, 11):
        cycle(cluster, minutes)
    cycle(cluster, 13, j0="busy")
    cycle(cluster, 16, j0="busy")  # 5 min after its last hit
    cycle(cluster, 17, j0="busy")
    cycle(cluster, 18, j0="busy")
    row = Finding.objects.get(cluster=cluster, subject=WATCHED)
    assert (row.state, row.resolved_at, row.last_seen, row.last_hit_at) == (
        "resolved",
        at(16),
        at(16),
        at(11),
    )


def test_a_resolved_finding_hit_again_reads_the_new_episodes_times(make_cluster):
    cluster = make_cluster()
    for minutes in (0, 10):
        cycle(cluster, minutes)
    cycle(cluster, 15, j0="busy")
    cycle(cluster, 16, j0="busy")
    cycle(cluster, 17)
    cycle(cluster, 18)
    row = Finding.objects.get(cluster=cluster, subject=WATCHED)
    assert (row.state, row.active_since, row.last_seen, row.last_hit_at) == (
        "pending",
        at(17),
        at(18),
        at(18),
    )


def test_a_silent_subject_keeps_its_times_while_the_others_move(make_cluster):
    cluster = make_cluster()
    for minutes in (0, 10, 11):
        cycle(cluster, minutes)
    cycle(cluster, 12, j0="silent")
    cycle(cluster, 30, j0="silent")
    assert watched(cluster) == ("firing", at(11), at(11))
    other = Finding.objects.get(cluster=cluster, subject="job:j1")
    assert (other.last_seen, other.last_hit_at) == (at(30), at(30))


def test_a_silent_subject_judged_again_follows_the_clock_again(make_cluster):
    cluster = make_cluster()
    for minutes in (0, 10, 11):
        cycle(cluster, minutes)
    cycle(cluster, 12, j0="silent")
    cycle(cluster, 13)
    assert cycle(cluster, 14).touched == 0
    assert watched(cluster) == ("firing", at(14), at(14))


def test_an_older_snapshot_recorded_late_changes_no_timestamp(make_cluster):
    cluster = make_cluster()
    for minutes in (0, 10, 11):
        cycle(cluster, minutes)
    before = watched(cluster)
    cycle(cluster, 5, j0="busy")
    assert watched(cluster) == before


def test_readers_order_and_filter_by_the_times_the_findings_read(make_cluster):
    cluster = make_cluster()
    for minutes in (0, 10, 11):
        cycle(cluster, minutes)
    cycle(cluster, 12, j0="silent")
    newest_first = Finding.objects.filter(cluster=cluster).order_by("-last_seen")
    assert [f.subject for f in newest_first] == ["job:j1", WATCHED]
    assert list(Finding.objects.filter(last_hit_at__gt=at(11)).values_list("subject")) == [
        ("job:j1",)
    ]


def test_a_finding_loaded_through_a_relation_reads_its_rules_clock(make_cluster):
    cluster = make_cluster()
    for minutes in (0, 10, 11):
        cycle(cluster, minutes)
    event = FindingEvent.objects.select_related("finding").filter(finding__subject="job:j1")[0]
    assert (event.finding.last_seen, event.finding.last_hit_at) == (at(11), at(11))


def test_a_finding_stored_before_the_clocks_reads_its_times_then_follows(make_cluster):
    cluster = make_cluster()
    cycle(cluster, 0)
    # as rows migrated from before the clocks: their own timestamps, following nothing
    Finding.objects.filter(cluster=cluster).update(seen_on_clock=False, hit_on_clock=False)
    assert watched(cluster) == ("pending", at(0), at(0))
    cycle(cluster, 1)
    assert watched(cluster) == ("pending", at(1), at(1))
    assert cycle(cluster, 2).touched == 0


def finding_rows_written(cluster, minutes: float, **changes) -> int:
    """Rows of the findings table inserted or updated by the cycle at ``minutes`` (PostgreSQL's
    counters of the transaction, read inside it)."""

    def written() -> int:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT n_tup_ins + n_tup_upd FROM pg_stat_xact_user_tables "
                "WHERE relname = 'diagnosis_finding'"
            )
            return cursor.fetchone()[0]

    before = written()
    cycle(cluster, minutes, others=30, **changes)
    return written() - before


@pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL's row counters")
def test_a_steady_cycle_writes_no_finding_row(make_cluster):
    cluster = make_cluster()
    for minutes in (0, 10, 11):
        cycle(cluster, minutes, others=30)
    assert finding_rows_written(cluster, 12) == 0


@pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL's row counters")
def test_a_cycle_writes_one_finding_row_when_one_of_31_stops_being_hit(make_cluster):
    cluster = make_cluster()
    for minutes in (0, 10, 11):
        cycle(cluster, minutes, others=30)
    assert finding_rows_written(cluster, 12, j0="busy") == 1
    assert finding_rows_written(cluster, 13, j0="busy") == 0
