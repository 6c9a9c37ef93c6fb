"""A first cycle's new findings and jobs are COPYed straight into their tables with ids from the
sequence (``db_bulk.insert_new_rows``, issue #35): every column of every finding, history row and
job is what the upsert through a staging table stored, ids ascending in the same order."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import IntegrityError, transaction
from django.db.models import Model
from django.utils import timezone

from diagnosis.actions.records import findings as findings_module
from diagnosis.actions.records import tenancy as tenancy_module
from diagnosis.actions.records.cycles import record_cycle
from diagnosis.db_bulk import insert_new_rows, upsert_rows
from diagnosis.models import Cluster, Finding, FindingEvent, Job, Queue, RuleClock, Tenant
from tests.app.records.test_cycle_one_bulk import FINDING_VALUES, starving_cluster
from tests.support.builders import AS_OF

pytestmark = pytest.mark.django_db


class _Undo(Exception):
    pass


def through_upsert(model: type[Model], columns: tuple[str, ...], rows: list[tuple]) -> list[int]:
    """The path before insert_new_rows: an upsert through the staging table."""
    unique = ["fingerprint"] if model is Finding else ["cluster", "external_id"]
    written = upsert_rows(model, columns, rows, unique=unique, update=["state"], returning=["id"])
    return sorted(pk for (pk,) in written)


def every_column(cluster: Cluster) -> dict[str, list[dict[str, Any]]]:
    """Every column of the cluster's findings, history rows and jobs, in id order; each id as
    its rank in its table (the sequence moves on between runs), a finding id as its finding's,
    the ids of rows the cycle created besides (clocks, tenants, queues) as their names."""
    findings = list(Finding.objects.filter(cluster=cluster).order_by("id").values())
    rank = {row["id"]: i for i, row in enumerate(findings)}
    events = list(FindingEvent.objects.filter(finding__cluster=cluster).order_by("id").values())
    jobs = list(Job.objects.filter(cluster=cluster).order_by("id").values())
    for rows in (findings, events, jobs):
        for i, row in enumerate(rows):
            row["id"] = i
    for event in events:
        event["finding_id"] = rank[event["finding_id"]]
    names = {
        "clock_id": dict(RuleClock.objects.filter(cluster=cluster).values_list("pk", "rule_id")),
        "tenant_id": dict(Tenant.objects.filter(cluster=cluster).values_list("pk", "name")),
        "queue_id": dict(Queue.objects.filter(cluster=cluster).values_list("pk", "name")),
    }
    for row in (*findings, *jobs):
        for column, name in names.items():
            if row.get(column) is not None:
                row[column] = name[row[column]]
    return {"findings": findings, "events": events, "jobs": jobs}


def first_cycle_columns(cluster: Cluster) -> dict[str, list[dict[str, Any]]]:
    """A first cycle's rows, undone afterwards so that the next run is a first cycle again."""
    columns: dict[str, list[dict[str, Any]]] = {}

    def record_and_undo() -> None:
        with transaction.atomic():
            cycle = record_cycle(cluster, starving_cluster(7))
            assert cycle.ok, cycle.error
            columns.update(every_column(cluster))
            raise _Undo

    with pytest.raises(_Undo):
        record_and_undo()
    return columns


def test_a_first_cycle_stores_every_column_the_upsert_stored(make_cluster, monkeypatch):
    cluster = make_cluster("first")
    moment = timezone.now()
    monkeypatch.setattr(timezone, "now", lambda: moment)  # a history row's time
    copied = first_cycle_columns(cluster)
    monkeypatch.setattr(findings_module, "insert_new_rows", through_upsert)
    monkeypatch.setattr(tenancy_module, "insert_new_rows", through_upsert)
    upserted = first_cycle_columns(cluster)
    assert len(copied["findings"]) >= 7
    assert len(copied["jobs"]) >= 8
    assert copied == upserted


def finding_row(cluster: Cluster, subject: str, summary: str = "") -> tuple:
    """A finding's values as NEW_COLUMNS, of ``FINDING_VALUES`` but its subject."""
    values = FINDING_VALUES | {"subject": subject}
    fingerprint = Finding.fingerprint_of(cluster.pk, values["rule_id"], subject)
    return (cluster.pk, fingerprint, summary, *values.values())


NEW_COLUMNS = ("cluster_id", "fingerprint", "summary", *FINDING_VALUES)


def test_new_rows_take_ascending_ids_from_the_tables_sequence(make_cluster):
    cluster = make_cluster()
    before = Finding.objects.create(cluster=cluster, **FINDING_VALUES | {"subject": "gpu:0"})
    rows = [finding_row(cluster, f"gpu:{i}", summary=f"s{i}") for i in (1, 2, 3)]
    ids = insert_new_rows(Finding, NEW_COLUMNS, rows)
    after = Finding.objects.create(cluster=cluster, **FINDING_VALUES | {"subject": "gpu:4"})
    assert before.pk < ids[0] < ids[1] < ids[2] < after.pk
    stored = Finding.objects.filter(pk__in=ids).order_by("pk").values_list("summary", "evidence")
    assert list(stored) == [(f"s{i}", FINDING_VALUES["evidence"]) for i in (1, 2, 3)]


def test_a_new_row_stored_after_all_fails_instead_of_updating_it(make_cluster):
    cluster = make_cluster()
    stored = Finding.objects.create(cluster=cluster, summary="kept", **FINDING_VALUES)
    row = finding_row(cluster, stored.subject, summary="new")
    with pytest.raises(IntegrityError), transaction.atomic():
        insert_new_rows(Finding, NEW_COLUMNS, [row])
    stored.refresh_from_db()
    assert stored.summary == "kept"


def test_a_job_stored_meanwhile_is_upserted_instead(make_cluster):
    cluster = make_cluster()
    values = {"cluster": cluster, "external_id": "j1", "submitted_at": AS_OF}
    stored = Job.objects.create(name="old", state="pending", **values)
    job = Job(name="new", state="running", **values)
    tenancy_module._write_jobs(
        [tuple(getattr(job, c) for c in tenancy_module._UPSERTED_COLUMNS)], []
    )
    stored.refresh_from_db()
    assert (stored.name, stored.state) == ("new", "running")
