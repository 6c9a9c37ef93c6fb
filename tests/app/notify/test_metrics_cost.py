"""Cost on /metrics (docs/integrations.md "/metrics"): per tenant of a priced cluster, the last
hour's allocated and wasted GPU-hours × its price, to the cent, labelled with the currency; a
cluster without a price has no cost series at all (never a 0). The cycles are those of
tests/support/notify_world.py (team-a's 8 idle GPUs, A100-SXM4-80GB)."""

from __future__ import annotations

from decimal import ROUND_HALF_UP, Decimal

import pytest

from diagnosis.models import TenantRollup
from tests.app.notify.test_metrics import samples, scrape, value
from tests.support.notify_world import record_cycles, scraper

pytestmark = pytest.mark.django_db


def test_a_priced_tenant_has_its_cost_and_wasted_cost(make_cluster, client, settings) -> None:
    settings.GPUOBS_GPU_HOUR_PRICES = "A100-SXM4-80GB=1.99"
    cluster = make_cluster("outbound")
    record_cycles(cluster, ["idle", "idle", "idle"])
    token, _ = scraper()

    found = samples(scrape(client, HTTP_AUTHORIZATION=f"Bearer {token}").content)

    rows = TenantRollup.objects.filter(cluster=cluster, tenant_name="team-a")
    held_s = sum(r.allocated_gpu_s for r in rows)
    idle_s = sum(r.idle_gpu_s for r in rows)
    assert idle_s > 0

    def cents(seconds: float) -> float:
        exact = Decimal(repr(seconds / 3600)) * Decimal("1.99")
        return float(exact.quantize(Decimal("0.01"), ROUND_HALF_UP))

    labels = {"cluster": "outbound", "tenant": "team-a", "currency": "USD"}
    assert value(found, "gpuobs_tenant_last_hour_cost", **labels) == cents(held_s)
    assert value(found, "gpuobs_tenant_last_hour_wasted_cost", **labels) == cents(idle_s)


def test_an_unpriced_cluster_has_no_cost_series(make_cluster, client, settings) -> None:
    settings.GPUOBS_GPU_HOUR_PRICES = ""
    record_cycles(make_cluster("outbound"), ["idle", "idle"])
    token, _ = scraper()

    body = scrape(client, HTTP_AUTHORIZATION=f"Bearer {token}").content

    assert b"gpuobs_tenant_last_hour_cost{" not in body
    assert b"gpuobs_tenant_last_hour_wasted_cost{" not in body
