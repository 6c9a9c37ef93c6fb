"""Pages in a real browser: Debian's headless Chromium driven by Playwright (never
``playwright install``: the browser is /usr/bin/chromium, ``apt-get install chromium``), and the
stepped demo cluster the browser tests look at.

Build the database state before the browser starts: Playwright's session must not share its
thread with database work.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from diagnosis.actions.records.cycles import run_cluster_cycle
from diagnosis.models import Cluster
from tests.conftest import REPO_ROOT, require_binary, running_in_ci
from tests.support.records import seed_demo_cluster
from tests.support.world import DEFAULT_PASSWORD

CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
TIMEOUT_MS = 20_000
STEP_S = 600


@pytest.fixture
def chromium() -> str:
    """The Chromium binary; without it or without playwright, fail under CI=true, else skip."""
    path = require_binary("chromium", "apt-get install chromium")
    try:
        import playwright.sync_api  # noqa: F401, PLC0415 -- is playwright installed?
    except ImportError:
        message = "playwright is not installed: pip install -r requirements-dev.txt"
        if running_in_ci():
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    return path


@contextmanager
def stepped_seed_cluster(name: str, cycles: int, step_s: int = STEP_S) -> Iterator[Cluster]:
    """The demo's seed scenario as cluster ``name``, run ``cycles`` cycles of ``step_s``
    simulated seconds up to now; its simulator is forgotten afterwards."""
    start = datetime.now(UTC) - timedelta(seconds=cycles * step_s)
    with seed_demo_cluster(name, step_s, start=start) as cluster:
        for _ in range(cycles):
            run_cluster_cycle(cluster)
        yield cluster


@contextmanager
def module_seed_cluster(db_blocker: Any, name: str, cycles: int) -> Iterator[Cluster]:
    """:func:`stepped_seed_cluster` for a test module: committed once (``db_blocker``: pytest-
    django's ``django_db_blocker``), deleted after the module, the pages' snapshot caches
    emptied before and after."""
    from diagnosis.edge.sim import runtime as sim_runtime  # noqa: PLC0415 - pages' tests only
    from diagnosis.pages.support import snapshots  # noqa: PLC0415 - as above

    with db_blocker.unblock():
        sim_runtime.forget(name)
        snapshots.forget_cached()
        with stepped_seed_cluster(name, cycles) as cluster:
            yield cluster
            Cluster.objects.filter(pk=cluster.pk).delete()
    snapshots.forget_cached()


SCREENSHOTS = REPO_ROOT / "var" / "screenshots"


def screenshot(page, name: str, folder: Path = SCREENSHOTS) -> None:
    """The whole of ``page`` as ``folder/<name>.png`` (var/screenshots/ unless told)."""
    folder.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(folder / f"{name}.png"), full_page=True)


@contextmanager
def browser_page(chromium: str, **options: Any) -> Iterator[tuple[Any, list[str]]]:
    """A 1280×900 page of a fresh headless Chromium, and the list that collects its JavaScript
    errors and every HTTP answer >= 400 (a test asserts it stays empty). ``options`` go to
    Playwright's ``new_page`` (``timezone_id="Europe/Paris"``: the browser's own zone)."""
    from playwright.sync_api import sync_playwright  # noqa: PLC0415 -- optional (see chromium)

    errors: list[str] = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900}, **options)
            page.set_default_timeout(TIMEOUT_MS)
            page.on("pageerror", lambda error: errors.append(str(error)))
            page.on(
                "response",
                lambda r: errors.append(f"{r.status} {r.url}") if r.status >= 400 else None,
            )
            yield page, errors
        finally:
            browser.close()


def log_in(page: Any, username: str, *, then: str) -> None:
    """Fill the login form the page shows and wait until it lands on ``then``."""
    page.fill("#id_username", username)
    page.fill("#id_password", DEFAULT_PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(then)
