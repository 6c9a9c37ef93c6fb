"""The recommendation loop in a real browser (Debian's headless Chromium via Playwright): the
demo's seed scenario runs until binpack is proposed for its fragmented pool and carol asks for
it; dave logs in, opens the recommendation (its impact drawn by plotly, the badge "Requested"),
approves it -- confirming first the harm its estimate predicts (hpo's share above its fair
share, issue #26.5) --,
sees the scheduler's dry run and the figures' snapshot time, applies it and sees what happened
and the audit row. Saves a screenshot of the page to
``var/screenshots/recommendation.png``."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from diagnosis.actions.workflow.review import request_recommendation, set_cluster_writes
from diagnosis.models import Recommendation
from tests.conftest import REPO_ROOT
from tests.support.browser import browser_page, chromium, log_in, stepped_seed_cluster

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
__all__ = ["chromium"]  # a fixture this module uses

CLUSTER = "browser-loop"
CYCLES = 3  # fragmentation is reported from 0:30 in the seed scenario
SCREENSHOT = REPO_ROOT / "var" / "screenshots" / "recommendation.png"


@pytest.fixture
def requested(settings, alice, carol) -> Iterator[Recommendation]:
    """The seed scenario up to its first binpack proposal, writes on, requested by carol."""
    settings.GPUOBS_CYCLE_SECONDS = 3600
    with stepped_seed_cluster(CLUSTER, CYCLES) as cluster:
        set_cluster_writes(cluster, alice, enabled=True)
        rec = Recommendation.objects.get(
            cluster=cluster, kind="placement-policy", target="pool:a100", state="proposed"
        )
        yield request_recommendation(rec, carol)


def test_dave_approves_and_applies_binpack_in_a_browser(
    chromium: str,
    live_server,
    celery_eager,
    requested: Recommendation,
    dave,
) -> None:
    from playwright.sync_api import expect  # noqa: PLC0415 -- optional: `chromium` skips without it

    base = live_server.url
    harm = list(requested.impact.get("harm") or ())  # read before the browser's thread
    assert harm, "the seed scenario's binpack raises hpo's share above its fair share"
    with browser_page(chromium) as (page, errors):
        page.goto(f"{base}/accounts/login/")
        log_in(page, "dave", then=f"{base}/")

        page.goto(f"{base}/clusters/{CLUSTER}/")
        page.click("nav.topnav >> text=Recommendations")
        page.click("table.recommendations a.subject >> text=pool:a100")
        page.wait_for_url(f"{base}/clusters/{CLUSTER}/recommendations/{requested.pk}/")
        page.wait_for_selector("#impact-chart .main-svg")  # plotly drew the impact
        expect(page.locator("#rec-state")).to_have_text("Requested")

        page.click("#action-approve")
        # issue #26.5: the predicted harm is shown and confirmed first
        expect(page.locator("#confirm-harm")).to_contain_text(harm[0])
        expect(page.locator("#rec-state")).to_have_text("Requested")
        page.click("#action-approve-despite-harm")
        expect(page.locator("#rec-state")).to_have_text("Approved")
        expect(page.locator("ul.messages")).to_contain_text(
            "Dry run: the scheduler takes this change"
        )
        expect(page.locator("#impact-as-of")).to_contain_text("Figures from the snapshot of")
        expect(page.locator("#dry-run-command")).to_contain_text('"to": "binpack"')
        expect(page.locator("#dry-run-diff")).to_contain_text("spread")

        page.click("#action-apply")
        expect(page.locator("#rec-state")).to_have_text("Applied")
        expect(page.locator("ul.messages")).to_contain_text("Applied: sim apply")
        audit = page.locator("#audit tr.audit-row").last  # a row's before/after are tables
        expect(audit).to_contain_text("dave")
        expect(audit).to_contain_text("Applied")
        expect(page.locator("#applied-command")).to_contain_text("placement-policy")
        expect(page.locator("#action-rollback")).to_be_visible()
        SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SCREENSHOT), full_page=True)
    assert errors == []
    requested.refresh_from_db()
    assert (requested.state, requested.approved_by, requested.applied_by) == (
        "applied",
        dave,
        dave,
    )
    approval = requested.audit_entries.get(action="approve")
    assert approval.after["harm_confirmed"] == harm
