"""Issue #32 item 8 in a real browser (Debian's headless Chromium via Playwright): every page
that shows the latest cycle follows new cycles without a reload -- the cluster list, the
incidents, findings, node, job and queue lists, a node's page and a GPU's page (the overview's
own test is in test_browser_chrome.py). On each page a cycle is stored while it is open; the
test waits for the status line's poll to name the new cycle, then for the page's live region
to be swapped for the server's new version (a mark set on the old region is gone) showing the
new cycle's data, and checks the page was never reloaded. Screenshots: var/screenshots/live/."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import datetime

import pytest
from django.db import connection

from diagnosis.actions.records.cycles import run_cluster_cycle
from diagnosis.models import Cluster, ClusterCycle, Snapshot
from tests.support.browser import (
    SCREENSHOTS,
    browser_page,
    chromium,
    log_in,
    screenshot,
    stepped_seed_cluster,
)

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
__all__ = ["chromium"]  # a fixture this module uses

CLUSTER = "live-demo"
SHOTS = SCREENSHOTS / "live"
# page -> what on it shows the cycle's data: the snapshot time line, or the list's row
PAGES = {
    "/": f"tr:has(a.cluster-name:text-is('{CLUSTER}'))",
    f"/clusters/{CLUSTER}/incidents/": None,
    f"/clusters/{CLUSTER}/findings/": None,
    f"/clusters/{CLUSTER}/nodes/": "#snapshot-clock",
    f"/clusters/{CLUSTER}/nodes/gpu-000/": "#snapshot-clock",
    f"/clusters/{CLUSTER}/nodes/gpu-000/gpus/0/": "#snapshot-clock",
    f"/clusters/{CLUSTER}/jobs/": "#snapshot-clock",
    f"/clusters/{CLUSTER}/queues/": "#snapshot-clock",
}


@pytest.fixture
def cluster(settings) -> Iterator[Cluster]:
    settings.GPUOBS_CYCLE_SECONDS = 3600  # the data stays fresh for the whole test
    settings.GPUOBS_LIVE_POLL_SECONDS = 1
    with stepped_seed_cluster(CLUSTER, 2) as cluster:
        yield cluster


def _store_a_cycle(cluster: Cluster, stored: list[tuple[int, datetime]]) -> None:
    """One more cycle, in a thread of its own (never Playwright's); ``stored`` gets its id and
    its snapshot's time."""
    try:
        run_cluster_cycle(cluster)
        cycle = ClusterCycle.objects.filter(cluster=cluster, ok=True).latest("as_of")
        stored.append((cycle.pk, Snapshot.objects.filter(cluster=cluster).latest("as_of").as_of))
    finally:
        connection.close()


def store_a_cycle(cluster: Cluster) -> tuple[int, datetime]:
    stored: list[tuple[int, datetime]] = []
    worker = threading.Thread(target=_store_a_cycle, args=(cluster, stored))
    worker.start()
    worker.join()
    assert len(stored) == 1
    return stored[0]


def test_every_page_of_the_latest_cycle_shows_a_new_cycle_without_a_reload(
    chromium: str, live_server, cluster: Cluster, bob
) -> None:
    from playwright.sync_api import expect  # noqa: PLC0415 -- optional: `chromium` skips without it

    shown = ClusterCycle.objects.filter(cluster=cluster, ok=True).latest("as_of").pk
    base = live_server.url
    with browser_page(chromium) as (page, errors):
        page.goto(f"{base}/accounts/login/")
        log_in(page, "bob", then=f"{base}/")
        for path, data in PAGES.items():
            with page.expect_request(lambda r: "/live/?cycle=" in r.url) as poll:
                page.goto(f"{base}{path}")
            assert poll.value.url.endswith(f"?cycle={shown}"), (path, poll.value.url)
            before = page.locator(data).inner_text() if data else None
            page.evaluate(
                "window.gpuobsNotReloaded = true;"
                " document.getElementById('live-region').dataset.old = 'yes'"
            )

            new, as_of = store_a_cycle(cluster)

            expect(page.locator("#live-status")).to_have_attribute("data-cycle", str(new))
            expect(page.locator("#live-region:not([data-old])")).to_be_attached()
            if path == "/":
                expect(page.locator(data)).to_have_attribute("data-cycle", str(new))
            elif data:
                expect(page.locator(data)).to_contain_text(f"{as_of:%Y-%m-%d %H:%M:%S}")
                assert page.locator(data).inner_text() != before
            assert page.evaluate("window.gpuobsNotReloaded") is True, path
            shown = new
            name = path.strip("/").replace(f"clusters/{CLUSTER}", "").strip("/") or "clusters"
            screenshot(page, name.replace("/", "-"), SHOTS)
    assert errors == []
