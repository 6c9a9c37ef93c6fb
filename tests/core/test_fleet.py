"""The fleet's pure maths (diagnosis/core/fleet.py): one row per tenant name over clusters,
GPU-hours summed, each cluster's part at its own price, money rounded once; no total cost when
a part is unpriced; the top waste bucket of a cluster. Inputs are rollup column sums in
GPU-seconds, the shape ``TenantRollup`` and ``PoolRollup`` rows have."""

from __future__ import annotations

from decimal import Decimal

from diagnosis.core.cost import Pricing
from diagnosis.core.fleet import fleet_tenants, top_waste

EAST = Pricing("USD", Decimal("2.00"))
WEST = Pricing("USD", Decimal("3.00"))
UNPRICED = Pricing("USD", None, "no-prices")


def test_a_tenant_on_two_clusters_is_one_row_with_its_parts() -> None:
    sums = {
        ("east", "alpha"): {"allocated_gpu_s": 3600.0, "fair_gpu_s": 7200.0, "idle_gpu_s": 1800},
        ("west", "alpha"): {"allocated_gpu_s": 1800.0, "fair_gpu_s": 1800.0},
        ("west", "bravo"): {"allocated_gpu_s": 36.0},
    }

    rows = fleet_tenants(sums, {"east": EAST, "west": WEST})

    assert [row.tenant for row in rows] == ["alpha", "bravo"]
    alpha = rows[0]
    assert alpha.clusters == ("east", "west")
    assert alpha.allocated_gpu_hours == 1.5
    assert alpha.fair_gpu_hours == 2.5
    assert alpha.ratio == 1.5 / 2.5
    assert alpha.wasted_gpu_hours == 0.5
    assert alpha.cost.as_text() == "3.50"  # 1 h × 2.00 + 0.5 h × 3.00
    assert alpha.wasted_cost.as_text() == "1.00"
    assert [p.money.as_text() for p in alpha.parts] == ["2.00", "1.50"]
    assert rows[1].cost.as_text() == "0.03"


def test_the_sum_is_rounded_once_not_part_by_part() -> None:
    cent = Pricing("USD", Decimal("0.01"))
    sums = {(c, "alpha"): {"allocated_gpu_s": 1440.0} for c in ("a", "b", "c")}  # 0.4 h each

    (alpha,) = fleet_tenants(sums, dict.fromkeys("abc", cent))

    assert [p.money.as_text() for p in alpha.parts] == ["0.00", "0.00", "0.00"]
    assert alpha.cost.as_text() == "0.01"


def test_a_part_on_an_unpriced_cluster_leaves_no_total() -> None:
    sums = {("east", "alpha"): {"allocated_gpu_s": 3600.0}, ("west", "alpha"): {}}

    (alpha,) = fleet_tenants(sums, {"east": EAST, "west": UNPRICED})

    assert alpha.parts[0].money.as_text() == "2.00"
    assert alpha.parts[1].money is None
    assert alpha.cost is None
    assert alpha.as_dict()["cost"] is None


def test_the_top_waste_bucket_is_the_one_that_lost_the_most() -> None:
    sums = {"gpu_s": 36000.0, "busy_gpu_s": 20000.0, "idle_gpu_s": 7200.0, "unavailable_gpu_s": 10}

    waste = top_waste(sums, WEST)

    assert (waste.bucket, waste.gpu_hours, waste.share) == ("allocated-idle", 2.0, 0.2)
    assert waste.cost.as_text() == "6.00"
    assert top_waste({"gpu_s": 100.0, "busy_gpu_s": 100.0}, WEST) is None
    assert top_waste(sums, UNPRICED).cost is None
