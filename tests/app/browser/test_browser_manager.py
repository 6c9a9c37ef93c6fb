"""Issue #32 item 5 in a real browser (Debian's headless Chromium via Playwright): mallory,
the manager of ``research`` alone, opens the demo's fairness report in English and in Chinese
and reads a verdict about research -- and no other tenant's name anywhere on the page: neither
in the verdict nor in the tables, charts or menus. The cluster is the demo's seed scenario
(tenants pretrain, hpo, serving, research), stepped 3 cycles. Screenshots:
var/screenshots/manager/."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

from diagnosis.models import Cluster, Tenant
from tests.support.browser import (
    SCREENSHOTS,
    browser_page,
    chromium,
    screenshot,
    stepped_seed_cluster,
)
from tests.support.world import logged_in_client

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
__all__ = ["chromium"]  # a fixture this module uses

CLUSTER = "manager-demo"
OTHERS = ("pretrain", "hpo", "serving")


@pytest.fixture
def demo(settings, mallory) -> Iterator[Cluster]:
    settings.GPUOBS_CYCLE_SECONDS = 3600
    with stepped_seed_cluster(CLUSTER, 3) as cluster:
        Tenant.objects.get(cluster=cluster, name="research").managers.add(mallory)
        yield cluster


@pytest.mark.parametrize(("language", "accept"), [("en", "en-US"), ("zh-hans", "zh-CN")])
def test_a_manager_reads_a_verdict_about_their_tenant_and_no_other_tenant(
    chromium: str, live_server, demo: Cluster, mallory, language: str, accept: str
) -> None:
    from playwright.sync_api import expect  # noqa: PLC0415 -- optional: `chromium` skips without it

    base = live_server.url
    session = logged_in_client(mallory).cookies["sessionid"].value
    with browser_page(chromium) as (page, errors):
        page.set_extra_http_headers({"Accept-Language": accept})
        page.context.add_cookies([{"name": "sessionid", "value": session, "url": base}])
        page.goto(f"{base}/clusters/{CLUSTER}/fairness/")
        expect(page.locator("html")).to_have_attribute("lang", language)
        verdict = page.locator("#fairness-verdict")
        expect(verdict).to_be_visible()
        expect(verdict).to_contain_text("research")
        page.wait_for_load_state("networkidle")  # the charts drawn
        text = page.locator("body").inner_text()
        charts = page.evaluate(
            "Array.from(document.querySelectorAll('script[type=\"application/json\"]'))"
            ".map(s => s.textContent).join(' ')"
        )
        screenshot(page, f"fairness-{language}", SCREENSHOTS / "manager")
    assert errors == []
    assert "research" in text
    for other in OTHERS:  # as a word: "serving" is in "observing"
        assert not re.search(rf"\b{other}\b", text), other
        assert not re.search(rf"\b{other}\b", charts), other
