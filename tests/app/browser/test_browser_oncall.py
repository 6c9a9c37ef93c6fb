"""The on-call journey in a real browser (issue #16; Debian's headless Chromium via Playwright):
the demo's seed scenario runs past its Xid 79 on gpu-100/3, writes on. erin (oncall) logs in,
opens the open Xid 79 incident, sees hpo-074 -- the job that failed at the Xid's second -- as
hit, presses Drain, sees the jobs to evict as they are now, confirms, sees the applied drain on
the incident and, once the next cycle brings the scheduler's eviction events, "preempted by the
drain" on an evicted job's page, and resolves the incident.

From the incident page to the applied drain: 2 clicks (Drain, Confirm)."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from diagnosis.actions.records.cycles import run_cluster_cycle
from diagnosis.actions.workflow.review import set_cluster_writes
from diagnosis.models import Cluster, Incident
from tests.conftest import REPO_ROOT
from tests.support.browser import browser_page, chromium, log_in, stepped_seed_cluster

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
__all__ = ["chromium"]  # a fixture this module uses

CLUSTER = "browser-oncall"
CYCLES = 13  # the seed scenario's Xid 79 on gpu-100/3 comes at 2:00, the 12th cycle's snapshot
SCREENSHOT = REPO_ROOT / "var" / "screenshots" / "incident.png"


@pytest.fixture
def demo(settings, alice) -> Iterator[Cluster]:
    settings.GPUOBS_CYCLE_SECONDS = 3600
    with stepped_seed_cluster(CLUSTER, CYCLES) as cluster:
        set_cluster_writes(cluster, alice, enabled=True)
        yield cluster


def test_erin_drains_the_node_of_the_xid_79_incident_and_resolves_it(
    chromium: str, live_server, celery_eager, demo: Cluster, erin
) -> None:
    from playwright.sync_api import expect  # noqa: PLC0415 -- optional: `chromium` skips without it

    incident = Incident.objects.get(cluster=demo, node="gpu-100", gpu_index=3, xid_code=79)
    assert incident.state == "open"  # nobody acted yet: it waits for someone
    base = live_server.url
    with browser_page(chromium) as (page, errors):
        page.goto(f"{base}/accounts/login/")
        log_in(page, "erin", then=f"{base}/")

        page.goto(f"{base}/clusters/{CLUSTER}/incidents/")
        page.click(f"a.incident-link[href='/clusters/{CLUSTER}/incidents/{incident.pk}/']")
        page.wait_for_url(f"{base}/clusters/{CLUSTER}/incidents/{incident.pk}/")
        expect(page.locator("#what-broke")).to_contain_text("GPU has fallen off the bus.")
        expect(page.locator("#jobs-hit")).to_contain_text("hpo-074")
        expect(page.locator("#jobs-hit")).to_contain_text("failed")

        page.click("#action-drain")  # click 1
        expect(page.locator("#drain-jobs")).to_be_visible()
        evicted = page.locator("#drain-jobs tr.evict a").first.inner_text()

        page.click("#confirm-drain")  # click 2: the drain is applied
        page.wait_for_url(f"{base}/clusters/{CLUSTER}/incidents/{incident.pk}/")
        expect(page.locator("#incident-state")).to_have_text("Mitigating")
        expect(page.locator("#drain-status")).to_contain_text("Applied")
        expect(page.locator("#timeline")).to_contain_text("mitigating")

        # the next cycle brings the scheduler's eviction events: they name the evicted jobs
        with ThreadPoolExecutor(1) as pool:  # outside Playwright's event loop
            pool.submit(run_cluster_cycle, demo).result()
        page.reload()
        expect(page.locator("#timeline")).to_contain_text(f"job {evicted} preempted by the drain")
        page.click(f"#drain a >> text={evicted}")
        expect(page.locator("p.drain-note")).to_contain_text(
            f"preempted by the drain of gpu-100 for incident #{incident.pk}"
        )

        page.goto(f"{base}/clusters/{CLUSTER}/incidents/{incident.pk}/")
        page.fill("#actions input[name=note]", "GPU reseated")
        page.click("#action-resolve")
        expect(page.locator("#incident-state")).to_have_text("Resolved")
        SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SCREENSHOT), full_page=True)
    assert errors == []
    incident.refresh_from_db()
    assert (incident.state, incident.resolved_by) == ("resolved", erin)
    assert incident.drain.state in ("applied", "verified")  # the extra cycle may verify it
