"""A real ``celery -A gpuobs worker`` process against the test database and Redis (the worker
tests of tests/app, the fault suite's environment)."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import quote

from django.db import connection

from gpuobs import celery_app
from tests.conftest import REPO_ROOT


def database_url_of_test_database() -> str:
    """A DATABASE_URL for the database pytest-django made (``test_<name>``)."""
    db = connection.settings_dict
    credentials = quote(db["USER"] or "", safe="")
    if db["PASSWORD"]:
        credentials += ":" + quote(db["PASSWORD"], safe="")
    return f"postgres://{credentials}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"


@contextmanager
def celery_worker_process(
    queues: str,
    redis_url: str,
    tmp_path: Path,
    env: dict[str, str] | None = None,
    *,
    quiet: bool = False,
    processes: int | None = None,
    name: str = "worker",
) -> Iterator[subprocess.Popen]:
    """A real ``celery -A gpuobs worker`` process on ``queues``, against the test database and
    ``redis_url`` (messages an interrupted earlier run left are purged first); its log is
    ``tmp_path/<name>.log``, printed (pytest shows it when a test fails) once the process is
    stopped (terminate, then kill) at the end of the block. ``env``: more environment;
    ``quiet``: no start-up banner (Celery's ``--quiet``); ``processes``: a prefork pool of that
    many child processes, as deployed (default: the solo pool, one process)."""
    celery_app.control.purge()
    env = {
        **os.environ,
        "DATABASE_URL": database_url_of_test_database(),
        "REDIS_URL": redis_url,
        **(env or {}),
    }
    command = [
        sys.executable,
        "-m",
        "celery",
        "-A",
        "gpuobs",
        *(["--quiet"] if quiet else []),
        "worker",
        "-Q",
        queues,
        *(["--pool=solo"] if processes is None else ["--pool=prefork", f"-c{processes}"]),
        "--loglevel=INFO",
        "--without-heartbeat",
        "--without-gossip",
        "--without-mingle",
        "--hostname",
        f"pytest-{uuid.uuid4().hex[:8]}@%h",
    ]
    log_path = tmp_path / f"{name}.log"
    with log_path.open("w") as log:
        worker = subprocess.Popen(
            command, cwd=REPO_ROOT, env=env, stdout=log, stderr=subprocess.STDOUT
        )
    try:
        yield worker
    finally:
        worker.terminate()
        try:
            worker.wait(timeout=30)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait()
        print(log_path.read_text())  # shown by pytest when the test fails
