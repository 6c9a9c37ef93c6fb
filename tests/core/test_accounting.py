"""GPU-hour accounting (docs/accounting.md)."""

from __future__ import annotations

import json
import math

import pytest

from diagnosis.core.accounting import BUCKETS, account
from diagnosis.core.rules.base import Finding
from diagnosis.core.rules.engine import run_rules
from tests.support.builders import SnapshotBuilder


def buckets(snapshot, findings=()) -> dict[str, int]:
    """The cluster's non-empty buckets."""
    counts = account(snapshot, findings).cluster.buckets
    return {name: count for name, count in counts.items() if count}


def data_starvation(job_id: str) -> Finding:
    return Finding("data-starvation", f"job:{job_id}", "warning", "starved", {})


def test_bucket_names_and_order_are_the_designs():
    assert BUCKETS == (
        "unavailable",
        "held-by-partial-gang",
        "allocated-hung",
        "allocated-idle",
        "allocated-data-starved",
        "allocated-busy",
        "free-fragmented",
        "free-demand",
        "free-no-demand",
    )


def test_busy_job_and_free_node():
    snap = SnapshotBuilder().pool("a100", nodes=2).job("j", node="a100-000", util=0.9).build()

    assert buckets(snap) == {"allocated-busy": 8, "free-no-demand": 8}


@pytest.mark.parametrize(("util", "bucket"), [(0.049, "allocated-idle"), (0.05, "allocated-busy")])
def test_idle_below_five_percent_util(util, bucket):
    snap = SnapshotBuilder().pool("a100", nodes=1).job("j", node="a100-000", util=util).build()

    assert buckets(snap) == {bucket: 8}


def test_idle_is_judged_on_the_jobs_mean_util():
    builder = SnapshotBuilder().pool("a100", nodes=1).job("j", node="a100-000", util=0.0)
    snap = builder.gpu("a100-000", 0, util=0.8).build()  # mean 0.1

    assert buckets(snap) == {"allocated-busy": 8}


def test_job_without_util_readings_is_counted_busy_not_idle():
    snap = SnapshotBuilder().pool("a100", nodes=1).job("j", node="a100-000").build()

    assert buckets(snap) == {"allocated-busy": 8}


def test_data_starved_job_from_its_finding():
    builder = SnapshotBuilder().pool("a100", nodes=1)
    snap = (
        builder.job("j", gpus_per_pod=4, node="a100-000", util=0.3)
        .job("k", gpus_per_pod=4, node="a100-000", util=0.3)
        .build()
    )

    assert buckets(snap, [data_starvation("j")]) == {
        "allocated-data-starved": 4,
        "allocated-busy": 4,
    }


def test_idle_comes_before_data_starved():
    snap = SnapshotBuilder().pool("a100", nodes=1).job("j", node="a100-000", util=0.0).build()

    assert buckets(snap, [data_starvation("j")]) == {"allocated-idle": 8}


def test_partial_gang_comes_before_idle():
    builder = SnapshotBuilder().pool("a100", nodes=2)
    snap = builder.job(
        "g", state="pending", pods=2, gpus_per_pod=8, bound=1, node="a100-000", util=0.0
    ).build()

    assert buckets(snap)["held-by-partial-gang"] == 8


def test_drained_node_is_unavailable_even_when_held():
    builder = SnapshotBuilder().node("n0", state="drained").node("n1", state="down")
    snap = builder.job("j", node="n0", util=0.9).build()

    assert buckets(snap) == {"unavailable": 16}


@pytest.mark.parametrize("state", ["cordoned", "drained", "down"])
def test_every_not_ready_state_is_unavailable(state):
    snap = SnapshotBuilder().node("n0", state=state).build()

    assert buckets(snap) == {"unavailable": 8}


def test_unhealthy_gpu_is_unavailable_even_when_held():
    builder = SnapshotBuilder().pool("a100", nodes=1).gpu("a100-000", 3, health="unhealthy")
    snap = builder.job("j", gpus_per_pod=4, node="a100-000", util=0.9).build()

    assert buckets(snap) == {"unavailable": 1, "allocated-busy": 3, "free-no-demand": 4}


def test_unhealthy_free_gpu_is_unavailable_not_free():
    snap = SnapshotBuilder().pool("a100", nodes=1).gpu("a100-000", 7, health="unhealthy").build()

    assert buckets(snap) == {"unavailable": 1, "free-no-demand": 7}


def fragmented_pool() -> SnapshotBuilder:
    """4 nodes with a 4-GPU job each: 16 free GPUs, 4 per node."""
    builder = SnapshotBuilder().pool("a100", nodes=4)
    for i in range(4):
        builder.job(f"s{i}", gpus_per_pod=4, node=f"a100-{i:03d}", util=0.9)
    return builder


def test_free_fragmented_up_to_the_blocked_demand():
    """An 8-GPU job is fragmentation-blocked: 8 of the 16 free GPUs are fragmented."""
    snap = fragmented_pool().job("big", state="pending", waited="1m").build()

    assert buckets(snap) == {"allocated-busy": 16, "free-fragmented": 8, "free-no-demand": 8}


def test_free_fragmented_is_capped_by_the_free_gpus():
    """Two blocked 16-GPU jobs (32) against 16 free GPUs: all 16 are fragmented, no more."""
    builder = fragmented_pool().job("a", state="pending", pods=2).job("b", state="pending", pods=2)

    assert buckets(builder.build()) == {"allocated-busy": 16, "free-fragmented": 16}


def test_free_demand_for_placeable_pending_jobs():
    builder = SnapshotBuilder().pool("a100", nodes=2).job("j", node="a100-000", util=0.9)
    snap = builder.job("small", state="pending", gpus_per_pod=2).build()

    assert buckets(snap) == {"allocated-busy": 8, "free-demand": 2, "free-no-demand": 6}


def test_fragmented_comes_before_demand():
    snap = (
        fragmented_pool()
        .job("big", state="pending")
        .job("small", state="pending", gpus_per_pod=2)
        .build()
    )

    assert buckets(snap) == {
        "allocated-busy": 16,
        "free-fragmented": 8,
        "free-demand": 2,
        "free-no-demand": 6,
    }


def test_placeable_missing_pods_of_a_partial_gang_are_demand():
    builder = SnapshotBuilder().pool("a100", nodes=3)
    snap = builder.job(
        "g", state="pending", pods=2, gpus_per_pod=8, bound=1, node="a100-000"
    ).build()

    assert buckets(snap) == {"held-by-partial-gang": 8, "free-demand": 8, "free-no-demand": 8}


def test_demand_of_jobs_without_a_pool_fills_pools_in_name_order():
    builder = SnapshotBuilder().pool("b", nodes=1).pool("a", nodes=1)
    snap = builder.job("any", state="pending", pool=None, gpus_per_pod=4, pods=3).build()

    result = account(snap)

    assert result.pools["a"].buckets["free-demand"] == 8
    assert result.pools["b"].buckets["free-demand"] == 4


def test_pending_demand_counts_only_in_its_own_pool():
    builder = SnapshotBuilder().pool("a", nodes=1).pool("b", nodes=1)
    snap = builder.job("x", state="pending", pool="b", gpus_per_pod=2).build()

    result = account(snap)

    assert result.pools["a"].buckets["free-demand"] == 0
    assert result.pools["b"].buckets["free-demand"] == 2


def test_every_gpu_has_one_bucket_and_buckets_sum_to_capacity_everywhere():
    builder = fragmented_pool().pool("h100", nodes=2, gpu_model="H100-SXM5-80GB")
    builder.node("h100-down", pool="h100", state="down")
    builder.job("h", pool="h100", node="h100-000", util=0.02, tenant="team-b")
    builder.job("g", state="pending", pool="h100", pods=3, bound=1, node="h100-001")
    snap = builder.job("big", state="pending").build()

    result = account(snap)

    assert result.gpu_bucket.notna().all()
    assert len(result.gpu_bucket) == snap.total_gpus == result.cluster.gpus == 56
    for scope in [result.cluster, *result.pools.values(), *result.tenants.values()]:
        assert sum(scope.buckets.values()) == scope.gpus
    assert sum(b.gpus for b in result.pools.values()) == 56
    assert sum(b.gpus for b in result.tenants.values()) == 56


def test_per_tenant_free_gpus_are_unallocated():
    builder = SnapshotBuilder().pool("a100", nodes=2)
    builder.job("a", node="a100-000", gpus_per_pod=4, util=0.9, tenant="team-a")
    snap = builder.job("b", node="a100-000", gpus_per_pod=4, util=0.0, tenant="team-b").build()

    tenants = account(snap).tenants

    assert set(tenants) == {"team-a", "team-b", None}
    assert tenants["team-a"].buckets["allocated-busy"] == 4
    assert tenants["team-b"].buckets["allocated-idle"] == 4
    assert tenants[None].buckets["free-no-demand"] == 8


def test_gpu_hours_are_gpus_times_the_window():
    snap = SnapshotBuilder(window_s=1800).pool("a100", nodes=1).build()

    data = account(snap).as_dict()["cluster"]

    assert data["gpu_hours"] == 4.0
    assert data["buckets"]["free-no-demand"] == {"gpus": 8, "gpu_hours": 4.0}


def test_allocation_utilization_is_held_over_all_gpus():
    builder = SnapshotBuilder().pool("a100", nodes=3).node("n-down", state="down")
    snap = builder.job("j", node="a100-000", util=0.9).build()

    assert account(snap).cluster.allocation_utilization == pytest.approx(8 / 32)


def test_activity_utilization_over_gpus_with_a_reading():
    builder = SnapshotBuilder().pool("a100", nodes=2)
    snap = builder.job("j", node="a100-000", util=0.5).gpu("a100-001", 0, util=0.1).build()

    cluster = account(snap).cluster

    assert cluster.activity_utilization == pytest.approx((8 * 0.5 + 0.1) / 9)
    assert cluster.activity_coverage == pytest.approx(9 / 16)


def test_productive_gpus_from_achieved_tflops_over_peak():
    """A100 peak 312 TFLOP/s: 156 achieved is an MFU of 0.5 on each of 8 GPUs."""
    snap = (
        SnapshotBuilder()
        .pool("a100", nodes=1)
        .job("j", node="a100-000", util=0.9, tflops=156.0, tensor_active=0.9)
        .build()
    )

    cluster = account(snap).cluster

    assert cluster.productive_gpus == pytest.approx(4.0)
    assert cluster.mfu_coverage == 1.0


def test_productive_gpus_fall_back_to_tensor_activity():
    builder = SnapshotBuilder().pool("a100", nodes=1)
    builder.job("j", gpus_per_pod=4, node="a100-000", util=0.9, tensor_active=0.25)
    snap = builder.job("k", gpus_per_pod=4, node="a100-000", util=0.9).build()

    cluster = account(snap).cluster

    assert cluster.productive_gpus == pytest.approx(1.0)
    assert cluster.mfu_coverage == 0.5


def test_productive_gpus_count_only_busy_gpus():
    snap = (
        SnapshotBuilder()
        .pool("a100", nodes=1)
        .job("j", node="a100-000", util=0.01, tensor_active=0.5)
        .build()
    )

    assert account(snap).cluster.productive_gpus == 0.0


def test_account_takes_findings_from_a_diagnosis():
    snap = fragmented_pool().job("big", state="pending", waited="1h").build()

    diagnosis = run_rules(snap, only=["fragmentation"])
    result = account(diagnosis)

    assert result.findings["free-fragmented"] == ("fragmentation pool:a100",)


def test_account_of_a_diagnosis_uses_its_data_starvation_findings():
    snap = SnapshotBuilder().pool("a100", nodes=1).job("j", node="a100-000", util=0.3).build()
    diagnosis = run_rules(snap, only=[])
    diagnosis = type(diagnosis)(
        snapshot=snap,
        findings=(data_starvation("j"),),
        errors=(),
        not_judged={},
        facts=diagnosis.facts,
    )

    assert account(diagnosis).cluster.buckets["allocated-data-starved"] == 8


def test_as_dict_is_plain_json_without_nan():
    snap = SnapshotBuilder().pool("a100", nodes=1).node("x", pool="h100", state="down").build()

    data = account(snap).as_dict()
    text = json.dumps(data, allow_nan=False)

    assert json.loads(text) == data
    h100 = next(p for p in data["pools"] if p["pool"] == "h100")
    assert h100["activity_utilization"] is None
    assert data["tenants"][-1]["tenant"] is None
    assert data["tenants"][-1]["label"] == "(unallocated)"


def test_empty_cluster():
    result = account(SnapshotBuilder().build())

    assert result.cluster.gpus == 0
    assert math.isnan(result.cluster.allocation_utilization)
    assert result.as_dict()["cluster"]["allocation_utilization"] is None
