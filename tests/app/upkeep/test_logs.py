"""Structured logs with a request id (docs/operations.md, "Logs"): a real gunicorn serving
gpuobs and a real Celery worker, both with ``GPUOBS_LOG_FORMAT=json``: every line each writes is
one JSON object, and the id a request came with is on the web's lines for it (the access line,
the task it sends) and on the worker's lines of that task. The start-up probe's 503 is no ERROR.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
from django.test import Client

from diagnosis.actions.upkeep.health import HEARTBEAT_KEY, redis_client
from diagnosis.actions.workflow.review import request_recommendation
from diagnosis.models import ApiToken, Recommendation
from gpuobs.logs import accepted_id
from tests.conftest import REPO_ROOT
from tests.support.celery_worker import celery_worker_process, database_url_of_test_database
from tests.support.processes import free_port, start_logged, stop_group, wait_until
from tests.support.records import make_recommendation

JSON_LOGS = {"GPUOBS_LOG_FORMAT": "json"}
# What Celery prints itself, not through logging: its shutdown notice (to stdout, always), and a
# warning when the tests run as root (as CI does; the image runs as an unprivileged user).
NOT_LOG_LINES = ("worker: Warm shutdown (MainProcess)",)
AS_ROOT = "ignore:You're running the worker with superuser privileges"


def json_lines(path: Path) -> list[dict]:
    """Every line of a log, each parsed as JSON (a line that is not fails the test)."""
    lines = [line for line in path.read_text().splitlines() if line.strip()]
    return [json.loads(line) for line in lines if line not in NOT_LOG_LINES]


@pytest.fixture
def web(redis_url: str, tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """gunicorn serving gpuobs with JSON logs, against the test database and Redis."""
    port = free_port()
    log = tmp_path / "web.log"
    env = {
        **os.environ,
        **JSON_LOGS,
        "DATABASE_URL": database_url_of_test_database(),
        "REDIS_URL": redis_url,
        "GUNICORN_CMD_ARGS": "-c python:gpuobs.gunicorn_conf",
    }
    process = start_logged(
        [sys.executable, "-m", "gunicorn", "gpuobs.wsgi:application", "--bind",
         f"127.0.0.1:{port}", "--workers", "1", "--access-logfile", "-"],
        log,
        cwd=REPO_ROOT,
        env=env,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: requests.get(f"{url}/healthz", timeout=2).ok, "gunicorn", timeout=60)
        yield url, log
    finally:
        stop_group(process)
        print(log.read_text())  # shown by pytest when the test fails


@pytest.mark.celery_worker
@pytest.mark.django_db(transaction=True)
@pytest.mark.lab("lab-logs", dry_run=False)
def test_one_request_id_from_the_request_to_the_worker_in_json_lines(
    web, lab, carol, dave, redis_url, tmp_path
) -> None:
    url, web_log = web
    rec = make_recommendation(lab, "queue-weight", "queue:team-b", {"from": 1, "to": 3})
    request_recommendation(rec, carol)
    _row, token = ApiToken.issue(dave, "logs-test")

    worker_env = {**JSON_LOGS, "PYTHONWARNINGS": AS_ROOT}
    with celery_worker_process("actuate", redis_url, tmp_path, env=worker_env, quiet=True):
        answer = requests.post(
            f"{url}/api/v1/recommendations/{rec.pk}/approve/",
            headers={"Authorization": f"Token {token}", "X-Request-ID": "req-h31-0001"},
            timeout=30,
        )
        assert answer.status_code == 200, answer.text
        wait_until(
            lambda: Recommendation.objects.get(pk=rec.pk).dry_run_result,
            "the worker's dry run",
            timeout=60,
        )
    worker_lines = json_lines(tmp_path / "worker.log")
    web_lines = json_lines(web_log)

    assert answer.headers["X-Request-ID"] == "req-h31-0001"
    mine = [line for line in web_lines if line.get("request_id") == "req-h31-0001"]
    assert {line["logger"] for line in mine} >= {"gunicorn.access", "diagnosis.actions.enqueue"}
    access = next(line for line in mine if line["logger"] == "gunicorn.access")
    assert (access["method"], access["status"]) == ("POST", "200")
    sent = next(line for line in mine if line["logger"] == "diagnosis.actions.enqueue")
    task_id = sent["message"].rsplit("task ", 1)[1].rstrip(")")
    of_task = [line for line in worker_lines if line.get("task_id") == task_id]
    assert of_task, "the worker logged nothing of the task the request sent"
    assert {line["request_id"] for line in of_task} == {"req-h31-0001"}
    assert {line["task_name"] for line in of_task} == {"diagnosis.tasks.actuate_dry_run"}
    assert all({"time", "level", "logger", "message"} <= set(line) for line in worker_lines)


@pytest.mark.django_db
def test_a_request_without_a_sane_id_gets_a_new_one() -> None:
    sent = Client().get("/healthz", HTTP_X_REQUEST_ID="bad id\nwith: a newline")
    none = Client().get("/healthz")

    assert sent["X-Request-ID"] != "bad id\nwith: a newline"
    assert len(sent["X-Request-ID"]) == 32
    assert none["X-Request-ID"] != sent["X-Request-ID"]
    assert accepted_id("abc-1.2:3") == "abc-1.2:3"


@pytest.mark.django_db
def test_the_start_up_probe_503_is_info_not_error(redis_url, caplog) -> None:
    redis = redis_client(redis_url)
    redis.delete(*(HEARTBEAT_KEY.format(component=c) for c in ("worker", "beat")))

    with caplog.at_level("INFO"):
        answer = Client().get("/healthz?deep=1")

    assert answer.status_code == 503
    assert not [r for r in caplog.records if r.levelname == "ERROR"]
    (probe,) = [r for r in caplog.records if r.name == "diagnosis.pages.health"]
    assert (probe.levelname, "(starting)" in probe.getMessage()) == ("INFO", True)


GUNICORN_CONF = "import gpuobs.gunicorn_conf as c; print(c.logconfig_dict['version'])"


def test_gunicorn_config_imports_without_django() -> None:
    ran = subprocess.run(
        [sys.executable, "-c", GUNICORN_CONF],
        cwd=REPO_ROOT,
        env={k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )

    assert ran.stdout.strip() == "1", ran.stderr
