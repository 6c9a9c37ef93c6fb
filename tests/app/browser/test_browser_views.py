"""The daily views of issue 19 in a real browser (Debian's headless Chromium via Playwright):
the SRE clicks a cell of the cluster heatmap, lands on that GPU's page and sees its six metrics
drawn over time, goes to the node; then finds the research queue's waiting big job with the
scheduler's reason, and searches the job list for it.

The cluster is the demo's seed scenario, :data:`CYCLES` stepped cycles of 10 simulated minutes.
Screenshots go to ``var/screenshots/`` (the test artefacts)."""

from __future__ import annotations

import io
import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from diagnosis.models import Cluster
from diagnosis.pages.support import snapshots
from tests.support.browser import browser_page, chromium, screenshot, stepped_seed_cluster
from tests.support.world import logged_in_client

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
__all__ = ["chromium"]  # a fixture this module uses

CLUSTER = "browser-views"
CYCLES = 8
GPU_PAGE = re.compile(rf".*/clusters/{CLUSTER}/nodes/(gpu-\d+)/gpus/(\d+)/$")


@pytest.fixture
def demo(settings) -> Iterator[Cluster]:
    settings.GPUOBS_CYCLE_SECONDS = 3600
    snapshots.forget_cached()
    with stepped_seed_cluster(CLUSTER, CYCLES) as cluster:
        yield cluster
    snapshots.forget_cached()


def session_cookie(user, base: str) -> dict:
    """A logged-in session for ``user`` (made before the browser starts: no database work on
    Playwright's thread), as the cookie the browser sends."""
    client = logged_in_client(user)
    return {"name": "sessionid", "value": client.cookies["sessionid"].value, "url": base}


@contextmanager
def logged_in_page(chromium: str, user, base: str) -> Iterator[tuple[Any, list[str]]]:
    """:func:`browser_page`, logged in as ``user`` at ``base``."""
    cookie = session_cookie(user, base)
    with browser_page(chromium) as (page, errors):
        page.context.add_cookies([cookie])
        yield page, errors


def test_a_heatmap_cell_opens_its_gpu_page_with_the_time_series_and_its_node(
    chromium: str, live_server, demo: Cluster, carol
) -> None:
    from playwright.sync_api import expect  # noqa: PLC0415 -- optional: `chromium` skips without it

    base = live_server.url
    with logged_in_page(chromium, carol, base) as (page, errors):
        page.goto(f"{base}/clusters/{CLUSTER}/nodes/")
        heatmap = page.locator("#gpu-heatmap[data-drawn=true]")
        expect(heatmap).to_be_visible()
        screenshot(page, "heatmap")
        box = page.locator("#gpu-heatmap .nsewdrag").first.bounding_box()
        page.mouse.click(box["x"] + box["width"] * 0.3, box["y"] + box["height"] * 0.5)

        page.wait_for_url(GPU_PAGE)
        node, index = GPU_PAGE.match(page.url).groups()
        expect(page.locator("h1")).to_contain_text(f"GPU {index}")
        expect(page.locator("#gpu-series[data-drawn=true]")).to_be_visible()
        for title in ("GPU utilization", "Power", "Temperature", "SM clock"):
            expect(page.locator("#gpu-series")).to_contain_text(title)
        expect(page.locator("#series-points")).to_contain_text(f"{CYCLES} stored snapshots")
        screenshot(page, "gpu")

        page.click(f"h1 a.ref-node >> text={node}")
        page.wait_for_url(f"{base}/clusters/{CLUSTER}/nodes/{node}/")
        expect(page.locator("#node-gpus")).to_contain_text(index)
        expect(page.locator("#node-util[data-drawn=true]")).to_be_visible()
        screenshot(page, "node")
    assert errors == []


def test_the_queue_shows_the_waiting_big_job_with_its_reason_and_search_finds_it(
    chromium: str, live_server, demo: Cluster, carol
) -> None:
    from playwright.sync_api import expect  # noqa: PLC0415 -- optional: `chromium` skips without it

    base = live_server.url
    with logged_in_page(chromium, carol, base) as (page, errors):
        page.goto(f"{base}/clusters/{CLUSTER}/queues/")
        page.click(f"#queue-table a[href='/clusters/{CLUSTER}/queues/research/']")
        page.wait_for_url(f"{base}/clusters/{CLUSTER}/queues/research/")
        row = page.locator("#pending-jobs tr", has=page.locator("a >> text=research-big"))
        expect(row).to_contain_text("Unschedulable")
        screenshot(page, "queue")

        page.goto(f"{base}/clusters/{CLUSTER}/jobs/")
        page.fill("#job-search", "research-big")
        page.press("#job-search", "Enter")
        page.wait_for_url(re.compile(r".*[?&]q=research-big.*"))
        expect(page.locator("#job-count")).to_have_text("1 job.")
        page.click("#job-table a >> text=research-big")
        page.wait_for_url(f"{base}/clusters/{CLUSTER}/jobs/research-big/")
        expect(page.locator("#job-wait")).to_contain_text("waiting")
        screenshot(page, "job")
    assert errors == []


# Where the first idle cell (utilization 0) of the heatmap is on the page, and a spot of the
# panel around it outside the plot (what an empty cell shows: plotly leaves it transparent).
IDLE_CELL_AND_PANEL = """() => {
  const gd = document.getElementById("gpu-heatmap");
  const z = gd.calcdata[0][0].z; // rows of numbers (the JSON holds a typed array)
  let cell = null;
  Array.from(z).forEach((row, r) => Array.from(row).forEach((v, c) => {
    if (v === 0 && cell === null) cell = [r, c];
  }));
  if (cell === null) return null;
  const box = gd.getBoundingClientRect();
  const xa = gd._fullLayout.xaxis, ya = gd._fullLayout.yaxis;
  const panel = gd.closest("section").getBoundingClientRect();
  return {
    idle: [box.left + xa._offset + xa.l2p(cell[1]), box.top + ya._offset + ya.l2p(cell[0])],
    panel: [panel.left + 6, panel.top + 6],
  };
}"""


def _pixel(page, point: list[float]) -> tuple[int, int, int]:
    from PIL import Image  # noqa: PLC0415 -- pillow comes with reportlab (requirements.txt)

    png = page.screenshot(clip={"x": point[0] - 1, "y": point[1] - 1, "width": 3, "height": 3})
    image = Image.open(io.BytesIO(png)).convert("RGB")
    return image.getpixel((image.width // 2, image.height // 2))


def test_an_idle_gpu_reads_apart_from_an_empty_cell_in_the_light_and_the_dark_theme(
    chromium: str, live_server, demo: Cluster, carol
) -> None:
    from playwright.sync_api import expect  # noqa: PLC0415 -- optional: `chromium` skips without it

    base = live_server.url
    with logged_in_page(chromium, carol, base) as (page, errors):
        for theme in ("light", "dark"):
            page.goto(f"{base}/clusters/{CLUSTER}/nodes/")
            page.evaluate(f"localStorage.setItem('gpuobs-theme', '{theme}')")
            page.reload()
            expect(page.locator(f"#gpu-heatmap[data-theme-drawn={theme}]")).to_be_visible()
            where = page.evaluate(IDLE_CELL_AND_PANEL)
            assert where is not None, "the seed's deadlocked gangs leave GPUs idle"
            idle, panel = _pixel(page, where["idle"]), _pixel(page, where["panel"])
            distance = sum(abs(a - b) for a, b in zip(idle, panel, strict=True))
            assert distance > 120, (theme, idle, panel)
            screenshot(page, f"heatmap-idle-{theme}")
    assert errors == []
