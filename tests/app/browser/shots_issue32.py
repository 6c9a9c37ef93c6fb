"""Screenshots of issue #32's daily views over the demo, for people to look at: run by
``scripts/screenshots.py`` (not collected by the suite: its name does not start with ``test_``).

The cluster is the demo's seed scenario (``manage.py demo``'s, stepped 10 simulated minutes a
cycle) on a throwaway test database, served by Django's live server and driven by Debian's
headless Chromium. It walks the issue's states in order -- before the Xid's drain, after it,
the repaired GPU's resume proposed, the node back and the incident resolved -- and captures
each item's pages as the SRE (carol), the manager of ``research`` (mallory) and on-call (erin)
see them, in English and Simplified Chinese (the browser's Accept-Language), at 1440 and 390 px,
a few in the dark theme too. Output: ``var/screenshots/issue32/<item>/<page>-<lang>-<width>.png``
(git-ignored); the paths are printed at the end.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from diagnosis.actions.oncall.drain import drain_for_incident
from diagnosis.actions.workflow.review import (
    approve_recommendation,
    request_apply,
    request_recommendation,
    set_cluster_writes,
)
from diagnosis.models import Incident, Recommendation, Tenant
from tests.support.browser import (
    CHROMIUM_ARGS,
    SCREENSHOTS,
    TIMEOUT_MS,
    chromium,
    stepped_seed_cluster,
)
from tests.support.records import run_cycles
from tests.support.world import logged_in_client

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
__all__ = ["chromium"]  # a fixture this module uses

CLUSTER = "demo"
OUT = SCREENSHOTS / "issue32"
LANGUAGES = {"en": "en-US,en;q=0.9", "zh-hans": "zh-CN,zh;q=0.9"}
WIDTHS = {1440: 900, 390: 844}
TO_THE_XID = 13  # the seed's Xid 79 on gpu-100 GPU 3 comes at 2:00, the 12th cycle's snapshot
SAVED: list[Path] = []


def cookie(user: Any, base: str) -> dict[str, str]:
    """A logged-in session of ``user`` as the browser's cookie (made off Playwright's thread)."""
    client = logged_in_client(user)
    return {"name": "sessionid", "value": client.cookies["sessionid"].value, "url": base}


@contextmanager
def browser(chromium: str) -> Iterator[Any]:
    from playwright.sync_api import sync_playwright  # noqa: PLC0415 -- optional (see chromium)

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
        try:
            yield launched
        finally:
            launched.close()


def capture(
    chromium: str,
    base: str,
    user: Any,
    shots: list[tuple[str, str, str]],
    *,
    dark: tuple[str, ...] = (),
) -> None:
    """Each ``(item, name, path)`` of ``shots`` as ``user`` sees it, in every language and width
    (and dark, for the names in ``dark``). Database work is done before the browser starts."""
    session = cookie(user, base)
    with browser(chromium) as launched:
        for language, accept in LANGUAGES.items():
            for width, height in WIDTHS.items():
                context = launched.new_context(
                    viewport={"width": width, "height": height},
                    extra_http_headers={"Accept-Language": accept},
                )
                context.add_cookies([session])
                page = context.new_page()
                page.set_default_timeout(TIMEOUT_MS)
                for item, name, path in shots:
                    themes = ("light", "dark") if name in dark else ("light",)
                    for theme in themes:
                        page.goto(f"{base}{path}")
                        page.evaluate(f"localStorage.setItem('gpuobs-theme', '{theme}')")
                        page.reload()
                        page.wait_for_load_state("networkidle")
                        suffix = "" if theme == "light" else "-dark"
                        target = OUT / item / f"{name}-{language}-{width}{suffix}.png"
                        target.parent.mkdir(parents=True, exist_ok=True)
                        page.screenshot(path=str(target), full_page=True)
                        SAVED.append(target)
                context.close()


@pytest.mark.timeout(3600)
def test_capture_issue_32(
    chromium: str, live_server, celery_eager, settings, alice, carol, dave, erin, mallory
) -> None:
    settings.GPUOBS_CYCLE_SECONDS = 3600  # the stepped data stays fresh while it is captured
    base = live_server.url
    c = f"/clusters/{CLUSTER}"
    with stepped_seed_cluster(CLUSTER, TO_THE_XID) as cluster:
        set_cluster_writes(cluster, alice, enabled=True)
        Tenant.objects.get(cluster=cluster, name="research").managers.add(mallory)
        incident = Incident.objects.get(cluster=cluster, node="gpu-100", gpu_index=3, xid_code=79)
        app_xid = Incident.objects.get(cluster=cluster, node="gpu-090", gpu_index=1)
        capture(
            chromium,
            base,
            carol,
            [
                ("01-heatmap-idle", "nodes", f"{c}/nodes/"),
                ("08-live", "clusters", "/"),
                ("08-live", "overview", f"{c}/"),
                ("08-live", "findings", f"{c}/findings/"),
                ("08-live", "incidents", f"{c}/incidents/"),
                ("08-live", "node", f"{c}/nodes/gpu-100/"),
                ("08-live", "gpu", f"{c}/nodes/gpu-100/gpus/3/"),
                ("03-04-fairness", "fairness", f"{c}/fairness/"),
                ("11-partial-gang", "job-sweep-gang-a", f"{c}/jobs/sweep-gang-a/"),
                ("12-tables", "nodes-unhealthy", f"{c}/nodes/?health=unhealthy"),
                ("12-tables", "nodes-by-xids", f"{c}/nodes/?sort=-xids"),
                ("12-tables", "jobs-by-wait", f"{c}/jobs/?sort=-wait"),
                ("12-tables", "queues-by-used", f"{c}/queues/?sort=-used"),
                ("overlay", "two-gpus", f"{c}/overlay/?gpu=gpu-100/3+gpu-090/1&range=6h"),
                ("overlay", "job-pretrain-a", f"{c}/overlay/?job=pretrain-a&range=6h"),
                ("13-recovery", "0-xid13-open", f"{c}/incidents/{app_xid.pk}/"),
            ],
            dark=("nodes", "overview", "two-gpus"),
        )
        capture(
            chromium,
            base,
            mallory,
            [
                ("05-manager", "fairness", f"{c}/fairness/"),
                ("05-manager", "incidents", f"{c}/incidents/"),
            ],
        )

        drain = drain_for_incident(incident, erin)
        run_cycles(cluster, 1)  # the scheduler's eviction events
        drain.refresh_from_db()
        evicted = sorted(
            (Incident.objects.get(pk=incident.pk).details.get("drain") or {}).get("evicted") or {}
        )
        shots = [("13-recovery", "1-drained", f"{c}/incidents/{incident.pk}/")]
        if evicted:
            shots.append(("07-evicted-job", "job", f"{c}/jobs/{evicted[0]}/"))
        capture(chromium, base, erin, shots)

        run_cycles(cluster, 4)  # repaired 30 min after the drain: the resume is proposed
        undo = Recommendation.objects.get(rollback_of=drain)
        capture(
            chromium,
            base,
            erin,
            [
                ("13-recovery", "2-resume-proposed", f"{c}/incidents/{incident.pk}/"),
                ("13-recovery", "2-xid13-resolved", f"{c}/incidents/{app_xid.pk}/"),
            ],
        )

        request_recommendation(undo, carol)
        approve_recommendation(undo, dave)
        request_apply(undo, dave)
        for _ in range(6):
            run_cycles(cluster, 1)
            if Incident.objects.get(pk=incident.pk).state == "resolved":
                break
        incident.refresh_from_db()
        capture(
            chromium,
            base,
            erin,
            [
                ("13-recovery", "3-resume-applied", f"{c}/recommendations/{undo.pk}/"),
                ("13-recovery", "4-resolved", f"{c}/incidents/{incident.pk}/"),
                ("13-recovery", "4-finding-resolved", f"{c}/findings/{incident.finding_id}/"),
            ],
        )
        assert incident.state == "resolved", incident.state
    print("\n".join(str(path.relative_to(OUT.parent.parent.parent)) for path in SAVED))
