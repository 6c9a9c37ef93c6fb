"""The overview's waterfall from pre-aggregated slices (issue #17): each good cycle stores a small
``AccountingSlice`` (bucket GPUs and only the finding references new since the previous cycle),
so the page reads one accounting document per request, however many cycles are stored, and
draws the same breakdown the documents give."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from diagnosis.actions.records.rollups_hourly import record_accounting_slice
from diagnosis.charts.gpu_hours import GpuHoursBreakdown, gpu_hours_breakdown
from diagnosis.models import AccountingSlice, Cluster, ClusterCycle
from diagnosis.pages.clusters import HOUR_ROW, WATERFALL_PERIOD_S, waterfall_rows
from tests.support.world import logged_in_client

pytestmark = [pytest.mark.django_db]

START = datetime(2026, 11, 29, 0, 0, tzinfo=UTC)


def accounting(minute: int) -> dict:
    """An accounting document whose findings change from cycle to cycle: ``idle`` keeps two jobs
    and gains one every 7 minutes; ``starved`` holds one job for 20 minutes, loses it, and a new
    one appears (the shape of ``Accounting.as_dict()``)."""
    idle = [
        "low-util job:a",
        "low-util job:b",
        *(f"low-util job:n{m}" for m in range(0, minute, 7)),
    ]
    starved = [f"data-starvation job:s{minute // 20}"] if minute % 20 < 15 else []
    return {
        "window_s": 900,
        "cluster": {
            "gpus": 64,
            "buckets": {"busy": {"gpus": 40 + minute % 5}, "idle": {"gpus": 24 - minute % 5}},
            "productive_gpus": 20.0 + minute % 3,
            "activity_coverage": 1.0,
            "mfu_coverage": 0.5,
        },
        "findings": {"idle": idle, "data-starved": starved},
    }


def store_cycles(cluster: Cluster, minutes: range, *, slices: bool = True) -> list[ClusterCycle]:
    cycles = []
    for minute in minutes:
        when = START + timedelta(minutes=minute)
        cycle = ClusterCycle.objects.create(
            cluster=cluster, as_of=when, ran_at=when, gpus=64, accounting=accounting(minute)
        )
        if slices:
            record_accounting_slice(cycle)
        cycles.append(cycle)
    return cycles


def breakdown_from_documents(cluster: Cluster, end: datetime) -> GpuHoursBreakdown:
    """What the overview drew before slices: every document of the hour."""
    rows = (
        ClusterCycle.objects.filter(
            cluster=cluster,
            ok=True,
            as_of__gt=end - timedelta(seconds=WATERFALL_PERIOD_S),
            as_of__lte=end,
        )
        .order_by("as_of")
        .values("as_of", **HOUR_ROW)
    )
    return gpu_hours_breakdown(list(rows), end=end, period_s=WATERFALL_PERIOD_S)


def breakdown_from_slices(cluster: Cluster, end: datetime) -> GpuHoursBreakdown:
    rows = waterfall_rows(ClusterCycle.objects.filter(cluster=cluster), end)
    return gpu_hours_breakdown(rows, end=end, period_s=WATERFALL_PERIOD_S)


def test_a_slice_keeps_only_the_references_new_since_the_previous_cycle(lab) -> None:
    store_cycles(lab, range(0, 9))

    latest = AccountingSlice.objects.get(cluster=lab, as_of=START + timedelta(minutes=8))

    assert latest.new_findings == {"idle": ["low-util job:n7"]}


def test_the_slices_give_the_documents_breakdown(lab) -> None:
    store_cycles(lab, range(0, 150))
    end = START + timedelta(minutes=149, seconds=30)  # the hour starts inside a cycle's window

    assert breakdown_from_slices(lab, end) == breakdown_from_documents(lab, end)


def test_cycles_stored_before_slices_are_read_from_their_documents(lab) -> None:
    store_cycles(lab, range(0, 30), slices=False)
    store_cycles(lab, range(30, 90))
    end = START + timedelta(minutes=89)

    assert breakdown_from_slices(lab, end) == breakdown_from_documents(lab, end)


def test_a_cycle_stored_out_of_order_recounts_the_next_slice(lab) -> None:
    cycles = store_cycles(lab, [m for m in range(0, 70) if m != 40])
    after_gap = AccountingSlice.objects.get(cycle=cycles[40])  # minute 41, after 39
    store_cycles(lab, [40])  # an old snapshot imported late
    end = START + timedelta(minutes=69)

    assert after_gap.new_findings == {"data-starved": ["data-starvation job:s2"]}
    after_gap.refresh_from_db()
    assert after_gap.new_findings == {}  # minute 40 already had job:s2
    assert breakdown_from_slices(lab, end) == breakdown_from_documents(lab, end)


def overview_cost(cluster: Cluster, user) -> tuple[int, int]:
    """(queries, accounting documents' finding lists read) of one overview request."""
    client = logged_in_client(user)
    client.get("/")  # the session is loaded once either way
    with CaptureQueriesContext(connection) as queries:
        response = client.get(f"/clusters/{cluster.name}/")
    assert response.status_code == 200
    documents = sum(
        1 for row in waterfall_rows(cluster.cycles.all(), response.context["breakdown"].end)
        if "low-util job:a" in (row["bucket_findings"] or {}).get("idle", ())
    )  # fmt: skip
    return len(queries), documents


def test_the_overview_costs_the_same_with_ten_or_a_hundred_cycles_stored(
    lab, make_cluster, bob
) -> None:
    few = make_cluster("few-cycles")
    store_cycles(few, range(0, 10))
    store_cycles(lab, range(0, 100))

    few_queries, few_documents = overview_cost(few, bob)
    many_queries, many_documents = overview_cost(lab, bob)

    assert many_queries == few_queries
    assert few_documents == many_documents == 1  # one whole list: the hour's first cycle
