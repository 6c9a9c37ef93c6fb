"""The fleet (docs/fairness.md "The fleet", docs/ui.md "The fleet"): one page and API over every
cluster a reader may see, and the cross-cluster tenant report -- a tenant on two clusters is one
row with its figures summed and each cluster's part shown, a manager of that tenant sees only
it, money is price × GPU-hours to the cent per cluster, summed, and nothing is priced without a
price. Both clusters are recorded through real cycles (``record_cycle``): ``east`` is the
two-tenant world of tests/support/fairness_world.py (alpha 8 GPUs, bravo 4), ``west`` below
(alpha 4 busy GPUs, charlie 8 idle ones), three 60 s cycles each."""

from __future__ import annotations

import re
from decimal import ROUND_HALF_UP, Decimal

import pytest
from django.urls import reverse

from diagnosis.actions.records.cycles import record_cycle
from diagnosis.models import Cluster, Tenant
from tests.support.builders import SnapshotBuilder
from tests.support.fairness_world import CYCLES, PERIOD, START, STEP, record_two_tenant_cycles
from tests.support.records import counting_decodes
from tests.support.world import logged_in_client

pytestmark = pytest.mark.django_db
QUERY = f"from={PERIOD['from']}&to={PERIOD['to']}"
EAST_PRICE, WEST_PRICE = Decimal("2.75"), Decimal("4.10")


def west_snapshot(as_of):
    return (
        SnapshotBuilder(as_of=as_of, window_s=60, cluster="west")
        .pool("a100", nodes=2, gpus=8)
        .queue("alpha", deserved_gpus=8)
        .queue("charlie", deserved_gpus=8)
        .job("alpha-w", tenant="alpha", gpus_per_pod=4, node="a100-000", ran="1h", util=0.9)
        .job("charlie-1", tenant="charlie", gpus_per_pod=8, node="a100-001", ran="1h", util=0.01)
        .build()
    )


@pytest.fixture
def fleet(settings) -> tuple[Cluster, Cluster]:
    settings.GPUOBS_GPU_HOUR_PRICES = f"*={EAST_PRICE}"
    east = record_two_tenant_cycles("east")
    west = Cluster.objects.create(name="west", enabled=False, gpu_hour_prices={"*": "4.10"})
    for number in range(CYCLES):
        record_cycle(west, west_snapshot(START + number * STEP))
    return east, west


def cents(value: Decimal) -> str:
    return str(value.quantize(Decimal("0.01"), rounding=ROUND_HALF_UP))


def tenants_api(client, query: str = QUERY) -> dict:
    response = client.get(f"{reverse('api-v1:fleet-tenants')}?{query}")
    assert response.status_code == 200, response.content
    return response.json()


def test_a_tenant_on_two_clusters_is_one_row_with_summed_figures(fleet, bob) -> None:
    document = tenants_api(logged_in_client(bob))

    rows = {row["tenant"]: row for row in document["tenants"]}
    assert sorted(rows) == ["alpha", "bravo", "charlie"]
    alpha = rows["alpha"]
    assert alpha["clusters"] == ["east", "west"]
    parts = {part["cluster"]: part for part in alpha["parts"]}
    assert parts["east"]["allocated_gpu_hours"] == pytest.approx(8 * 180 / 3600)
    assert parts["west"]["allocated_gpu_hours"] == pytest.approx(4 * 180 / 3600)
    assert alpha["allocated_gpu_hours"] == pytest.approx(12 * 180 / 3600)
    assert alpha["fair_gpu_hours"] == pytest.approx(
        parts["east"]["fair_gpu_hours"] + parts["west"]["fair_gpu_hours"]
    )
    # each cluster at its own price, summed unrounded, rounded once
    east_cost = Decimal(repr(parts["east"]["allocated_gpu_hours"])) * EAST_PRICE
    west_cost = Decimal(repr(parts["west"]["allocated_gpu_hours"])) * WEST_PRICE
    assert parts["east"]["cost"] == cents(east_cost) == "1.10"
    assert parts["west"]["cost"] == cents(west_cost) == "0.82"
    assert alpha["cost"] == cents(east_cost + west_cost)
    # charlie's 8 idle GPUs on west are its wasted GPU-hours and cost
    charlie = rows["charlie"]
    assert charlie["wasted_gpu_hours"] == pytest.approx(8 * 180 / 3600)
    assert charlie["wasted_cost"] == cents(Decimal(repr(charlie["wasted_gpu_hours"])) * WEST_PRICE)


def test_the_page_shows_the_api_s_rows_and_parts(fleet, bob) -> None:
    client = logged_in_client(bob)
    rows = {row["tenant"]: row for row in tenants_api(client)["tenants"]}

    html = client.get(f"{reverse('diagnosis:fleet')}?{QUERY}").content.decode()

    alpha = html[html.index('<tbody data-tenant="alpha">') :]
    alpha = alpha[: alpha.index("</tbody>")]
    assert alpha.count('class="tenant-part"') == 2
    assert f"{rows['alpha']['cost']} USD" in alpha
    for part in rows["alpha"]["parts"]:
        assert f"{part['cost']} USD" in alpha
    assert html.count('<tbody data-tenant="alpha">') == 1


def test_a_manager_of_the_tenant_sees_only_it(fleet, mallory) -> None:
    for cluster in fleet:
        Tenant.objects.get(cluster=cluster, name="alpha").managers.add(mallory)
    client = logged_in_client(mallory)

    document = tenants_api(client)
    html = client.get(f"{reverse('diagnosis:fleet')}?{QUERY}").content.decode()
    clusters = client.get(reverse("api-v1:fleet")).json()

    assert [row["tenant"] for row in document["tenants"]] == ["alpha"]
    assert document["tenants"][0]["clusters"] == ["east", "west"]
    assert [c["cluster"] for c in clusters["clusters"]] == ["east", "west"]
    for other in ("bravo", "charlie", "alpha-w", "charlie-1", "bravo-1"):
        assert other not in html
        assert other not in str(document)
        assert other not in str(clusters)


def test_a_manager_of_one_cluster_s_tenant_sees_that_cluster_s_part_only(fleet, mallory) -> None:
    east, _west = fleet
    Tenant.objects.get(cluster=east, name="alpha").managers.add(mallory)

    document = tenants_api(logged_in_client(mallory))

    assert document["clusters"] == ["east"]
    assert [(r["tenant"], r["clusters"]) for r in document["tenants"]] == [("alpha", ["east"])]


def test_the_fleet_api_has_each_cluster_s_figures_and_top_waste(fleet, bob) -> None:
    document = logged_in_client(bob).get(reverse("api-v1:fleet")).json()

    clusters = {c["cluster"]: c for c in document["clusters"]}
    assert document["gpus"] == 16 + 16
    assert clusters["west"]["allocated_gpus"] == 12
    assert document["allocation_utilization"] == pytest.approx((12 + 12) / 32)
    # west: charlie's 8 idle GPUs are the most GPU-hours lost in its last hour
    waste = clusters["west"]["top_waste"]
    assert waste["bucket"] == "allocated-idle"
    assert waste["gpu_hours"] == pytest.approx(8 * 180 / 3600)
    assert waste["cost"] == cents(Decimal(repr(waste["gpu_hours"])) * WEST_PRICE)
    # the cycles are from 2026-11-29: stale now, and said so
    assert document["stale_clusters"] == 2
    assert all(c["stale"] for c in document["clusters"])


def test_without_a_price_nothing_is_priced(bob, settings) -> None:
    settings.GPUOBS_GPU_HOUR_PRICES = ""
    record_two_tenant_cycles("east")
    client = logged_in_client(bob)

    document = tenants_api(client)
    fleet = client.get(reverse("api-v1:fleet")).json()
    html = client.get(f"{reverse('diagnosis:fleet')}?{QUERY}").content.decode()

    assert document["cost"] is None
    assert all(r["cost"] is None and r["wasted_cost"] is None for r in document["tenants"])
    assert fleet["top_waste_cost"] is None
    assert fleet["clusters"][0]["top_waste"]["cost"] is None
    assert "USD" not in html
    assert "0.00" not in html
    assert not re.search(r'class="num cost">\s*[0-9]', html)


def test_the_page_reads_rollups_not_snapshots(fleet, bob, monkeypatch) -> None:
    decoded = counting_decodes(monkeypatch)

    response = logged_in_client(bob).get(f"{reverse('diagnosis:fleet')}?{QUERY}")

    assert response.status_code == 200
    assert decoded == []


def test_a_bad_period_is_a_400(fleet, bob) -> None:
    client = logged_in_client(bob)
    assert client.get(f"{reverse('diagnosis:fleet')}?from=yesterday").status_code == 400
    response = client.get(f"{reverse('api-v1:fleet-tenants')}?period=9y")
    assert response.status_code == 400
    assert "period" in response.json()["errors"]


def test_no_role_reads_an_empty_fleet(fleet, nobody) -> None:
    document = tenants_api(logged_in_client(nobody))
    assert document["tenants"] == []
    assert document["clusters"] == []
