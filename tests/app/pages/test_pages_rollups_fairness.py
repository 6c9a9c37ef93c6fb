"""The fairness report from rollups aggregated ahead (issue #17): each cycle adds its per-tenant
and whole-cluster rollups to their clock hour's ``TenantRollupHour``/``PoolRollupHour`` rows, and
a report binned per hour or day reads those for the whole hours of its period, the per-cycle rows
only for the partial first and last hours: the same report, with the rows read growing with the
hours in the period rather than the cycles stored in it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from diagnosis.actions.records.rollups_hourly import add_cycle_to_hours, rebuild_all_hours
from diagnosis.models import Cluster, ClusterCycle, PoolRollup, TenantRollup, TenantRollupHour
from diagnosis.reports import fairness_report
from diagnosis.reports.fairness_report import build_fairness_report, whole_hours
from diagnosis.reports.period import ReportPeriod

pytestmark = [pytest.mark.django_db]

START = datetime(2026, 11, 29, 0, 0, tzinfo=UTC)


def store_cycles(cluster: Cluster, count: int, *, every: timedelta, hourly: bool = True) -> None:
    """``count`` cycles of two tenants and the cluster, figures in whole GPU-seconds (so sums
    in any order are exact)."""
    for i in range(count):
        when = START + every * (i + 1)
        cycle = ClusterCycle.objects.create(cluster=cluster, as_of=when, ran_at=when, gpus=8)
        seconds = every.total_seconds()
        common = {"cluster": cluster, "cycle": cycle, "as_of": when, "interval_s": seconds}
        for name, held in (("alpha", 2 + i % 3), ("beta", 5 - i % 3)):
            TenantRollup.objects.create(
                **common,
                tenant_name=name,
                allocated_gpu_s=held * seconds,
                demanded_gpu_s=(held + 1) * seconds,
                busy_gpu_s=held * seconds,
                entitlement_s=0.5 * seconds,
                fair_gpu_s=4 * seconds,
                preemptions=i % 2,
            )
        PoolRollup.objects.create(
            **common,
            pool="",
            gpu_s=8 * seconds,
            allocated_gpu_s=7 * seconds,
            demanded_gpu_s=9 * seconds,
            entitlement_basis="weight",
        )
        if hourly:
            add_cycle_to_hours(cycle)


def report(user, cluster: Cluster, period: ReportPeriod) -> dict:
    data = build_fairness_report(user, cluster, period, now=START)
    return {**data.as_dict(), "series": data.series.to_dict()}


def from_cycles_only(monkeypatch, user, cluster: Cluster, period: ReportPeriod) -> dict:
    """The report as it was before hourly rows: every per-cycle row of the period."""
    with monkeypatch.context() as patch:
        patch.setattr(fairness_report, "whole_hours", lambda period: None)
        return report(user, cluster, period)


DAY = ReportPeriod(start=START + timedelta(minutes=30), end=START + timedelta(hours=23, minutes=7))


def test_the_whole_hours_of_a_period_exclude_its_partial_first_and_last_hours() -> None:
    assert whole_hours(DAY) == (START + timedelta(hours=1), START + timedelta(hours=23))


def test_a_period_inside_one_hour_has_no_whole_hour() -> None:
    period = ReportPeriod(start=START + timedelta(minutes=5), end=START + timedelta(minutes=50))

    assert whole_hours(period) is None


def test_each_cycle_adds_its_rollups_to_its_hour(lab) -> None:
    store_cycles(lab, 12, every=timedelta(minutes=10))  # 10:00 .. 2:00, 6 a hour

    first_hour = TenantRollupHour.objects.get(cluster=lab, as_of=START, tenant_name="alpha")

    assert first_hour.cycles == 5  # 0:10 .. 0:50; 1:00 is the next hour's
    assert first_hour.interval_s == 5 * 600
    assert first_hour.allocated_gpu_s == sum(2 + i % 3 for i in range(5)) * 600


@pytest.mark.parametrize(
    "period",
    [DAY, ReportPeriod(start=START, end=START + timedelta(days=10))],
    ids=["hour-bins", "day-bins"],
)
def test_the_report_from_hourly_rows_is_the_report_from_cycles(
    lab, bob, monkeypatch, period
) -> None:
    store_cycles(lab, 70, every=timedelta(minutes=20))

    assert report(bob, lab, period) == from_cycles_only(monkeypatch, bob, lab, period)


def test_the_whole_hours_are_not_read_from_the_per_cycle_rows(lab, bob) -> None:
    store_cycles(lab, 70, every=timedelta(minutes=20))
    before = report(bob, lab, DAY)
    first, last = whole_hours(DAY)
    TenantRollup.objects.filter(as_of__gte=first, as_of__lt=last).delete()
    PoolRollup.objects.filter(as_of__gte=first, as_of__lt=last).delete()

    assert report(bob, lab, DAY) == before


def test_rollups_stored_before_the_hourly_rows_are_summed_by_a_rebuild(
    lab, bob, monkeypatch
) -> None:
    store_cycles(lab, 70, every=timedelta(minutes=20), hourly=False)

    rebuild_all_hours(lab.pk)

    assert report(bob, lab, DAY) == from_cycles_only(monkeypatch, bob, lab, DAY)


def test_the_report_costs_the_same_with_ten_or_a_hundred_cycles(lab, make_cluster, bob) -> None:
    few = make_cluster("few-cycles")
    store_cycles(few, 10, every=timedelta(hours=2))  # 20 hours either way
    store_cycles(lab, 100, every=timedelta(minutes=12))

    costs = []
    for cluster in (few, lab):
        build_fairness_report(bob, cluster, DAY)  # the reader's roles are loaded once
        with CaptureQueriesContext(connection) as queries:
            build_fairness_report(bob, cluster, DAY)
        costs.append(len(queries))

    assert costs[0] == costs[1]
    assert TenantRollupHour.objects.filter(cluster=lab).count() == 2 * 21  # tenants x 0:00-20:00
