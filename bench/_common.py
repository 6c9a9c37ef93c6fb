"""What the benches that run Django share: setting it up on the project's settings (PostgreSQL at
``DATABASE_URL``, default ``postgres://postgres@127.0.0.1:5432/postgres``), a throwaway test
database made for the run and dropped after it, and the PostgreSQL check. Not a bench.

A bench imports this first (``PYTHONPATH=.``, or the path inserted before the import), calls
:func:`start_django`, and only then imports models and views."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import django
from django.db import connection
from django.test.utils import setup_databases, setup_test_environment, teardown_databases

ROOT = Path(__file__).resolve().parent.parent


def start_django() -> None:
    """The project importable and Django set up on ``gpuobs.settings`` (the settings module and
    the database URL taken from the environment where set)."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gpuobs.settings")
    os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres")
    django.setup()


def on_postgresql(script: str) -> bool:
    """Whether Django's database is PostgreSQL; if not, says so for ``script``
    (``bench/pages.py``) and how to set it."""
    if connection.vendor == "postgresql":
        return True
    print(f"{script} needs PostgreSQL: set DATABASE_URL=postgres://...")
    return False


@contextmanager
def bench_database() -> Iterator[None]:
    """The test environment (the test client's host, locmem mail) and a ``test_<name>``
    database with the migrations applied, dropped on the way out."""
    setup_test_environment()
    config = setup_databases(verbosity=0, interactive=False)
    try:
        yield
    finally:
        teardown_databases(config, verbosity=0)
