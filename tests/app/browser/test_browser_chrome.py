"""The page chrome in a real browser (Debian's headless Chromium driven by Playwright; never
``playwright install``): every main page fits a 390 px phone without sideways scrolling, the
dark-mode toggle repaints page and charts and is remembered, the overview speaks Chinese to a
zh-CN browser, and a cycle stored while the overview is open shows up without a reload (htmx
polling, docs/ui.md "Live updates"). Screenshots of each go to ``var/screenshots/chrome/``.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
from django.db import connection

from diagnosis.actions.records.cycles import run_cluster_cycle
from diagnosis.models import Cluster, ClusterCycle, Finding, Job, Queue, Tenant
from diagnosis.pages.support.snapshots import latest_document
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

SHOTS = SCREENSHOTS / "chrome"
CLUSTER = "chrome-demo"
CYCLES = 3  # half a simulated hour of the seed scenario: a waterfall, a trend, findings
PHONE = {"width": 390, "height": 844}
MAIN_PAGES = (
    "/",
    f"/clusters/{CLUSTER}/",
    f"/clusters/{CLUSTER}/findings/",
    f"/clusters/{CLUSTER}/incidents/",
    f"/clusters/{CLUSTER}/recommendations/",
    f"/clusters/{CLUSTER}/fairness/",
    f"/clusters/{CLUSTER}/nodes/",
    f"/clusters/{CLUSTER}/queues/",
    f"/clusters/{CLUSTER}/jobs/",
)


def detail_pages(cluster: Cluster) -> tuple[str, ...]:
    """One page of each kind of thing: a finding, node, GPU, queue, job and tenant."""
    base = f"/clusters/{cluster.name}"
    finding = Finding.objects.filter(cluster=cluster).order_by("id").first()
    job = Job.objects.filter(cluster=cluster, state="running").order_by("external_id").first()
    tenant = Tenant.objects.filter(cluster=cluster).order_by("name").first()
    queue = Queue.objects.filter(cluster=cluster).order_by("name").first()
    _, document = latest_document(cluster)
    node = document["nodes"][0]["name"] if document.get("nodes") else None
    pages = [
        f"{base}/findings/{finding.pk}/" if finding else None,
        f"{base}/jobs/{job.external_id}/" if job else None,
        f"{base}/tenants/{tenant.name}/" if tenant else None,
        f"{base}/queues/{queue.name}/" if queue else None,
        f"{base}/nodes/{node}/" if node else None,
        f"{base}/nodes/{node}/gpus/0/" if node else None,
    ]
    assert None not in pages, pages
    return tuple(pages)


@pytest.fixture
def simulated_cluster(settings) -> Iterator[Cluster]:
    settings.GPUOBS_CYCLE_SECONDS = 3600  # the data stays fresh for the whole test
    settings.GPUOBS_LIVE_POLL_SECONDS = 1  # the live test waits a second, not ten
    with stepped_seed_cluster(CLUSTER, CYCLES) as cluster:
        yield cluster


def shot_name(path: str) -> str:
    """``/`` -> ``clusters``, ``/clusters/<c>/`` -> ``overview``, ``/clusters/<c>/jobs/x/`` ->
    ``jobs-x``."""
    if path == "/":
        return "clusters"
    inner = path.strip("/").removeprefix(f"clusters/{CLUSTER}").strip("/")
    return inner.replace("/", "-") or "overview"


def test_every_main_page_fits_a_390_px_phone(
    chromium: str, live_server, simulated_cluster: Cluster, bob
) -> None:
    from playwright.sync_api import expect  # noqa: PLC0415 -- optional: `chromium` skips without it

    pages = MAIN_PAGES + detail_pages(simulated_cluster)
    base = live_server.url
    with browser_page(chromium) as (page, errors):
        page.set_viewport_size(PHONE)
        page.goto(f"{base}/accounts/login/")
        widths = {"/accounts/login/": page.evaluate("document.documentElement.scrollWidth")}
        log_in(page, "bob", then=f"{base}/")
        for path in pages:
            page.goto(f"{base}{path}")
            page.wait_for_load_state("load")
            widths[path] = page.evaluate("document.documentElement.scrollWidth")
            screenshot(page, f"phone-{shot_name(path)}", SHOTS)
        # the navigation folds behind the menu button and opens from it
        page.goto(f"{base}/clusters/{CLUSTER}/")
        expect(page.locator("nav.topnav")).to_be_hidden()
        page.click(".menu-toggle")
        expect(page.locator("nav.topnav >> text=Fairness")).to_be_visible()
    assert {path: width for path, width in widths.items() if width > PHONE["width"]} == {}
    assert errors == []


def test_dark_mode_and_chinese_from_the_header(
    chromium: str, live_server, simulated_cluster: Cluster, bob
) -> None:
    """A zh-CN browser gets the login page and the overview in Chinese; the theme toggle turns
    page and charts dark, and a reload keeps it (localStorage)."""
    from playwright.sync_api import expect  # noqa: PLC0415

    base = live_server.url
    with browser_page(chromium) as (page, errors):
        page.set_extra_http_headers({"Accept-Language": "zh-CN,zh;q=0.9"})
        page.goto(f"{base}/clusters/{CLUSTER}/")
        expect(page.locator("h1")).to_have_text("登录")  # the login page, already in Chinese
        log_in(page, "bob", then=f"{base}/clusters/{CLUSTER}/")
        expect(page.locator("html")).to_have_attribute("lang", "zh-hans")
        expect(page.locator("#waterfall-title")).to_have_text("最近一小时的 GPU 小时去向")
        expect(page.locator("#findings-title")).to_have_text("未关闭的发现")
        expect(page.locator("nav.topnav")).to_contain_text("公平性")
        page.wait_for_selector("#gpu-hours-waterfall .main-svg")
        page.wait_for_selector("#utilization-trend .main-svg")
        expect(page.locator("#gpu-hours-waterfall")).to_contain_text("容量")  # a chart label
        screenshot(page, "overview-zh-hans", SHOTS)
        expect(page.locator("html")).to_have_attribute("data-theme", "light")
        light = page.evaluate("getComputedStyle(document.body).backgroundColor")

        page.click(".theme-toggle")

        expect(page.locator("html")).to_have_attribute("data-theme", "dark")
        expect(page.locator("#utilization-trend")).to_have_attribute("data-theme-drawn", "dark")
        assert page.evaluate("getComputedStyle(document.body).backgroundColor") != light
        screenshot(page, "overview-zh-hans-dark", SHOTS)
        page.reload()
        expect(page.locator("html")).to_have_attribute("data-theme", "dark")
    assert errors == []


def _store_a_cycle(cluster: Cluster, stored: list[int]) -> None:
    """One more cycle, in a thread of its own (never Playwright's); ``stored`` gets its id."""
    try:
        run_cluster_cycle(cluster)
        stored.append(ClusterCycle.objects.filter(cluster=cluster, ok=True).latest("as_of").pk)
    finally:
        connection.close()


def test_a_new_cycle_changes_the_open_overview_without_a_reload(
    chromium: str, live_server, simulated_cluster: Cluster, bob
) -> None:
    from playwright.sync_api import expect  # noqa: PLC0415

    shown = ClusterCycle.objects.filter(cluster=simulated_cluster, ok=True).latest("as_of")
    base = live_server.url
    with browser_page(chromium) as (page, errors):
        page.goto(f"{base}/clusters/{CLUSTER}/")
        log_in(page, "bob", then=f"{base}/clusters/{CLUSTER}/")
        expect(page.locator("#live-status")).to_have_attribute("data-cycle", str(shown.pk))
        expect(page.locator("#live-status")).to_contain_text("updated")
        before = page.locator("#trend-title + .hint").inner_text()
        page.evaluate("window.gpuobsNotReloaded = true")

        stored: list[int] = []
        worker = threading.Thread(target=_store_a_cycle, args=(simulated_cluster, stored))
        worker.start()
        worker.join()
        assert len(stored) == 1
        assert stored[0] != shown.pk

        expect(page.locator("#live-status")).to_have_attribute("data-cycle", str(stored[0]))
        expect(page.locator("#trend-title + .hint")).not_to_have_text(before)
        page.wait_for_selector("#utilization-trend .main-svg")  # the swapped-in chart is drawn
        assert page.evaluate("window.gpuobsNotReloaded") is True
        screenshot(page, "overview-live", SHOTS)
    assert errors == []


@pytest.mark.parametrize("path", ["incidents/", "findings/", "nodes/"])
def test_the_lists_on_call_watches_poll_for_new_cycles(
    chromium: str, live_server, simulated_cluster: Cluster, bob, path: str
) -> None:
    """Issue #32 item 8: not only the overview follows new cycles."""
    from playwright.sync_api import expect  # noqa: PLC0415

    shown = ClusterCycle.objects.filter(cluster=simulated_cluster, ok=True).latest("as_of")
    base = live_server.url
    with browser_page(chromium) as (page, errors):
        page.goto(f"{base}/accounts/login/")
        log_in(page, "bob", then=f"{base}/")
        with page.expect_request(lambda r: f"/clusters/{CLUSTER}/live/?cycle=" in r.url) as poll:
            page.goto(f"{base}/clusters/{CLUSTER}/{path}")
        assert poll.value.url.endswith(f"?cycle={shown.pk}")
        expect(page.locator("#live-status")).to_contain_text("updated")
        expect(page.locator("#live-region")).to_have_attribute(
            "hx-trigger", "gpuobs:new-cycle from:body"
        )
    assert errors == []
