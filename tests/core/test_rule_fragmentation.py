"""The ``fragmentation`` rule (docs/rules.md)."""

from __future__ import annotations

import numpy as np
import pytest

from diagnosis.core.rules.builtin.fragmentation import fgd_fragment_gpus, frag_ratio
from diagnosis.core.rules.engine import run_rules
from tests.support.builders import SnapshotBuilder


def half_full_pool(nodes: int = 4, pool: str = "a100", builder=None) -> SnapshotBuilder:
    """``nodes`` 8-GPU nodes, each with a running 4-GPU job: 4 free GPUs on every node."""
    builder = builder or SnapshotBuilder()
    builder.pool(pool, nodes=nodes)
    for i in range(nodes):
        builder.job(f"{pool}-small{i}", pool=pool, gpus_per_pod=4, node=f"{pool}-{i:03d}")
    return builder


def findings(snapshot, rule="fragmentation", **overrides):
    diagnosis = run_rules(snapshot, {rule: overrides} if overrides else None, only=[rule])
    assert not diagnosis.errors
    return diagnosis.findings


def test_fires_when_free_gpus_suffice_but_no_node_has_room():
    snap = half_full_pool().job("big", state="pending", gpus_per_pod=8, waited="20m").build()

    [finding] = findings(snap)

    assert finding.subject == "pool:a100"
    assert finding.evidence["free_gpus"] == 16
    assert finding.evidence["free_per_node_histogram"] == {"4": 4}
    assert finding.evidence["blocked_jobs"] == [
        {
            "id": "big",
            "shape": "1x8",
            "pods": 1,
            "gpus_per_pod": 8,
            "request_gpus": 8,
            "wait_s": 1200.0,
            "queue": "team-a",
        }
    ]
    assert finding.evidence["largest_blocked_pod_gpus"] == 8
    assert finding.evidence["frag_ratio"] == 1.0


@pytest.mark.parametrize(("waited", "fires"), [(599, False), (600, True)])
def test_min_wait_boundary(waited, fires):
    snap = half_full_pool().job("big", state="pending", gpus_per_pod=8, waited=waited).build()

    assert bool(findings(snap)) is fires


def test_min_wait_override():
    snap = half_full_pool().job("big", state="pending", gpus_per_pod=8, waited="20m").build()

    assert not findings(snap, min_wait=1201)


def test_placeable_job_is_not_blocked():
    builder = half_full_pool(nodes=3).node("a100-free", pool="a100")
    snap = builder.job("big", state="pending", gpus_per_pod=8, waited="2h").build()

    assert not findings(snap)


@pytest.mark.parametrize(("pods", "fires"), [(2, True), (3, False)])
def test_pool_free_total_must_cover_the_request(pods, fires):
    """16 free GPUs: a 2 × 8 job (16) is blocked by fragmentation, a 3 × 8 job (24) is not."""
    snap = half_full_pool().job("big", state="pending", pods=pods, waited="2h").build()

    assert bool(findings(snap)) is fires


@pytest.mark.parametrize(("capability", "fires"), [(16, True), (15, False)])
def test_queue_capability_must_not_be_exceeded(capability, fires):
    """The queue holds 8 GPUs already (two 4-GPU jobs): 8 + 8 <= 16 fits, 8 + 8 > 15 does not."""
    builder = SnapshotBuilder().pool("a100", nodes=2).queue("q", capability_gpus=capability)
    builder.job("s0", gpus_per_pod=4, node="a100-000", queue="q")
    builder.job("s1", gpus_per_pod=4, node="a100-001", queue="q")
    snap = builder.job("big", state="pending", gpus_per_pod=8, queue="q", waited="2h").build()

    assert bool(findings(snap)) is fires


def test_queue_without_capability_is_not_limited():
    builder = half_full_pool(nodes=2).queue("q", deserved_gpus=1)
    snap = builder.job("big", state="pending", gpus_per_pod=8, queue="q", waited="2h").build()

    assert findings(snap)


@pytest.mark.parametrize(("nodes", "severity"), [(10, "critical"), (11, "warning")])
def test_critical_from_ten_percent_of_the_pool(nodes, severity):
    """8 blocked GPUs: 10% of an 80-GPU pool is critical, 9.1% of an 88-GPU pool a warning."""
    snap = half_full_pool(nodes=nodes).job("big", state="pending", waited="2h").build()

    [finding] = findings(snap)

    assert finding.severity == severity


def test_only_jobs_past_min_wait_count_as_blocked_demand():
    """A young blocked job is neither listed nor counted toward the 10% of an 88-GPU pool."""
    builder = half_full_pool(nodes=11).job("old", state="pending", waited="2h")
    snap = builder.job("young", state="pending", waited="5m").build()

    [finding] = findings(snap)

    assert [j["id"] for j in finding.evidence["blocked_jobs"]] == ["old"]
    assert finding.evidence["blocked_gpus"] == 8
    assert finding.severity == "warning"


def test_pool_with_no_free_gpus_is_not_fragmented():
    builder = SnapshotBuilder().pool("a100", nodes=2)
    builder.job("r0", node="a100-000").job("r1", node="a100-001")
    snap = builder.job("big", state="pending", gpus_per_pod=8, waited="2h").build()

    assert not findings(snap)


def test_drained_node_gpus_are_not_free():
    """With the drained node's 8 idle GPUs counted as free the job would be placeable."""
    builder = half_full_pool(nodes=2).node("a100-drained", pool="a100", state="drained")
    snap = builder.job("big", state="pending", gpus_per_pod=8, waited="2h").build()

    [finding] = findings(snap)

    assert finding.evidence["free_gpus"] == 8
    assert finding.evidence["free_per_node_histogram"] == {"0": 1, "4": 2}


def test_unhealthy_gpu_is_not_free():
    """An otherwise empty node with one unhealthy GPU cannot host an 8-GPU pod."""
    builder = (
        half_full_pool(nodes=1)
        .node("a100-sick", pool="a100")
        .gpu("a100-sick", 0, health="unhealthy")
    )
    snap = builder.job("big", state="pending", gpus_per_pod=8, waited="2h").build()

    [finding] = findings(snap)

    assert finding.evidence["free_gpus"] == 11
    assert finding.evidence["free_per_node_histogram"] == {"4": 1, "7": 1}


def test_job_with_an_allocation_is_not_judged():
    """A partial gang is gang-partial-hold's business, not fragmentation's."""
    builder = half_full_pool(nodes=3)
    snap = builder.job(
        "gang", state="pending", pods=2, gpus_per_pod=4, bound=1, node="a100-000", waited="2h"
    ).build()

    assert not findings(snap)


def test_one_finding_per_pool_listing_every_blocked_job():
    builder = half_full_pool(nodes=4)
    half_full_pool(nodes=2, pool="h100", builder=builder)
    builder.job("a", state="pending", waited="2h").job("b", state="pending", waited="3h")
    snap = builder.job("c", state="pending", pool="h100", waited="1h").build()

    by_subject = {f.subject: f for f in findings(snap)}

    assert set(by_subject) == {"pool:a100", "pool:h100"}
    assert [j["id"] for j in by_subject["pool:a100"].evidence["blocked_jobs"]] == ["b", "a"]
    assert by_subject["pool:a100"].evidence["blocked_gpus"] == 16
    assert by_subject["pool:h100"].evidence["free_gpus"] == 8


def test_job_without_pool_in_a_one_pool_cluster_is_reported_under_that_pool():
    snap = half_full_pool().job("big", state="pending", pool=None, waited="2h").build()

    [finding] = findings(snap)

    assert finding.subject == "pool:a100"


def test_job_without_pool_in_a_multi_pool_cluster_is_reported_for_the_cluster():
    builder = half_full_pool(nodes=1)
    half_full_pool(nodes=1, pool="h100", builder=builder)
    snap = builder.job("big", state="pending", pool=None, waited="2h").build()

    [finding] = findings(snap)

    assert finding.subject == "cluster:test"
    assert finding.evidence["free_gpus"] == 8
    assert finding.evidence["pool"] is None


def test_fgd_measure_weights_shapes_by_popularity():
    """Shapes: four 4-GPU jobs and one 8-GPU job (popularity 0.8 / 0.2). Every node has 4 free
    GPUs: fragment for the 8-GPU shape only, so F = 4 nodes × 4 GPUs × 0.2 = 3.2 GPUs."""
    snap = half_full_pool().job("big", state="pending", waited="2h").build()

    [finding] = findings(snap)

    assert finding.evidence["fgd_fragment_gpus"] == pytest.approx(3.2)
    assert finding.evidence["fgd_fragment_pct"] == pytest.approx(10.0)
    assert finding.evidence["fgd_shapes"] == [
        {"gpus_per_pod": 4, "popularity": 0.8},
        {"gpus_per_pod": 8, "popularity": 0.2},
    ]


def test_a_job_both_starving_and_fragmentation_blocked_fires_both_rules():
    builder = half_full_pool().job("big", state="pending", waited="5h")
    for i in range(3):
        builder.job(f"later{i}", state="completed", gpus_per_pod=1, waited="2h", started="2h")
    snap = builder.build()

    diagnosis = run_rules(snap, only=["fragmentation", "starvation"])

    assert {(f.rule, f.subject) for f in diagnosis.findings} == {
        ("fragmentation", "pool:a100"),
        ("starvation", "job:big"),
    }


def test_placement_policy_is_in_the_evidence():
    snap = (
        half_full_pool()
        .placement("a100", "spread")
        .job("big", state="pending", waited="2h")
        .build()
    )

    [finding] = findings(snap)

    assert finding.evidence["placement_policy"] == "spread"


@pytest.mark.parametrize(
    ("free", "size", "expected"),
    [
        ([3, 5], 4, 0.5),
        ([8, 8], 8, 0.0),
        ([1, 1, 1], 2, 1.0),
        ([0, 0], 4, 0.0),
    ],
)
def test_frag_ratio(free, size, expected):
    assert frag_ratio(np.array(free), size) == pytest.approx(expected)


def test_fgd_counts_all_free_gpus_of_a_node_too_small_for_a_shape():
    free = np.array([0, 2, 4, 8])
    # shape 4 (p=0.5): only the 2-free node is fragment (2); shape 8 (p=0.5): 2 + 4 = 6.
    assert fgd_fragment_gpus(free, np.array([4, 8]), np.array([0.5, 0.5])) == pytest.approx(4.0)
