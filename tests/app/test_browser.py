"""The pages in a real browser: Debian's headless Chromium driven by Playwright.

Logs in through the login form, waits for plotly to draw the GPU-hour waterfall (an SVG inside
its container: JavaScript ran, plotly.js came from our static files), saves a screenshot of the
overview to ``var/screenshots/overview.png``, then opens a finding from the findings list and
checks its evidence table. Never runs ``playwright install``: the browser is /usr/bin/chromium
(``apt-get install chromium``; CI installs it from APT_PACKAGES in .ci/run).
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest

from diagnosis.actions.cycles import run_cluster_cycle
from diagnosis.edge.sim import runtime as sim_runtime
from diagnosis.models import Cluster
from tests.conftest import REPO_ROOT, require_binary, running_in_ci
from tests.support.world import DEFAULT_PASSWORD

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
SCREENSHOT = REPO_ROOT / "var" / "screenshots" / "overview.png"
CLUSTER = "browser-demo"
CYCLES = 18  # 3 simulated hours of the seed scenario: a deadlock, fragmentation, idle jobs...
TIMEOUT_MS = 20_000


@pytest.fixture
def chromium() -> str:
    path = require_binary("chromium", "apt-get install chromium")
    try:
        import playwright.sync_api  # noqa: F401, PLC0415 -- is playwright installed?
    except ImportError:
        message = "playwright is not installed: pip install -r requirements-dev.txt"
        if running_in_ci():
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    return path


@pytest.fixture
def simulated_cluster(settings) -> Iterator[Cluster]:
    """The seed scenario, run cycle by cycle up to now (built before the browser starts: the
    Playwright session must not share its thread with database work)."""
    settings.GPUOBS_CYCLE_SECONDS = 3600  # the data stays fresh for the whole test
    start = datetime.now(UTC) - timedelta(seconds=CYCLES * 600)
    cluster = Cluster.objects.create(
        name=CLUSTER,
        scheduler_kind="sim",
        metrics_kind="sim",
        scheduler_config={
            "scenario": "seed",
            "seed": 0,
            "clock": "step",
            "step_s": 600,
            "started_at": start.replace(microsecond=0).isoformat(),
        },
    )
    try:
        for _ in range(CYCLES):
            run_cluster_cycle(cluster)
        yield cluster
    finally:
        sim_runtime.forget(CLUSTER)


def test_overview_and_a_finding_in_a_real_browser(
    chromium: str, live_server, simulated_cluster: Cluster, bob
) -> None:
    from playwright.sync_api import (  # noqa: PLC0415 -- optional: `chromium` skips without it
        expect,
        sync_playwright,
    )

    base = live_server.url
    errors: list[str] = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.set_default_timeout(TIMEOUT_MS)
            page.on("pageerror", lambda error: errors.append(str(error)))
            page.on(
                "response",
                lambda r: errors.append(f"{r.status} {r.url}") if r.status >= 400 else None,
            )

            page.goto(f"{base}/clusters/{CLUSTER}/")
            assert "/accounts/login/" in page.url  # the overview needs a login
            page.fill("#id_username", "bob")
            page.fill("#id_password", DEFAULT_PASSWORD)
            page.click("button[type=submit]")
            page.wait_for_url(f"{base}/clusters/{CLUSTER}/")

            page.wait_for_selector("#gpu-hours-waterfall .main-svg")
            page.wait_for_selector("#utilization-trend .main-svg")
            # one bar per bucket and one for the capacity
            expect(page.locator("#gpu-hours-waterfall g.trace.bars .point")).to_have_count(9)
            expect(page.locator("#figure-gpus")).to_have_text("1,024")
            expect(page.locator("#data-age .value")).to_have_text("Fresh")
            SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(SCREENSHOT), full_page=True)

            page.click("nav.topnav >> text=Findings")
            page.wait_for_url(f"{base}/clusters/{CLUSTER}/findings/")
            first = page.locator("table.findings a.subject").first
            subject = first.inner_text()
            first.click()
            page.wait_for_selector("#evidence table.evidence")
            expect(page.locator("h1")).to_contain_text(subject)
            assert page.locator("#evidence table.evidence tr").count() >= 3
            expect(page.locator("#history")).to_contain_text("new →")
            expect(page.locator("#how-to-fix")).not_to_be_empty()
        finally:
            browser.close()
    assert errors == []
