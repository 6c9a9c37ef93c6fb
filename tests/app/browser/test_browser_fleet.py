"""The fleet in a real browser (Debian's headless Chromium via Playwright): a viewer opens
"Fleet" from the top menu, sees the priced clusters side by side and the tenant on both
clusters once, with its two parts, and follows a part to that cluster's fairness report. The
clusters are recorded through real cycles (tests/support/fairness_world.py's two-tenant world,
twice). Screenshots go to ``var/screenshots/``."""

from __future__ import annotations

import pytest

from tests.support.browser import browser_page, chromium, screenshot
from tests.support.fairness_world import PERIOD, record_two_tenant_cycles
from tests.support.world import logged_in_client

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
__all__ = ["chromium"]  # a fixture this module uses


def test_a_viewer_reads_the_fleet_and_follows_a_tenant_s_part(
    chromium: str, live_server, bob, settings
) -> None:
    from playwright.sync_api import expect  # noqa: PLC0415 -- optional: `chromium` skips without it

    settings.GPUOBS_GPU_HOUR_PRICES = "*=2.75"
    for name in ("east", "west"):
        record_two_tenant_cycles(name)
    base = live_server.url
    cookie = logged_in_client(bob).cookies["sessionid"].value
    with browser_page(chromium) as (page, errors):
        page.context.add_cookies([{"name": "sessionid", "value": cookie, "url": base}])
        page.goto(f"{base}/")
        page.click("nav.topnav a >> text=Fleet")
        page.wait_for_url(f"{base}/fleet/")
        expect(page.locator("#fleet-table tbody tr")).to_have_count(2)
        expect(page.locator("#fleet-gpus")).to_have_text("32")

        page.goto(f"{base}/fleet/?from={PERIOD['from']}&to={PERIOD['to']}")
        alpha = page.locator("#fleet-tenant-table tbody[data-tenant=alpha]")
        expect(alpha).to_have_count(1)
        expect(alpha.locator("tr.tenant-part")).to_have_count(2)
        expect(alpha.locator("tr.tenant-total td.cost")).to_have_text("2.20 USD")  # 0.8 h × 2.75
        screenshot(page, "fleet")

        alpha.locator("tr.tenant-part[data-cluster=west] a").click()
        page.wait_for_url(f"{base}/clusters/west/fairness/?*")
        expect(page.locator("#cost-table")).to_contain_text("1.10 USD")
    assert errors == []
