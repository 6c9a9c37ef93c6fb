"""Issue #13: the manager's fairness report divides the GPUs down the scheduler's hierarchy --
Kueue cohorts with their ``fairSharing.weight``, Volcano/KAI parent queues (``spec.parent``) --
so a tenant's fair share is its subtree's, not a flat share by the sum of its queues' weights.

16 usable GPUs; tenant ``research`` runs two queues, r1 and r2, in the cohort ``research-org``;
tenant ``prod`` one queue, ``prod``; every queue asks for 16 GPUs. Flat by tenant weight
(research 2, prod 1) research would get 10.7 and prod 5.3; down the tree the cohort and prod
share the top level by weight, 8 each at weight 1."""

from __future__ import annotations

import pytest

from diagnosis.core.diagnose import diagnose
from diagnosis.core.fairness import cycle_rollup, snapshot_tree
from tests.support.builders import SnapshotBuilder


def org(*, cohort_weight: float = 1.0, parents: bool = True) -> SnapshotBuilder:
    builder = SnapshotBuilder().pool("a100", nodes=2)
    for queue, tenant in (("r1", "research"), ("r2", "research"), ("prod", "prod")):
        builder.queue(queue, tenant=tenant, weight=1)
        builder.job(f"{queue}-job", state="pending", pods=2, tenant=tenant, queue=queue)
    if parents:
        builder.doc["scheduler"]["queue_parents"] = {"r1": "research-org", "r2": "research-org"}
        builder.doc["scheduler"]["cohorts"] = {"research-org": {"weight": cohort_weight}}
    return builder


def fair_gpus(builder: SnapshotBuilder) -> dict[str, float]:
    snap = builder.build()
    diagnosis, accounting = diagnose(snap)
    rollup = cycle_rollup(snap, accounting, diagnosis.facts, diagnosis.findings, interval_s=1)
    return {name: row.fair_gpu_s for name, row in rollup.tenants.items()}


def test_without_a_hierarchy_the_tenants_share_by_their_queues_weights():
    assert fair_gpus(org(parents=False)) == pytest.approx({"research": 32 / 3, "prod": 16 / 3})


def test_the_cohort_takes_its_share_at_the_top_level_for_its_tenant():
    assert fair_gpus(org()) == pytest.approx({"research": 8.0, "prod": 8.0})


def test_the_cohorts_weight_moves_its_tenants_share():
    assert fair_gpus(org(cohort_weight=3)) == pytest.approx({"research": 12.0, "prod": 4.0})


def test_the_tree_rows_show_each_nodes_share_through_it():
    rows = {row.name: row for row in snapshot_tree(org(cohort_weight=3).build())}
    assert [(r.name, r.depth, r.kind) for r in snapshot_tree(org(cohort_weight=3).build())] == [
        ("prod", 0, "queue"),
        ("research-org", 0, "cohort"),
        ("r1", 1, "queue"),
        ("r2", 1, "queue"),
    ]
    assert rows["research-org"].weight == 3
    assert rows["research-org"].fair_gpus == pytest.approx(12.0)
    assert rows["research-org"].demand_gpus == 32
    assert rows["r1"].fair_gpus == pytest.approx(6.0)
    assert rows["r1"].tenant == "research"
    assert rows["prod"].fair_gpus == pytest.approx(4.0)


def test_a_snapshot_without_a_hierarchy_has_no_tree():
    assert snapshot_tree(org(parents=False).build()) == ()
