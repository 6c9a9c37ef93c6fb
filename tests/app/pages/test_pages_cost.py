"""Money on the overview's GPU-hour waterfall (docs/accounting.md "Cost"): each bucket's cost is
its GPU-hours × the cluster's price, to the cent, and the capacity's the same; without a price
the table has no cost column at all. The cluster is the recorded two-tenant world of
tests/support/fairness_world.py (A100-SXM4-80GB nodes, the snapshot format's example model)."""

from __future__ import annotations

import re
from decimal import ROUND_HALF_UP, Decimal

import pytest
from django.urls import reverse

from diagnosis.charts.figures import gpu_hours_waterfall
from tests.support.fairness_world import record_two_tenant_cycles
from tests.support.records import make_recommendation
from tests.support.world import logged_in_client

pytestmark = pytest.mark.django_db
PRICE = Decimal("2.35")


def cents(hours: float) -> str:
    return f"{(Decimal(repr(hours)) * PRICE).quantize(Decimal('0.01'), ROUND_HALF_UP):,.2f}"


def test_each_waterfall_bucket_shows_its_cost_to_the_cent(bob, settings) -> None:
    settings.GPUOBS_GPU_HOUR_PRICES = f"*={PRICE}"
    record_two_tenant_cycles(idle=True)

    response = logged_in_client(bob).get(reverse("diagnosis:cluster", args=["acme"]))

    breakdown = response.context["breakdown"]
    html = response.content.decode()
    assert breakdown.capacity_gpu_hours > 0
    for bucket in breakdown.buckets:
        row = html[html.index(f'id="bucket-{bucket.bucket}"') :]
        cell = re.search(r'class="num cost">([^<]*)<', row).group(1)
        assert cell == f"{cents(bucket.gpu_hours)} USD", bucket.bucket
    capacity = re.search(r'id="capacity-cost">([^<]*)<', html).group(1)
    assert capacity == f"{cents(breakdown.capacity_gpu_hours)} USD"


def test_without_a_price_the_waterfall_shows_no_money(bob, settings) -> None:
    settings.GPUOBS_GPU_HOUR_PRICES = ""
    record_two_tenant_cycles(idle=True)

    html = logged_in_client(bob).get(reverse("diagnosis:cluster", args=["acme"])).content
    assert b'class="num cost"' not in html
    assert b"USD" not in html


def test_a_recommendation_shows_the_money_at_stake(bob, settings) -> None:
    # stake_gpu_h as the impact's pending estimate stores it (diagnosis/core/recommend/impact.py)
    settings.GPUOBS_GPU_HOUR_PRICES = f"*={PRICE}"
    cluster = record_two_tenant_cycles()
    rec = make_recommendation(cluster, impact={"verdict": "pending", "stake_gpu_h": 96.5})

    page = logged_in_client(bob).get(reverse("diagnosis:recommendation", args=["acme", rec.pk]))

    stake = re.search(r'id="money-at-stake">([^<]*)<', page.content.decode()).group(1)
    assert "96.5" in stake
    assert f"{cents(96.5)} USD" in stake


def test_without_a_price_the_stake_is_in_gpu_hours_only(bob, settings) -> None:
    settings.GPUOBS_GPU_HOUR_PRICES = ""
    cluster = record_two_tenant_cycles()
    rec = make_recommendation(cluster, impact={"verdict": "pending", "stake_gpu_h": 96.5})

    page = logged_in_client(bob).get(reverse("diagnosis:recommendation", args=["acme", rec.pk]))

    stake = re.search(r'id="money-at-stake">([^<]*)<', page.content.decode()).group(1)
    assert "96.5" in stake
    assert "USD" not in stake


def test_the_api_gives_each_recommendation_its_money_at_stake(bob, settings) -> None:
    settings.GPUOBS_GPU_HOUR_PRICES = f"*={PRICE}"
    cluster = record_two_tenant_cycles()
    rec = make_recommendation(cluster, impact={"verdict": "pending", "stake_gpu_h": 96.5})
    make_recommendation(cluster, target="queue:team-c", impact={"verdict": "pending"})

    listed = logged_in_client(bob).get("/api/v1/recommendations/").json()["results"]

    stakes = {row["id"]: row["money_at_stake"] for row in listed}
    assert stakes[rec.pk] == {"gpu_hours": 96.5, "cost": cents(96.5), "currency": "USD"}
    assert [s for s in stakes.values() if s is None]  # no stake: null, not 0


def test_the_waterfall_chart_shows_each_bar_s_cost_on_hover(bob, settings) -> None:
    settings.GPUOBS_GPU_HOUR_PRICES = f"*={PRICE}"
    record_two_tenant_cycles(idle=True)
    response = logged_in_client(bob).get(reverse("diagnosis:cluster", args=["acme"]))
    breakdown, hover = response.context["breakdown"], response.context["hover_costs"]

    bars = gpu_hours_waterfall(breakdown, {}, hover).data[0].customdata

    shown = [bar[2] for bar in bars]
    expected = [f"<br>{cents(b.gpu_hours)} USD" for b in breakdown.buckets]
    assert shown == [*expected, f"<br>{cents(breakdown.capacity_gpu_hours)} USD"]
    assert all(bar[2] == "" for bar in gpu_hours_waterfall(breakdown, {}, {}).data[0].customdata)
