"""Issue #32 item 13, the whole incident loop in a real browser (Debian's headless Chromium via
Playwright): the demo's seed scenario past its Xid 79 on gpu-100 GPU 3, writes on. erin
(oncall) drains gpu-100 from the incident; the simulator repairs the GPU 30 simulated minutes
after the drain (``RepairAfterDrain``, diagnosis/core/simulate/scenarios.py), so a few cycles
later the incident shows the GPU healthy and gpuobs's proposal to put the node back; carol
(SRE) requested it, dave (a second SRE) approves and applies it in the browser; once the node
has been back and healthy for the healthy period the Xid finding resolves, and so does the
incident, by gpuobs. Screenshots: var/screenshots/recovery/.

The faster, browserless walk of the same path: tests/app/oncall/test_incident_recovery_demo.py.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from django.db import connection

from diagnosis.actions.records.cycles import run_cluster_cycle
from diagnosis.actions.workflow.review import request_recommendation, set_cluster_writes
from diagnosis.models import Cluster, Finding, Incident, Recommendation
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

CLUSTER = "browser-recovery"
CYCLES = 13  # the Xid 79 on gpu-100/3 comes at 2:00, the 12th cycle's snapshot
SHOTS = SCREENSHOTS / "recovery"


@pytest.fixture
def demo(settings, alice) -> Iterator[Cluster]:
    settings.GPUOBS_CYCLE_SECONDS = 3600
    with stepped_seed_cluster(CLUSTER, CYCLES) as cluster:
        set_cluster_writes(cluster, alice, enabled=True)
        yield cluster


def off_the_browser_thread(work: Callable[[], Any]) -> Any:
    """``work()`` in a thread of its own (never Playwright's event loop), its connection closed."""

    def run() -> Any:
        try:
            return work()
        finally:
            connection.close()

    with ThreadPoolExecutor(1) as pool:
        return pool.submit(run).result()


def cycles_until(cluster: Cluster, condition: Callable[[], bool], limit: int) -> None:
    def work() -> None:
        for _ in range(limit):
            assert run_cluster_cycle(Cluster.objects.get(pk=cluster.pk)).ok
            if condition():
                return
        pytest.fail(f"not reached in {limit} cycles")

    off_the_browser_thread(work)


def test_the_repaired_gpu_resolves_its_incident_in_the_browser(
    chromium: str, live_server, celery_eager, demo: Cluster, erin, carol, dave
) -> None:
    from playwright.sync_api import expect  # noqa: PLC0415 -- optional: `chromium` skips without it

    incident = Incident.objects.get(cluster=demo, node="gpu-100", gpu_index=3, xid_code=79)
    finding_id = incident.finding_id
    base = live_server.url
    here = f"{base}/clusters/{CLUSTER}/incidents/{incident.pk}/"

    def resume() -> Recommendation | None:
        return Recommendation.objects.filter(rollback_of__incidents=incident).first()

    with browser_page(chromium) as (page, errors):
        page.goto(f"{base}/accounts/login/")
        log_in(page, "erin", then=f"{base}/")
        page.goto(here)
        page.click("#action-drain")
        page.click("#confirm-drain")
        page.wait_for_url(here)
        expect(page.locator("#incident-state")).to_have_text("Mitigating")
        expect(page.locator("#resume-status")).to_contain_text("Once the GPU is healthy again")
        screenshot(page, "1-drained", SHOTS)

        cycles_until(demo, lambda: resume() is not None, limit=6)  # repaired 30 min later
        page.reload()
        expect(page.locator("#resume-status")).to_contain_text("Putting gpu-100 back in service")
        expect(page.locator("#resume-status")).to_contain_text("Proposed")
        expect(page.locator("#timeline")).to_contain_text("resume of gpu-100 proposed")
        expect(page.locator("dl.facts")).to_contain_text("GPU ok, node drained")
        expect(page.locator("#incident-state")).to_have_text("Mitigating")
        screenshot(page, "2-resume-proposed", SHOTS)
        undo = off_the_browser_thread(lambda: request_recommendation(resume(), carol))

        page.context.clear_cookies()
        page.goto(f"{base}/accounts/login/")
        log_in(page, "dave", then=f"{base}/")
        page.goto(f"{base}/clusters/{CLUSTER}/recommendations/{undo.pk}/")
        expect(page.locator("#rec-state")).to_have_text("Requested")
        page.click("#action-approve")
        expect(page.locator("#rec-state")).to_have_text("Approved")
        page.click("#action-apply")
        expect(page.locator("#rec-state")).to_have_text("Applied")
        screenshot(page, "3-resume-applied", SHOTS)

        cycles_until(
            demo,
            lambda: Incident.objects.get(pk=incident.pk).state == "resolved",
            limit=6,
        )
        page.goto(here)
        expect(page.locator("#incident-state")).to_have_text("Resolved")
        expect(page.locator("#timeline")).to_contain_text("healthy since")
        expect(page.locator("dl.facts")).to_contain_text("by gpuobs")
        page.click("#finding-link")
        expect(page.locator("body")).to_contain_text("Resolved")
        screenshot(page, "4-resolved", SHOTS)
    assert errors == []
    assert Finding.objects.get(pk=finding_id).state == "resolved"
    incident.refresh_from_db()
    assert (incident.state, incident.resolved_by) == ("resolved", None)
