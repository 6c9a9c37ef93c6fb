"""Issue #17: the incidents step reads what its incidents' hit windows need in a fixed number of
queries, however many incidents it follows, and writes an incident only when it changed."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from diagnosis.actions.records.cycles import record_cycle
from diagnosis.models import Incident
from tests.support.builders import AS_OF, SnapshotBuilder

pytestmark = pytest.mark.django_db


def faulty(minutes: int, nodes: int):
    """``nodes`` nodes, each with one job and an Xid on GPU 3 a minute before the first cycle."""
    builder = SnapshotBuilder(as_of=AS_OF + timedelta(minutes=minutes), cluster="faulty")
    builder.queue("hpo")
    for n in range(nodes):
        builder.node(f"n{n}", gpus=8)
        builder.job(f"train-{n}", node=f"n{n}", gpus_per_pod=8, tenant="hpo", ran="2h", util=0.9)
        builder.gpu(f"n{n}", 3, health="unhealthy", xid=[(79, f"{minutes + 1}m")])
    return builder.build()


def incident_step_statements(make_cluster, nodes: int) -> list[str]:
    cluster = make_cluster(f"faulty-{nodes}", metrics_kind="none")
    record_cycle(cluster, faulty(0, nodes))
    record_cycle(cluster, faulty(2, nodes))
    with CaptureQueriesContext(connection) as queries:
        record_cycle(cluster, faulty(4, nodes))
    assert Incident.objects.filter(cluster=cluster).count() == nodes
    return [
        q["sql"]
        for q in queries.captured_queries
        if "diagnosis_incident" in q["sql"] or "diagnosis_schedulerevent" in q["sql"]
    ]


def test_following_six_incidents_reads_as_often_as_following_two(make_cluster):
    two = incident_step_statements(make_cluster, 2)
    six = incident_step_statements(make_cluster, 6)

    assert len(six) == len(two)


def test_an_incident_nothing_changed_for_is_not_written_again(make_cluster):
    cluster = make_cluster("faulty", metrics_kind="none")
    record_cycle(cluster, faulty(0, 1))
    record_cycle(cluster, faulty(20, 1))  # its hit window is over: settled
    assert Incident.objects.get(cluster=cluster).details["hit_settled"]
    with CaptureQueriesContext(connection) as queries:
        record_cycle(cluster, faulty(22, 1))

    writes = [q["sql"] for q in queries.captured_queries if q["sql"].startswith("UPDATE")]
    assert not [sql for sql in writes if '"diagnosis_incident"' in sql.split("SET")[0]]


def opening_inserts(make_cluster, nodes: int) -> list[str]:
    cluster = make_cluster(f"opening-{nodes}", metrics_kind="none")
    with CaptureQueriesContext(connection) as queries:
        record_cycle(cluster, faulty(0, nodes))
    assert Incident.objects.filter(cluster=cluster).count() == nodes
    return [
        q["sql"]
        for q in queries.captured_queries
        if q["sql"].startswith(('INSERT INTO "diagnosis_incident"', "SAVEPOINT"))
    ]


def test_opening_six_incidents_writes_as_often_as_opening_two(make_cluster):
    # issue #35: a first cycle of a 131,072-GPU cluster opened ~420 incidents, ~4 statements each
    assert len(opening_inserts(make_cluster, 6)) == len(opening_inserts(make_cluster, 2))


def test_each_opened_incident_has_its_opened_row_then_its_xid_on_the_timeline(make_cluster):
    cluster = make_cluster("opening", metrics_kind="none")
    record_cycle(cluster, faulty(0, 3))

    for incident in Incident.objects.filter(cluster=cluster):
        kinds = list(incident.history.order_by("pk").values_list("kind", flat=True))
        assert kinds[:2] == ["opened", "xid"]  # then its health, as the cycle follows it
        assert [c["code"] for c in incident.details["codes"]] == [79]
        assert incident.finding.rule_id == "xid"
