"""Issue #29, item 1: a web process's database statements end before gunicorn's 30 s worker
timeout; other processes (workers, migrations) keep no such limit."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from django.conf import settings

from tests.conftest import REPO_ROOT

SHOW = (
    "import os, django; os.environ.setdefault('DJANGO_SETTINGS_MODULE', 'gpuobs.settings');"
    "{entry}; from django.db import connection; c = connection.cursor();"
    "c.execute('SHOW statement_timeout'); print(c.fetchone()[0])"
)


def statement_timeout(entry: str) -> str:
    db = settings.DATABASES["default"]
    if db["ENGINE"] != "django.db.backends.postgresql":
        pytest.skip("PostgreSQL only")
    url = f"postgres://{db['USER']}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/postgres"
    env = {k: v for k, v in os.environ.items() if k != "GPUOBS_WEB_PROCESS"}
    done = subprocess.run(
        [sys.executable, "-c", SHOW.format(entry=entry)],
        cwd=REPO_ROOT,
        env={**env, "DATABASE_URL": url},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return done.stdout.strip()


def test_the_web_process_cancels_a_statement_after_20_s() -> None:
    assert statement_timeout("import gpuobs.wsgi") == "20s"


def test_a_worker_or_command_has_no_statement_timeout() -> None:
    assert statement_timeout("django.setup()") == "0"
