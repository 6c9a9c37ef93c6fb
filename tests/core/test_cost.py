"""The cost maths (diagnosis/core/cost.py, docs/accounting.md "Cost"): prices parsed exactly,
one price per cluster or a reason why none, money as GPU-hours × price rounded once, to the
cent. GPU model names: A100-SXM4-80GB as the snapshot format's own example (docs/snapshot.md),
"NVIDIA H100 80GB HBM3" as dcgm-exporter's ``modelName`` label reports it in a real scrape
(../shared/data/dcgm/dcgm-exporter_metrics_sample_H100_MIG__issue512_excerpt.prom)."""

from __future__ import annotations

from decimal import Decimal

import pytest

from diagnosis.core import cost
from tests.support.builders import SnapshotBuilder

A100 = "A100-SXM4-80GB"
H100 = "NVIDIA H100 80GB HBM3"


def test_a_float_price_is_read_by_its_text_not_its_binary_neighbour() -> None:
    assert cost.parse_price(2.1) == Decimal("2.1")
    assert cost.parse_price("2.10") == Decimal("2.10")
    assert cost.parse_price(3) == Decimal(3)


@pytest.mark.parametrize("bad", [-1, "abc", float("nan"), True, None, "1e9", "Infinity"])
def test_what_is_not_a_price_is_refused(bad) -> None:
    with pytest.raises(ValueError, match=r"number|price"):
        cost.parse_price(bad)


def test_the_setting_text_names_every_bad_entry() -> None:
    assert cost.parse_price_text(f"{A100}=2.10, *=1", where="S") == {
        A100: Decimal("2.10"),
        "*": Decimal(1),
    }
    with pytest.raises(cost.PriceError) as raised:
        cost.parse_price_text("A100=x,H100", where="S")
    assert len(raised.value.problems) == 1  # "H100" has no "="; the first pass stops there
    assert "H100" in raised.value.problems[0]


def test_a_cluster_of_one_model_is_priced_at_its_price() -> None:
    pricing = cost.cluster_pricing({A100: 16}, {A100.lower(): Decimal("2.10")}, "EUR")
    assert (pricing.price, pricing.currency, pricing.reason) == (Decimal("2.10"), "EUR", "")


def test_the_any_model_price_covers_a_model_the_table_does_not_name() -> None:
    pricing = cost.cluster_pricing({H100: 8}, {"*": Decimal("1.5")}, "USD")
    assert pricing.price == Decimal("1.5")


@pytest.mark.parametrize(
    ("models", "table", "reason"),
    [
        ({A100: 8}, {}, cost.NO_PRICES),
        (None, {A100: Decimal(2)}, cost.MODELS_UNKNOWN),
        ({A100: 8, H100: 8}, {A100: Decimal(2)}, cost.UNPRICED_MODEL),
        ({A100: 8, H100: 8}, {A100: Decimal(2), H100: Decimal(4)}, cost.MIXED_PRICES),
    ],
)
def test_a_cluster_without_one_price_is_not_priced_and_says_why(models, table, reason) -> None:
    pricing = cost.cluster_pricing(models, table, "USD")
    assert not pricing.priced
    assert pricing.reason == reason
    assert pricing.cost(10.0) is None
    assert pricing.as_dict()["currency"] is None


def test_two_models_at_one_price_are_priced() -> None:
    table = {A100: Decimal(2), H100: Decimal("2.00")}
    assert cost.cluster_pricing({A100: 8, H100: 8}, table, "USD").price == Decimal(2)


def test_money_is_hours_times_price_rounded_half_up_to_the_cent() -> None:
    pricing = cost.Pricing("USD", Decimal("2.10"))
    assert pricing.cost(0.025).amount == Decimal("0.05")  # 0.0525 -> 0.05
    assert pricing.cost(1 / 3).amount == Decimal("0.70")  # 0.69999... -> 0.70
    assert pricing.cost(12345.5).as_text() == "25925.55"
    assert str(pricing.cost(1000)) == "2,100.00 USD"


def test_a_sum_is_rounded_once_at_the_end() -> None:
    pricing = cost.Pricing("USD", Decimal("0.01"))
    parts = [pricing.exact(0.4) for _ in range(3)]  # 0.004 each: 0.00 each if rounded first
    assert cost.total(parts, "USD").amount == Decimal("0.01")


def test_a_sum_with_an_unpriced_part_is_not_a_sum() -> None:
    assert cost.total([Decimal(1), None], "USD") is None
    assert cost.total([], "USD") is None


def test_gpu_models_counts_the_snapshot_gpus_per_model() -> None:
    snapshot = (
        SnapshotBuilder()
        .pool("a100", nodes=2, gpus=8)
        .node("h-000", pool="h100", gpus=4, gpu_model=H100)
        .build()
    )
    assert cost.gpu_models(snapshot) == {A100: 16, H100: 4}
