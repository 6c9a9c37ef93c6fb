"""Cost in the fairness report (docs/fairness.md "Cost"): allocated and wasted GPU-hours × the
cluster's price per GPU-hour, to the cent, the same on the page, in the API, the CSV and the
PDF; and no money anywhere when no price is set. The cluster is the recorded two-tenant world
(tests/support/fairness_world.py: alpha holds 8 GPUs, bravo 4, three 60 s cycles, with
``idle`` 4 more idle GPUs each); its GPU model is the snapshot format's example A100-SXM4-80GB."""

from __future__ import annotations

import csv
import io
import re
from decimal import ROUND_HALF_UP, Decimal

import pypdf
import pytest
from django.urls import reverse

from diagnosis.models import Tenant
from tests.support.fairness_world import PERIOD, record_two_tenant_cycles
from tests.support.world import logged_in_client

pytestmark = pytest.mark.django_db
QUERY = f"from={PERIOD['from']}&to={PERIOD['to']}"


def url(name: str) -> str:
    return f"{reverse(f'diagnosis:{name}', args=['acme'])}?{QUERY}"


PRICE = Decimal("3.37")


def cents(value: Decimal) -> str:
    return str(value.quantize(Decimal("0.01"), rounding=ROUND_HALF_UP))


def expected(hours: float) -> str:
    return cents(Decimal(repr(hours)) * PRICE)


@pytest.fixture
def priced(settings):
    settings.GPUOBS_GPU_HOUR_PRICES = f"A100-SXM4-80GB={PRICE},H100=9"
    settings.GPUOBS_CURRENCY = "EUR"
    return record_two_tenant_cycles(idle=True)


def api(client) -> dict:
    response = client.get(f"/api/v1/clusters/acme/reports/fairness?{QUERY}")
    assert response.status_code == 200, response.content
    return response.json()


def test_the_api_prices_each_tenant_to_the_cent(priced, bob) -> None:
    document = api(logged_in_client(bob))

    assert document["pricing"]["priced"] is True
    assert (document["pricing"]["currency"], document["pricing"]["price_per_gpu_hour"]) == (
        "EUR",
        "3.37",
    )
    rows = {row["tenant"]: row for row in document["tenants"]}
    # alpha: 8 busy + 4 idle GPUs for 180 s = 0.6 GPU-h, of which 0.2 idle
    assert rows["alpha"]["allocated_gpu_hours"] == pytest.approx(0.6)
    assert rows["alpha"]["cost"] == {"held": expected(0.6), "wasted": expected(0.2)}
    assert rows["alpha"]["cost"]["held"] == "2.02"
    held = sum(Decimal(repr(r["allocated_gpu_hours"])) for r in rows.values())
    assert document["cost"] == cents(held * PRICE)


def test_csv_page_and_pdf_show_the_api_s_amounts(priced, bob) -> None:
    client = logged_in_client(bob)
    document = api(client)
    amounts = {row["tenant"]: row["cost"] for row in document["tenants"]}

    text = client.get(url("fairness_csv")).content.decode()
    for row in csv.DictReader(io.StringIO(text)):
        assert (row["currency"], row["cost"], row["wasted_cost"]) == (
            "EUR",
            amounts[row["tenant"]]["held"],
            amounts[row["tenant"]]["wasted"],
        )

    page = client.get(url("fairness")).content.decode()
    table = page[page.index('id="cost-table"') :]
    for tenant, money in amounts.items():
        row = table[table.index(f'data-tenant="{tenant}"') :]
        assert re.search(rf'class="num cost">{money["held"]} EUR<', row[:600]), tenant
    assert f"{document['cost']} EUR" in table

    pdf = client.get(url("fairness_pdf")).content
    words = "\n".join(p.extract_text() for p in pypdf.PdfReader(io.BytesIO(pdf)).pages)
    assert "3.37 EUR" in words
    for money in amounts.values():
        assert f"{money['held']} EUR" in words
        assert f"{money['wasted']} EUR" in words


def test_without_a_price_nothing_is_priced_anywhere(bob, settings) -> None:
    settings.GPUOBS_GPU_HOUR_PRICES = ""
    record_two_tenant_cycles(idle=True)
    client = logged_in_client(bob)

    document = api(client)
    assert document["pricing"] == {
        "priced": False,
        "currency": None,
        "price_per_gpu_hour": None,
        "reason": "no-prices",
        "gpu_models": [],
        "unpriced_models": [],
    }
    assert document["cost"] is None
    assert all(row["cost"] is None for row in document["tenants"])
    text = client.get(url("fairness_csv")).content.decode()
    rows = list(csv.DictReader(io.StringIO(text)))
    assert rows
    assert all(r["cost"] == r["wasted_cost"] == r["currency"] == "" for r in rows)
    page = client.get(url("fairness")).content.decode()
    assert 'id="cost-table"' not in page
    pdf = client.get(url("fairness_pdf")).content
    words = "\n".join(p.extract_text() for p in pypdf.PdfReader(io.BytesIO(pdf)).pages)
    assert "0.00" not in words
    assert "USD" not in words


def test_a_cluster_s_declared_price_beats_the_setting(priced, bob) -> None:
    priced.gpu_hour_prices = {"a100-sxm4-80gb": "1.00"}
    priced.save(update_fields=["gpu_hour_prices"])

    rows = {row["tenant"]: row for row in api(logged_in_client(bob))["tenants"]}

    bravo = rows["bravo"]
    assert bravo["cost"]["held"] == cents(Decimal(repr(bravo["allocated_gpu_hours"])))


def test_a_model_without_a_price_leaves_the_cluster_unpriced(priced, bob, settings) -> None:
    settings.GPUOBS_GPU_HOUR_PRICES = "H100=9"

    document = api(logged_in_client(bob))

    assert document["pricing"]["reason"] == "unpriced-model"
    assert document["pricing"]["unpriced_models"] == ["A100-SXM4-80GB"]
    assert document["cost"] is None


def test_a_new_declared_price_shows_at_once_on_the_cached_page(priced, bob, settings) -> None:
    settings.GPUOBS_PAGE_CACHE_SECONDS = 300
    client = logged_in_client(bob)
    before = client.get(url("fairness")).content.decode()
    priced.gpu_hour_prices = {"A100-SXM4-80GB": "100"}
    priced.save(update_fields=["gpu_hour_prices"])

    after = client.get(url("fairness")).content.decode()

    assert "At 3.37 EUR per GPU-hour" in before
    assert "At 100 EUR per GPU-hour" in after


def test_a_tenant_s_page_shows_its_own_cost_only(priced, mallory) -> None:
    # a manager of alpha: her drill-down prices alpha, and bravo is nowhere on it
    Tenant.objects.get(cluster=priced, name="alpha").managers.add(mallory)
    client = logged_in_client(mallory)
    alpha = {row["tenant"]: row for row in api(client)["tenants"]}["alpha"]

    page = client.get(
        f"{reverse('diagnosis:tenant', args=['acme', 'alpha'])}?{QUERY}"
    ).content.decode()

    table = page[page.index('id="cost-table"') :]
    assert f'class="num cost">{alpha["cost"]["held"]} EUR<' in table
    assert "bravo" not in page
