"""Tenant fairness maths (diagnosis.core.fairness): hand-computed small cases with exact numbers."""

from __future__ import annotations

import pandas as pd
import pytest

from diagnosis.core.diagnose import diagnose
from diagnosis.core.fairness import (
    DominantShare,
    cycle_rollup,
    dominant_shares,
    fairness_report,
    finding_tenant,
    finding_tenants,
    jain_index,
    size_class,
    wait_stats,
    water_fill,
)
from diagnosis.core.rules.base import Finding
from tests.support.builders import SnapshotBuilder

# -- size classes and waits ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("gpus", "expected"),
    [(0, None), (1, "1"), (2, "2-8"), (8, "2-8"), (9, "9-64"), (64, "9-64"), (65, ">64")],
)
def test_size_classes_have_the_designs_boundaries(gpus, expected):
    assert size_class(gpus) == expected


def test_wait_percentiles_per_size_class_interpolate_linearly():
    overall, by_class = wait_stats([1, 1, 1, 4, 4, 100], [10, 20, 30, 100, 300, 50])

    assert (by_class["1"].jobs, by_class["1"].p50_s, by_class["1"].p95_s) == (3, 20, 29)
    assert (by_class["2-8"].p50_s, by_class["2-8"].p95_s) == (200, 290)
    assert (by_class[">64"].p50_s, by_class[">64"].p95_s) == (50, 50)
    assert (overall.jobs, overall.p50_s, overall.p95_s) == (6, 40, 250)


def test_a_size_class_without_jobs_has_no_percentiles():
    _, by_class = wait_stats([1], [5])

    assert (by_class["9-64"].jobs, by_class["9-64"].p50_s, by_class["9-64"].p95_s) == (
        0,
        None,
        None,
    )


def test_jobs_that_ask_for_no_gpu_are_in_no_class():
    overall, by_class = wait_stats([0, 2], [1000, 7])

    assert overall.jobs == 1
    assert by_class["2-8"].p50_s == 7


# -- water-filling -------------------------------------------------------------------------------


def test_water_filling_gives_a_capped_tenants_rest_to_the_others_by_entitlement():
    # Level 25 per unit of entitlement caps a at 10; the 90 left go 1:2 to b and c.
    fair = water_fill(100, {"a": 1, "b": 1, "c": 2}, {"a": 10, "b": 50, "c": 100})

    assert fair == pytest.approx({"a": 10, "b": 30, "c": 60})


def test_water_filling_meets_every_demand_when_capacity_allows():
    fair = water_fill(100, {"a": 3, "b": 1}, {"a": 20, "b": 30})

    assert fair == pytest.approx({"a": 20, "b": 30})


def test_water_filling_caps_at_demand_in_a_second_round():
    # Level 10: b (demand 5) is capped; 95 left for a and c (1:1), c is capped at 20; a takes 75.
    fair = water_fill(100, {"a": 1, "b": 1, "c": 1}, {"a": 200, "b": 5, "c": 20})

    assert fair == pytest.approx({"a": 75, "b": 5, "c": 20})


def test_tenants_without_entitlement_share_what_the_entitled_leave_equally():
    fair = water_fill(100, {"a": 1}, {"a": 40, "x": 100, "y": 10})

    assert fair == pytest.approx({"a": 40, "x": 50, "y": 10})


def test_a_tenant_without_demand_gets_nothing():
    assert water_fill(10, {"a": 1, "b": 1}, {"a": 0, "b": 4}) == pytest.approx({"a": 0, "b": 4})


# -- Jain's index and dominant shares --------------------------------------------------------------


def test_jain_index_of_two_ratios():
    assert jain_index([1.0, 0.5]) == pytest.approx(2.25 / 2.5)  # (1.5)^2 / (2 * 1.25) = 0.9


def test_jain_index_is_one_when_all_equal_and_one_over_n_when_one_has_all():
    assert jain_index([0.7, 0.7, 0.7]) == pytest.approx(1.0)
    assert jain_index([2.0, 0.0, 0.0, 0.0]) == pytest.approx(0.25)


def test_jain_index_is_unknown_without_values_or_when_all_are_zero():
    assert jain_index([]) is None
    assert jain_index([0.0, 0.0]) is None
    assert jain_index([None]) is None


def test_dominant_share_is_the_largest_share_of_any_resource():
    capacity = {"gpu": 100, "cpu": 1000, "memory": 4000}
    usage = {
        "a": {"gpu": 10, "cpu": 300, "memory": 400},
        "b": {"gpu": 50, "cpu": 100, "memory": 1000},
    }

    assert dominant_shares(usage, capacity) == {
        "a": DominantShare(0.3, "cpu"),
        "b": DominantShare(0.5, "gpu"),
    }


def test_the_report_gives_no_dominant_share_when_only_gpus_are_known():
    report = fairness_report(
        {"a": {"allocated_gpu_s": 10}},
        {"gpu_s": 100, "interval_s": 10},
        resources={"a": {"gpu": 10}},
        resource_capacity={"gpu": 100},
    )

    assert report.tenant("a").dominant_share is None


def test_the_report_gives_the_dominant_share_when_cpu_is_known():
    report = fairness_report(
        {"a": {"allocated_gpu_s": 10}},
        {"gpu_s": 100, "interval_s": 10},
        resources={"a": {"gpu": 10, "cpu": 600}},
        resource_capacity={"gpu": 100, "cpu": 1000},
    )

    assert (report.tenant("a").dominant_share, report.tenant("a").dominant_resource) == (
        0.6,
        "cpu",
    )


# -- one cycle ------------------------------------------------------------------------------------


def two_tenant_snapshot() -> SnapshotBuilder:
    """16 GPUs; tenant a (deserved 12) runs 8, tenant b (deserved 4) runs 4 and waits for 8."""
    return (
        SnapshotBuilder()
        .pool("a100", nodes=2, gpus=8)
        .queue("a", deserved_gpus=12)
        .queue("b", deserved_gpus=4)
        .job("a1", tenant="a", gpus_per_pod=8, node="a100-000", util=0.9, tflops=156.0)
        .job("b1", tenant="b", gpus_per_pod=4, node="a100-001", util=0.5)
        .job("b2", tenant="b", state="pending", gpus_per_pod=8, waited="1h")
    )


def rollup_of(builder: SnapshotBuilder, interval_s: float = 60.0, **kwargs):
    snap = builder.build()
    diagnosis, accounting = diagnose(snap)
    return cycle_rollup(
        snap, accounting, diagnosis.facts, diagnosis.findings, interval_s=interval_s, **kwargs
    )


def test_a_cycle_rolls_up_demand_fair_share_and_entitlement_per_tenant():
    # usable 16; demand a 8, b 4 + 8 = 12; deserved 12:4. Level 1 caps a at 8, b gets the 8 left.
    rollup = rollup_of(two_tenant_snapshot())
    a, b = rollup.tenants["a"], rollup.tenants["b"]

    assert rollup.entitlement_basis == "deserved"
    assert (a.entitlement, b.entitlement) == (0.75, 0.25)
    assert (a.allocated_gpu_s, a.demanded_gpu_s, a.fair_gpu_s) == (480, 480, 480)
    assert (b.allocated_gpu_s, b.demanded_gpu_s, b.fair_gpu_s) == (240, 720, 480)


def test_a_cycle_rolls_up_the_accounting_buckets_util_and_mfu():
    rollup = rollup_of(two_tenant_snapshot())
    a, cluster = rollup.tenants["a"], rollup.pools[""]

    assert a.busy_gpu_s == 480
    assert a.used_gpu_s == pytest.approx(0.9 * 480)
    assert a.productive_gpu_s == pytest.approx(156.0 / 312.0 * 480)  # A100 peak 312 TFLOP/s
    assert (cluster.gpu_s, cluster.busy_gpu_s, cluster.free_no_demand_gpu_s) == (960, 720, 240)
    assert rollup.pools["a100"].demanded_gpu_s == (8 + 12) * 60


def test_weights_are_the_entitlement_when_a_tenant_with_demand_has_no_deserved():
    builder = (
        SnapshotBuilder()
        .pool("a100", nodes=1, gpus=8)
        .queue("a", deserved_gpus=6, weight=3)
        .queue("b", weight=1)
        .job("b1", tenant="b", gpus_per_pod=2, node="a100-000")
    )
    rollup = rollup_of(builder)

    assert rollup.entitlement_basis == "weight"
    assert (rollup.tenants["a"].entitlement, rollup.tenants["b"].entitlement) == (0.75, 0.25)


def test_a_cycle_counts_starving_job_seconds_and_preemptions_per_tenant():
    rollup = rollup_of(two_tenant_snapshot(), preemptions={"b1": 2, "unknown": 5})
    b = rollup.tenants["b"]

    assert b.preemptions == 2
    assert rollup.pools[""].preemptions == 2
    assert b.starving_job_s == 0


# -- one period -----------------------------------------------------------------------------------


def test_the_period_report_divides_by_usable_gpu_seconds():
    rollup = rollup_of(two_tenant_snapshot())
    tenant_sums = {
        name: {**t.held_figures(), "fair_gpu_s": t.fair_gpu_s, "entitlement_s": t.entitlement * 60}
        for name, t in rollup.tenants.items()
    }
    cluster = rollup.pools[""]
    cluster_sums = {**cluster.held_figures(), "gpu_s": cluster.gpu_s, "interval_s": 60}

    report = fairness_report(tenant_sums, cluster_sums)

    a, b = report.tenant("a"), report.tenant("b")
    assert (a.usage, a.fair_share, a.ratio, a.entitlement) == (0.5, 0.5, 1.0, 0.75)
    assert (b.usage, b.fair_share, b.ratio, b.entitlement) == (0.25, 0.5, 0.5, 0.25)
    assert b.demand_gpu_hours == 720 / 3600
    assert report.jain_index == pytest.approx(0.9)


def test_rows_can_be_narrowed_while_jain_stays_the_clusters():
    sums = {"a": {"allocated_gpu_s": 50, "fair_gpu_s": 50, "demanded_gpu_s": 60}}
    sums["b"] = {"allocated_gpu_s": 25, "fair_gpu_s": 50, "demanded_gpu_s": 60}

    report = fairness_report(sums, {"gpu_s": 100, "interval_s": 1}, visible={"b"})

    assert [row.tenant for row in report.tenants] == ["b"]
    assert report.jain_index == pytest.approx(0.9)


def test_a_tenant_without_fair_share_has_no_ratio():
    report = fairness_report({"a": {"allocated_gpu_s": 0}}, {"gpu_s": 100, "interval_s": 1})

    assert report.tenant("a").ratio is None
    assert report.jain_index is None


def test_the_report_pools_the_waits_of_its_rows():
    report = fairness_report(
        {"a": {}, "b": {}},
        {"gpu_s": 1, "interval_s": 1},
        waits={"a": ([1, 1], [10, 30]), "b": ([8], [100])},
    )

    assert report.tenant("a").wait.p50_s == 20
    assert (report.wait.jobs, report.wait.p50_s) == (3, 30)
    assert report.waits["2-8"].p50_s == 100


# -- which tenant a finding concerns --------------------------------------------------------------

JOB_TENANTS = pd.Series({"j1": "a", "j2": "a", "j3": "b", "j4": "(no tenant)"})


def hit(subject: str, **evidence) -> Finding:
    return Finding(rule="r", subject=subject, severity="warning", summary="", evidence=evidence)


@pytest.mark.parametrize(
    ("subject", "evidence", "tenant"),
    [
        ("job:j1", {}, "a"),
        ("job:j4", {}, None),
        ("job:gone", {}, None),
        ("jobs:j1+j2", {}, "a"),
        ("jobs:j1+j3", {}, None),
        ("tenant:b", {}, "b"),
        ("gpu:n1/0", {"jobs": [{"id": "j3", "tenant": "b"}]}, "b"),
        ("gpu:n1/0", {"jobs": [{"id": "j1"}, {"id": "j3"}]}, None),
        ("gpu:n1/0", {"jobs": []}, None),
        ("pool:a100", {}, None),
        ("node:n1", {}, None),
    ],
)
def test_a_finding_belongs_to_one_tenant_or_none(subject, evidence, tenant):
    assert finding_tenant(hit(subject, **evidence), JOB_TENANTS) == tenant


def test_findings_read_at_once_belong_to_the_tenants_each_belongs_to():
    tenants = {"j1": "a", "j3": "b", "j4": "(no tenant)", "j5": "", "j6": None}
    subjects = ["job:j1", "job:j4", "job:j5", "job:j6", "job:gone", "job:", "jobs:j1+j3"]
    hits = [hit(s) for s in subjects] + [hit("gpu:n1/0", jobs=[{"id": "j3"}]), hit("tenant:c")]

    assert finding_tenants(hits, tenants) == [finding_tenant(h, tenants) for h in hits]
    assert finding_tenants(hits, tenants) == ["a", None, None, None, None, None, None, "b", "c"]
