"""The gang release in a real browser (issue #20, Done-when; Debian's headless Chromium via
Playwright): the demo's seed scenario runs, 20 simulated minutes a cycle, until its two 40-pod
sweep gangs deadlock and a ``gang-release`` recommendation is proposed for one of them, writes
on. carol logs in and requests it from its page; dave logs in, approves it and applies it (the
simulator requeues the gang). The overview's held-by-partial-gang share of the last hour drops
in the following cycles. Saves a screenshot of the overview to
``var/screenshots/gang_release_overview.png``."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from django.db import connection

from diagnosis.actions.records.cycles import run_cluster_cycle
from diagnosis.actions.workflow.review import set_cluster_writes
from diagnosis.models import AuditEntry, Cluster, Recommendation
from tests.conftest import REPO_ROOT
from tests.support.browser import browser_page, chromium, log_in, stepped_seed_cluster

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
__all__ = ["chromium"]  # a fixture this module uses

CLUSTER = "browser-gangs"
STEP_S = 1200
CYCLES = 8  # the gangs arrive at 0:50, hold partially from ~1:50, deadlock ~2:40
CYCLES_AFTER = 3  # the overview counts the last hour: three cycles of 20 minutes
SCREENSHOT = REPO_ROOT / "var" / "screenshots" / "gang_release_overview.png"


@pytest.fixture
def proposed(settings, alice) -> Iterator[Recommendation]:
    """The seed scenario up to its gang-release proposal for the deadlock, writes on."""
    settings.GPUOBS_CYCLE_SECONDS = 3600
    with stepped_seed_cluster(CLUSTER, CYCLES, step_s=STEP_S) as cluster:
        set_cluster_writes(cluster, alice, enabled=True)
        yield Recommendation.objects.get(
            cluster=cluster,
            kind="gang-release",
            state="proposed",
            motivating_findings__rule_id="gang-deadlock",
        )


def run_cycles(cluster: Cluster, count: int) -> None:
    """``count`` cycles of ``cluster``, then this thread's database connection closed."""
    try:
        for _ in range(count):
            assert run_cluster_cycle(cluster).ok
    finally:
        connection.close()


def held_by_partial_gang_share(page: Any, overview: str) -> float:
    """The overview's share of the last hour's GPU-hours in the held-by-partial-gang bucket."""
    page.goto(overview)
    share = page.locator("#bucket-held-by-partial-gang td.num").nth(1).inner_text()
    return float(share.strip().rstrip("%")) / 100


def test_carol_requests_and_dave_applies_the_gang_release_in_a_browser(
    chromium: str, live_server, celery_eager, proposed: Recommendation, carol, dave
) -> None:
    from playwright.sync_api import expect  # noqa: PLC0415 -- optional: `chromium` skips without it

    cluster = proposed.cluster  # read before the browser: no database work in its thread
    base = live_server.url
    overview = f"{base}/clusters/{CLUSTER}/"
    rec_url = f"{base}/clusters/{CLUSTER}/recommendations/{proposed.pk}/"
    with browser_page(chromium) as (page, errors):
        page.goto(f"{base}/accounts/login/")
        log_in(page, "carol", then=f"{base}/")
        before = held_by_partial_gang_share(page, overview)
        page.goto(rec_url)
        expect(page.locator("#release-candidates")).to_contain_text(
            proposed.target.removeprefix("job:")
        )
        page.click("#action-request")
        expect(page.locator("#action-approve")).to_have_count(0)  # not by the one who asked
        page.click("form.logout button")
        page.wait_for_url(f"{base}/accounts/login/")

        log_in(page, "dave", then=f"{base}/")
        page.goto(rec_url)
        page.click("#action-approve")
        expect(page.locator("#rec-state")).to_have_text("Approved")
        page.click("#action-apply")
        expect(page.locator("#rec-state")).to_have_text("Applied")
        expect(page.locator("#applied-command")).to_contain_text("requeued")

        with ThreadPoolExecutor(1) as pool:  # cycles outside Playwright's event loop
            pool.submit(run_cycles, cluster, CYCLES_AFTER).result()
        after = held_by_partial_gang_share(page, overview)
        SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SCREENSHOT), full_page=True)
    assert errors == []
    print(f"\nheld by partial gangs, last hour: {before:.1%} before, {after:.1%} after")
    assert before > 0.1
    assert after < before / 2
    actions = set(AuditEntry.objects.filter(recommendation=proposed).values_list("actor", "action"))
    assert {("carol", "request"), ("dave", "approve")} <= actions
