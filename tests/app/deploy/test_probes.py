"""The web container as Kubernetes and Prometheus see it: gunicorn with the production settings
(``DJANGO_DEBUG=0``, the SSL redirect on), asked over plain HTTP like a kubelet's probe or an
in-cluster scrape. ``/livez`` answers with the database gone, ``/readyz`` says which dependency
is missing, ``/metrics`` answers 200 with a token (401 without) and its text passes
``promtool check metrics``, and pages keep their redirect to HTTPS."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import requests

from tests.conftest import REPO_ROOT, require_binary
from tests.support.celery_worker import database_url_of_test_database
from tests.support.notify_world import record_cycles, scraper
from tests.support.processes import free_port, start_logged, stop_group, wait_until

# nothing listens on the discard port: every connection is refused at once
DEAD_DATABASE = "postgres://gpuobs@127.0.0.1:9/gpuobs"
DEAD_REDIS = "redis://127.0.0.1:9/0"


def production_env(database_url: str, redis_url: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DJANGO_")}
    env.update(
        {
            "DJANGO_SETTINGS_MODULE": "gpuobs.settings",
            "DJANGO_DEBUG": "0",
            "DJANGO_SECRET_KEY": secrets.token_urlsafe(64),
            "DJANGO_ALLOWED_HOSTS": "127.0.0.1",
            "DATABASE_URL": database_url,
            "REDIS_URL": redis_url,
        }
    )
    return env


@contextmanager
def gunicorn(env: dict[str, str], tmp_path: Path) -> Iterator[str]:
    """The image's web command on a free loopback port; its base URL."""
    port = free_port()
    log = tmp_path / "gunicorn.log"
    process = start_logged(
        [
            sys.executable,
            "-m",
            "gunicorn",
            "gpuobs.wsgi:application",
            "--bind",
            f"127.0.0.1:{port}",
            "--workers",
            "1",
        ],
        log,
        cwd=REPO_ROOT,
        env=env,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until(
            lambda: process.poll() is None and requests.get(f"{url}/livez", timeout=2),
            f"gunicorn on {url} ({log})",
            timeout=60,
        )
        yield url
    finally:
        stop_group(process)


def get(url: str, **kwargs) -> requests.Response:
    return requests.get(url, timeout=10, allow_redirects=False, **kwargs)


def test_livez_answers_without_a_database_and_readyz_names_what_is_missing(tmp_path) -> None:
    with gunicorn(production_env(DEAD_DATABASE, DEAD_REDIS), tmp_path) as url:
        live = get(f"{url}/livez")
        ready = get(f"{url}/readyz")
        shallow = get(f"{url}/healthz")

    assert live.status_code == 200, live.text
    assert live.json() == {"status": "ok"}
    assert ready.status_code == 503
    assert ready.json()["database"]["status"] == "error"
    assert ready.json()["redis"]["status"] == "error"
    assert shallow.status_code == 503


@pytest.mark.django_db(transaction=True)
def test_metrics_over_plain_http_with_production_settings(make_cluster, tmp_path) -> None:
    promtool = require_binary("promtool", "apt-get install prometheus")
    record_cycles(make_cluster("outbound"), ["idle", "idle", "idle"])
    token, _ = scraper()
    redis_url = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
    env = production_env(database_url_of_test_database(), redis_url)

    with gunicorn(env, tmp_path) as url:
        anonymous = get(f"{url}/metrics")
        scraped = get(f"{url}/metrics", headers={"Authorization": f"Bearer {token}"})
        ready = get(f"{url}/readyz")
        page = get(f"{url}/")

    assert anonymous.status_code == 401
    assert scraped.status_code == 200, scraped.text[:300]
    assert b"gpuobs_build_info{version=" in scraped.content
    assert b"gpuobs_cycle_duration_seconds_bucket{" in scraped.content
    assert ready.status_code == 200, ready.text
    assert page.status_code == 301
    assert page.headers["Location"].startswith("https://")
    check = subprocess.run(
        [promtool, "check", "metrics"],
        input=scraped.content,
        capture_output=True,
        timeout=30,
        check=False,
    )
    assert check.returncode == 0, check.stdout.decode() + check.stderr.decode()
    assert check.stdout.decode().strip() == "", check.stdout.decode()


@pytest.mark.django_db
def test_livez_makes_no_query_and_readyz_asks_the_database(client, django_assert_num_queries):
    with django_assert_num_queries(0):
        assert client.get("/livez").status_code == 200
    with django_assert_num_queries(1):
        ready = client.get("/readyz")
    assert ready.json()["database"] == {"status": "ok", "detail": "answers"}
