"""Issue #32 item 6 in a real browser (Debian's headless Chromium via Playwright): one clock a
page, the reader's time zone, and the zh-Hans Xid meaning on the incident page.

The demo's seed scenario runs 13 cycles of 600 simulated seconds *from now*, so its clock ends
2 h 10 min ahead of the wall clock (as the demo's, which runs 60x faster, does within minutes):
its Xid 79 on gpu-100/3 opens the incident at about now + 2 h on the cluster's clock. erin
acknowledges it now on the wall clock. Before, the timeline showed "acknowledged" at the wall
time, two hours *before* "opened"; now every time is on the cluster's clock, the page says so,
and the acknowledgement follows the opening. Then she picks Asia/Shanghai in the header: every
time reads 8 hours later, labelled UTC+8, on this page and the next; her browser's own zone
(Europe/Paris here) is offered too. In Chinese the Xid's meaning is Chinese."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest

from diagnosis.actions.records.cycles import run_cluster_cycle
from diagnosis.models import Cluster, Incident
from tests.support.browser import browser_page, chromium, log_in
from tests.support.records import seed_demo_cluster

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
__all__ = ["chromium"]  # a fixture this module uses

CLUSTER = "browser-clocks"
CYCLES = 13  # the seed scenario's Xid 79 on gpu-100/3 comes at 2:00, the 12th cycle's snapshot
STAMP = re.compile(r"(\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}) (UTC(?:[+-]\d+)?)")


@pytest.fixture
def ahead(settings) -> Iterator[Cluster]:
    settings.GPUOBS_CYCLE_SECONDS = 3600
    with seed_demo_cluster(CLUSTER, 600, start=datetime.now(UTC).replace(microsecond=0)) as c:
        for _ in range(CYCLES):
            run_cluster_cycle(c)
        yield c


def stamps(text: str) -> list[tuple[datetime, str]]:
    return [(datetime.fromisoformat(day), zone) for day, zone in STAMP.findall(text)]


def test_the_incident_timeline_reads_on_one_clock_in_the_readers_zone(
    chromium: str, live_server, ahead: Cluster, erin
) -> None:
    from playwright.sync_api import expect  # noqa: PLC0415 -- optional: `chromium` skips without it

    incident = Incident.objects.get(cluster=ahead, node="gpu-100", gpu_index=3, xid_code=79)
    assert incident.opened_at > datetime.now(UTC) + timedelta(hours=1)  # the cluster runs ahead
    base = live_server.url
    url = f"{base}/clusters/{CLUSTER}/incidents/{incident.pk}/"
    with browser_page(chromium, timezone_id="Europe/Paris") as (page, errors):
        page.goto(f"{base}/accounts/login/")
        log_in(page, "erin", then=f"{base}/")
        page.goto(url)
        expect(page.locator("#cluster-clock-note")).to_contain_text("Cluster clock")
        page.click("#action-acknowledge")
        page.wait_for_url(url)
        expect(page.locator("#incident-state")).to_have_text("Acknowledged")

        rows = page.locator("#timeline tbody tr")
        kinds = [k.split()[0] for k in rows.locator("td:nth-child(3)").all_inner_texts()]
        times = [stamps(t)[0] for t in rows.locator("td:nth-child(1)").all_inner_texts()]
        assert kinds.index("opened") < kinds.index("acknowledged")
        assert [t for t, _ in times] == sorted(t for t, _ in times)  # in the order they happened
        assert {zone for _, zone in times} == {"UTC"}  # UTC unless the reader chose otherwise
        opened_utc = times[kinds.index("opened")][0]
        # the acknowledgement keeps its wall-clock time in its tooltip
        acknowledged = rows.nth(kinds.index("acknowledged")).locator("time")
        assert "wall clock" in acknowledged.get_attribute("title")

        # the browser's own zone is offered beside the list's; choosing one reloads the page
        expect(page.locator("#time-zone-select option[value='Europe/Paris']")).to_have_count(1)
        with page.expect_navigation():
            page.select_option("#time-zone-select", "Asia/Shanghai")
        rows = page.locator("#timeline tbody tr")
        shanghai = [stamps(t)[0] for t in rows.locator("td:nth-child(1)").all_inner_texts()]
        assert {zone for _, zone in shanghai} == {"UTC+8"}
        assert shanghai[kinds.index("opened")][0] == opened_utc + timedelta(hours=8)
        facts = page.locator("dl.facts").inner_text()
        assert {zone for _, zone in stamps(facts)} == {"UTC+8"}

        # the choice is kept for the next page, its range picker in the same zone
        page.goto(f"{base}/clusters/{CLUSTER}/")
        expect(page.locator("form.range-picker")).to_contain_text("From (UTC+8)")
        assert {zone for _, zone in stamps(page.locator("main").inner_text())} == {"UTC+8"}

        # in Chinese: the Xid's meaning and action, and plotly's dates
        with page.expect_navigation():
            page.select_option("#language-select", "zh-hans")
        page.goto(url)
        expect(page.locator("#what-broke .meaning")).to_have_text("GPU 已从总线上掉线。")
        expect(page.locator("#what-broke .action-text")).to_contain_text("排空该节点并重启")
        page.goto(f"{base}/clusters/{CLUSTER}/")
        ticks = page.locator("[data-figure][data-drawn] .xtick text")
        expect(ticks.first).to_be_visible()
        labels = ticks.evaluate_all("texts => texts.map(text => text.textContent)")
        assert any("月" in label for label in labels), labels
    assert errors == []
