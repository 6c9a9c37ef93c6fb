"""The recommendation loop in a real browser (Debian's headless Chromium via Playwright): the
demo's seed scenario runs until binpack is proposed for its fragmented pool and carol asks for
it; dave logs in, opens the recommendation (its impact drawn by plotly), approves it, sees the
scheduler's dry run, applies it and sees the audit row. Saves a screenshot of the page to
``var/screenshots/recommendation.png``."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest

from diagnosis.actions.cycles import run_cluster_cycle
from diagnosis.actions.review import request_recommendation, set_cluster_writes
from diagnosis.edge.sim import runtime as sim_runtime
from diagnosis.models import Cluster, Recommendation
from tests.app.test_browser import CHROMIUM_ARGS, TIMEOUT_MS, chromium  # noqa: F401 (a fixture)
from tests.conftest import REPO_ROOT
from tests.support.world import DEFAULT_PASSWORD

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

CLUSTER = "browser-loop"
CYCLES = 3  # fragmentation is reported from 0:30 in the seed scenario
SCREENSHOT = REPO_ROOT / "var" / "screenshots" / "recommendation.png"


@pytest.fixture
def requested(settings, alice, carol) -> Iterator[Recommendation]:
    """The seed scenario up to its first binpack proposal, writes on, requested by carol
    (built before the browser starts: Playwright must not share its thread with the ORM)."""
    settings.GPUOBS_CYCLE_SECONDS = 3600
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
        set_cluster_writes(cluster, alice, enabled=True)
        rec = Recommendation.objects.get(
            cluster=cluster, kind="placement-policy", target="pool:a100", state="proposed"
        )
        yield request_recommendation(rec, carol)
    finally:
        sim_runtime.forget(CLUSTER)


def test_dave_approves_and_applies_binpack_in_a_browser(
    chromium: str,  # noqa: F811 (the fixture imported above)
    live_server,
    celery_eager,
    requested: Recommendation,
    dave,
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

            page.goto(f"{base}/accounts/login/")
            page.fill("#id_username", "dave")
            page.fill("#id_password", DEFAULT_PASSWORD)
            page.click("button[type=submit]")
            page.wait_for_url(f"{base}/")

            page.goto(f"{base}/clusters/{CLUSTER}/")
            page.click("nav.topnav >> text=Recommendations")
            page.click("table.recommendations a.subject >> text=pool:a100")
            page.wait_for_url(f"{base}/clusters/{CLUSTER}/recommendations/{requested.pk}/")
            page.wait_for_selector("#impact-chart .main-svg")  # plotly drew the impact
            expect(page.locator("#rec-state")).to_have_text("Proposed")

            page.click("#action-approve")
            expect(page.locator("#rec-state")).to_have_text("Approved")
            expect(page.locator("#dry-run-command")).to_contain_text('"to": "binpack"')
            expect(page.locator("#dry-run-diff")).to_contain_text("spread")

            page.click("#action-apply")
            expect(page.locator("#rec-state")).to_have_text("Applied")
            audit = page.locator("#audit tbody tr").last
            expect(audit).to_contain_text("dave")
            expect(audit).to_contain_text("apply")
            expect(page.locator("#applied-command")).to_contain_text("placement-policy")
            expect(page.locator("#action-rollback")).to_be_visible()
            SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(SCREENSHOT), full_page=True)
        finally:
            browser.close()
    assert errors == []
    requested.refresh_from_db()
    assert (requested.state, requested.approved_by, requested.applied_by) == (
        "applied",
        dave,
        dave,
    )
