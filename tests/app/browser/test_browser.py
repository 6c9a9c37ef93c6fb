"""The pages in a real browser: Debian's headless Chromium driven by Playwright.

Logs in through the login form, waits for plotly to draw the GPU-hour waterfall (an SVG inside
its container: JavaScript ran, plotly.js came from our static files), saves a screenshot of the
overview to ``var/screenshots/overview.png``, then opens a finding from the findings list and
checks its evidence table. Never runs ``playwright install``: the browser is /usr/bin/chromium
(``apt-get install chromium``; CI installs it from APT_PACKAGES in .ci/run).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from diagnosis.core.accounting import BUCKETS
from diagnosis.models import Cluster
from tests.conftest import REPO_ROOT
from tests.support.browser import browser_page, chromium, log_in, stepped_seed_cluster

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
__all__ = ["chromium"]  # a fixture this module uses

SCREENSHOT = REPO_ROOT / "var" / "screenshots" / "overview.png"
CLUSTER = "browser-demo"
CYCLES = 18  # 3 simulated hours of the seed scenario: a deadlock, fragmentation, idle jobs...


@pytest.fixture
def simulated_cluster(settings) -> Iterator[Cluster]:
    """The seed scenario, run cycle by cycle up to now."""
    settings.GPUOBS_CYCLE_SECONDS = 3600  # the data stays fresh for the whole test
    with stepped_seed_cluster(CLUSTER, CYCLES) as cluster:
        yield cluster


def test_overview_and_a_finding_in_a_real_browser(
    chromium: str, live_server, simulated_cluster: Cluster, bob
) -> None:
    from playwright.sync_api import expect  # noqa: PLC0415 -- optional: `chromium` skips without it

    base = live_server.url
    with browser_page(chromium) as (page, errors):
        page.goto(f"{base}/clusters/{CLUSTER}/")
        assert "/accounts/login/" in page.url  # the overview needs a login
        log_in(page, "bob", then=f"{base}/clusters/{CLUSTER}/")

        page.wait_for_selector("#gpu-hours-waterfall .main-svg")
        page.wait_for_selector("#utilization-trend .main-svg")
        # one bar per bucket and one for the capacity
        expect(page.locator("#gpu-hours-waterfall g.trace.bars .point")).to_have_count(
            len(BUCKETS) + 1
        )
        expect(page.locator("#figure-gpus")).to_have_text("1,024")
        expect(page.locator("#data-age .value")).to_have_text("Fresh")
        SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SCREENSHOT), full_page=True)

        page.click("nav.topnav >> text=Findings")
        page.wait_for_url(f"{base}/clusters/{CLUSTER}/findings/")
        first = page.locator("table.findings tbody tr").first
        subject = first.locator("td.subject").inner_text()
        first.locator("a.finding-link").click()
        page.wait_for_selector("#evidence table.evidence")
        expect(page.locator("h1")).to_contain_text(subject)
        assert page.locator("#evidence table.evidence tr").count() >= 3
        expect(page.locator("#history")).to_contain_text("new →")
        expect(page.locator("#how-to-fix")).not_to_be_empty()
    assert errors == []
