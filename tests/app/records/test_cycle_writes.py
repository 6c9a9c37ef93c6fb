"""What a stored cycle writes of the findings (issues #17, #35): proportional to what changed, not
to the open findings. A cycle that sees the same cluster again sends the same few statements
whether 3 or 30 findings are open, writes no finding row (only its rule's clock moves), and its
findings still read the new timestamps."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from diagnosis.actions.records.findings import record_findings
from diagnosis.core.rules.engine import run_rules
from diagnosis.models import Finding
from tests.support.builders import AS_OF, SnapshotBuilder

pytestmark = pytest.mark.django_db

RULE = "data-starvation"


def starving(jobs: int, minutes_later: float = 0, *, p90_of: dict[str, float] | None = None):
    """``jobs`` data-starved jobs ``j0``... (bursty: util 0.3 between p10 0 and p90 0.8, or as
    ``p90_of`` says), one node each, started 3 h before AS_OF, as of AS_OF + minutes."""
    builder = SnapshotBuilder(as_of=AS_OF + timedelta(minutes=minutes_later))
    builder.pool("a100", nodes=jobs)
    for i in range(jobs):
        builder.job(
            f"j{i}",
            node=f"a100-{i:03d}",
            waited=3 * 3600 + minutes_later * 60,
            util=0.3,
            util_p10=0.0,
            util_p90=(p90_of or {}).get(f"j{i}", 0.8),
            fb_used_frac=0.5,
        )
    return builder.build()


def record(cluster, snap, rules=(RULE,)):
    return record_findings(cluster, run_rules(snap, only=rules))


def second_cycle_queries(make_cluster, name: str, jobs: int) -> list[str]:
    cluster = make_cluster(name)
    record(cluster, starving(jobs))
    with CaptureQueriesContext(connection) as queries:
        record(cluster, starving(jobs, 1))
    assert Finding.objects.filter(cluster=cluster, rule_id=RULE).count() == jobs
    return [q["sql"] for q in queries.captured_queries]


def test_an_unchanged_cycle_costs_the_same_statements_for_30_findings_as_for_3(make_cluster):
    few = second_cycle_queries(make_cluster, "few", 3)
    many = second_cycle_queries(make_cluster, "many", 30)
    assert len(many) == len(few) <= 7
    # nothing sent grows with the open findings: neither their ids nor their evidence
    extra_bytes = sum(map(len, many)) - sum(map(len, few))
    assert abs(extra_bytes) < 27


def test_an_unchanged_cycle_writes_no_finding_row_only_its_rules_clock(make_cluster):
    cluster = make_cluster()
    record(cluster, starving(5))
    with CaptureQueriesContext(connection) as queries:
        outcome = record(cluster, starving(5, 1))
    writes = [
        q["sql"] for q in queries.captured_queries if q["sql"].startswith(("INSERT", "UPDATE"))
    ]
    assert (outcome.written, outcome.touched, outcome.events) == (0, 0, 0)
    assert len(writes) == 1
    assert writes[0].startswith('UPDATE "diagnosis_ruleclock"')


def test_an_unchanged_cycle_still_moves_last_seen_and_last_hit(make_cluster):
    cluster = make_cluster()
    record(cluster, starving(2))
    record(cluster, starving(2, 1))
    moved = AS_OF + timedelta(minutes=1)
    assert set(Finding.objects.values_list("last_seen", "last_hit_at")) == {(moved, moved)}


def test_changed_evidence_rewrites_only_that_finding(make_cluster):
    cluster = make_cluster()
    record(cluster, starving(4))
    before = dict(Finding.objects.values_list("subject", "evidence_digest"))
    outcome = record(cluster, starving(4, 1, p90_of={"j2": 0.95}))
    assert (outcome.written, outcome.touched) == (1, 0)
    after = dict(Finding.objects.values_list("subject", "evidence_digest"))
    assert [s for s in before if after[s] != before[s]] == ["job:j2"]
    assert Finding.objects.get(subject="job:j2").evidence["util_p90"] == pytest.approx(0.95)


def test_a_growing_runtime_rewrites_a_finding_once_it_grew_by_a_quarter(make_cluster):
    cluster = make_cluster()
    record(cluster, starving(1))
    assert record(cluster, starving(1, 1)).written == 0
    assert record(cluster, starving(1, 50)).written == 1
    assert Finding.objects.get().evidence["runtime_s"] == 3 * 3600 + 50 * 60


def test_the_first_cycle_inserts_every_finding_in_one_statement(make_cluster):
    cluster = make_cluster()
    with CaptureQueriesContext(connection) as queries:
        outcome = record(cluster, starving(12))
    inserts = [
        q["sql"]
        for q in queries.captured_queries
        if q["sql"].startswith(('INSERT INTO "diagnosis_finding"', 'COPY "diagnosis_finding"'))
    ]
    assert outcome.created == 12
    assert len(inserts) == 1
    assert "ON CONFLICT" not in inserts[0]  # known to be new: no conflict to resolve
