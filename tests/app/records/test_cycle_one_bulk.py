"""The first cycle of a cluster (issue #35): every finding, history row, job and recommendation
is created through the bulk paths (``diagnosis.db_bulk``: COPY on PostgreSQL, ``bulk_create`` on
SQLite), in a number of statements that does not grow with the cluster, storing what Django's
``bulk_create`` stores; the next cycle reads those rows back as a steady one."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from diagnosis.actions.records.cycles import record_cycle
from diagnosis.db_bulk import insert_rows, upsert_rows
from diagnosis.models import Cluster, Finding, FindingEvent, Job, Recommendation
from tests.support.builders import AS_OF, SnapshotBuilder
from tests.support.commands import embedded_env, manage

pytestmark = pytest.mark.django_db


def starving_cluster(jobs: int, minutes_later: float = 0):
    """``jobs`` data-starved jobs of queue team-a, one node each, as of AS_OF + minutes."""
    builder = SnapshotBuilder(cluster="first", as_of=AS_OF + timedelta(minutes=minutes_later))
    builder.pool("a100", nodes=jobs + 1)
    builder.queue("team-a")
    for i in range(jobs):
        builder.job(
            f"j{i}",
            node=f"a100-{i:03d}",
            waited=3 * 3600 + minutes_later * 60,
            util=0.3,
            util_p10=0.0,
            util_p90=0.8,
            fb_used_frac=0.5,
        )
    builder.job("waiting", state="pending", waited="2h", queue="team-a")
    return builder.build()


def stored_rows(cluster: Cluster) -> dict[str, Any]:
    """What a cycle stored of the cluster, without ids or times of the wall clock: findings,
    their history rows, jobs, recommendations and their motivating findings."""
    findings = Finding.objects.filter(cluster=cluster)
    return {
        "findings": sorted(
            findings.values_list(
                "rule_id",
                "subject",
                "state",
                "severity",
                "summary",
                "evidence",
                "evidence_digest",
                "first_seen",
                "last_seen",
                "last_hit_at",
                "tenant__name",
            )
        ),
        "events": sorted(
            FindingEvent.objects.filter(finding__cluster=cluster).values_list(
                "finding__subject", "from_state", "to_state", "snapshot_as_of", "note"
            )
        ),
        "jobs": sorted(
            Job.objects.filter(cluster=cluster).values_list(
                "external_id", "state", "priority", "pods", "tenant__name", "unlisted_since"
            )
        ),
        "recommendations": sorted(
            (
                rec.kind,
                rec.target,
                rec.state,
                sorted(rec.motivating_findings.values_list("subject", flat=True)),
            )
            for rec in Recommendation.objects.filter(cluster=cluster)
        ),
    }


def first_cycle(jobs: int) -> Cluster:
    cluster = Cluster.objects.create(name="first")
    cycle = record_cycle(cluster, starving_cluster(jobs))
    assert cycle.ok, cycle.error
    return cluster


def test_a_first_cycle_costs_the_same_statements_for_30_jobs_as_for_3(make_cluster):
    counts = []
    for jobs in (3, 30):
        Cluster.objects.filter(name="first").delete()
        with CaptureQueriesContext(connection) as queries:
            cluster = first_cycle(jobs)
        assert Finding.objects.filter(cluster=cluster).count() >= jobs
        counts.append(len(queries.captured_queries))
    assert counts[0] == counts[1]


def test_a_first_cycle_copies_its_findings_and_history_rows_in_one_statement_each():
    with CaptureQueriesContext(connection) as queries:
        first_cycle(12)
    copies = [q["sql"] for q in queries.captured_queries if q["sql"].startswith("COPY")]
    assert sum('"diagnosis_findingevent"' in sql for sql in copies) == 1
    assert any("-- 12 rows" in sql for sql in copies)  # the 12 starving jobs' findings


def test_a_first_cycle_stores_a_history_row_and_evidence_for_every_finding():
    cluster = first_cycle(4)
    findings = Finding.objects.filter(cluster=cluster)
    starving = findings.filter(rule_id="data-starvation")
    assert sorted(starving.values_list("subject", flat=True)) == [f"job:j{i}" for i in range(4)]
    for finding in findings:
        assert finding.evidence_digest
        assert list(finding.events.values_list("from_state", "to_state")) == [("", finding.state)]


def test_a_first_cycle_links_its_recommendations_to_their_findings():
    cluster = first_cycle(4)
    linked = Recommendation.objects.filter(cluster=cluster, motivating_findings__isnull=False)
    assert linked.exists()


def test_a_second_cycle_reads_the_first_ones_rows_back_steady():
    cluster = first_cycle(6)
    stored = Finding.objects.filter(cluster=cluster).count()
    second = record_cycle(cluster, starving_cluster(6, minutes_later=1))
    written = second.steps["findings_written"]
    # every finding created in bulk follows its rule's clock: a steady cycle writes none of them
    assert (written["written"], written["touched"], written["events"]) == (0, 0, 0)
    assert Finding.objects.filter(cluster=cluster).count() == stored
    later = AS_OF + timedelta(minutes=1)
    assert set(Finding.objects.filter(cluster=cluster).values_list("last_seen", flat=True)) == {
        later
    }


def finding_columns(cluster: Cluster) -> list[tuple]:
    return sorted(
        Finding.objects.filter(cluster=cluster).values_list(
            "rule_id", "subject", "state", "severity", "summary", "evidence", "evidence_digest",
            "first_seen", "active_since", "last_hit_at", "last_seen", "firing_since",
            "resolved_at", "tenant_id",
        )
    )  # fmt: skip


FINDING_VALUES = {
    "rule_id": "xid",
    "subject": "gpu:n1/0",
    "first_seen": AS_OF,
    "written_last_seen": AS_OF,
    "written_last_hit_at": AS_OF,
    "evidence": {"xid": 79, "jobs": ["a", "b"], "ratio": 0.25, "nested": {"none": None}},
}


def test_upserted_rows_are_stored_as_bulk_create_stores_them(make_cluster):
    copied, created = make_cluster("copied"), make_cluster("created")
    columns = ("cluster_id", "fingerprint", *FINDING_VALUES)
    upsert_rows(
        Finding,
        columns,
        [(copied.pk, "f-copied", *FINDING_VALUES.values())],
        unique=["fingerprint"],
        update=["state"],
    )
    Finding.objects.bulk_create(
        [Finding(cluster=created, fingerprint="f-created", **FINDING_VALUES)]
    )
    assert finding_columns(copied) == finding_columns(created)  # left-out columns: their defaults


def test_a_conflicting_upsert_rewrites_only_the_columns_named(make_cluster):
    cluster = make_cluster()
    stored = Finding.objects.create(cluster=cluster, summary="kept", **FINDING_VALUES)
    later = AS_OF + timedelta(minutes=5)
    returned = upsert_rows(
        Finding,
        (
            "cluster_id",
            "fingerprint",
            "rule_id",
            "subject",
            "first_seen",
            "written_last_seen",
            "summary",
        ),
        [(cluster.pk, stored.fingerprint, "xid", "gpu:n1/0", later, later, "replaced")],
        unique=["fingerprint"],
        update=["written_last_seen"],
        returning=["id"],
    )
    stored.refresh_from_db()
    assert returned == [(stored.pk,)]
    assert (stored.first_seen, stored.last_seen, stored.summary) == (AS_OF, later, "kept")


def test_inserted_rows_keep_their_order_and_defaults(make_cluster):
    finding = Finding.objects.create(cluster=make_cluster(), **FINDING_VALUES)
    insert_rows(
        FindingEvent,
        ("finding_id", "time", "to_state"),
        [(finding.pk, AS_OF, "pending"), (finding.pk, AS_OF, "firing")],
    )
    events = FindingEvent.objects.filter(finding=finding).order_by("pk")
    assert list(events.values_list("to_state", "from_state", "note", "snapshot_as_of")) == [
        ("pending", "", "", None),
        ("firing", "", "", None),
    ]


# -- SQLite (the embedded default): the same cycle in its own process on its own database ------

SQLITE_CYCLES = """
import json
from datetime import datetime
from diagnosis.actions.records.cycles import record_cycle
from diagnosis.models import Cluster
from tests.app.records.test_cycle_one_bulk import starving_cluster, stored_rows
cluster = Cluster.objects.create(name="first")
first = record_cycle(cluster, starving_cluster(5))
rows = stored_rows(cluster)
second = record_cycle(cluster, starving_cluster(5, minutes_later=1))
print(json.dumps({"ok": [first.ok, second.ok], "rows": rows,
                  "second": second.steps["findings_written"]}, default=str))
"""


@pytest.fixture(scope="module")
def sqlite_cycles(tmp_path_factory) -> dict[str, Any]:
    """Two cycles of ``starving_cluster(5)`` recorded by a process on a fresh SQLite database."""
    env = embedded_env() | {"DATABASE_URL": f"sqlite:///{tmp_path_factory.mktemp('db')}/g.db"}
    migrated = manage("migrate", "-v0", env=env, text=True)
    assert migrated.returncode == 0, migrated.stderr
    run = manage("shell", "-c", SQLITE_CYCLES, env=env, text=True)
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout.strip().splitlines()[-1])


def test_on_sqlite_a_first_cycle_stores_the_rows_it_stores_on_postgresql(sqlite_cycles):
    cluster = first_cycle(5)
    on_postgresql = json.loads(json.dumps(stored_rows(cluster), default=str))
    assert sqlite_cycles["ok"] == [True, True]
    assert sqlite_cycles["rows"] == on_postgresql


def test_on_sqlite_a_second_cycle_reads_the_first_ones_rows_back_steady(sqlite_cycles):
    stored = len(sqlite_cycles["rows"]["findings"])
    second = sqlite_cycles["second"]
    assert stored > 0
    assert (second["written"], second["touched"], second["events"]) == (0, 0, 0)
