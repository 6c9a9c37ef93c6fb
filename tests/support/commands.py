"""``manage.py`` run as its own process, as a user runs it."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.conftest import REPO_ROOT


def embedded_env() -> dict[str, str]:
    """This process's environment without the database and broker: the embedded settings."""
    return {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL"}}


def manage(
    *args: str,
    env: dict[str, str] | None = None,
    stdin: bytes | None = None,
    text: bool = False,
) -> subprocess.CompletedProcess:
    """Run ``manage.py ARGS`` in the repository (``env``: the embedded settings by default)."""
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=REPO_ROOT,
        env=embedded_env() if env is None else env,
        capture_output=True,
        input=stdin,
        text=text,
        timeout=120,
        check=False,
    )
