"""One Redis database per pytest-xdist worker, chosen before Django reads its settings.

``make test`` runs the suite in parallel (``-n``), a PostgreSQL database per worker
(pytest-django adds the worker's suffix, ``test_<name>_gw0``) and a Redis database per worker:
worker N uses the database of ``REDIS_URL`` minus N (``/15``, ``/14``, …), so one worker's
Celery worker never takes another's tasks and one worker's keys never meet another's. Loaded
with ``-p`` (pyproject.toml) so it runs before pytest-django imports the settings.
"""

from __future__ import annotations

import os
import re

WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")
REDIS_DB = re.compile(r"/(\d+)\Z")


def redis_url_for_worker(url: str, worker: str) -> str:
    """``url`` with its database number lowered by the worker's number (``gw2`` → 2)."""
    number = re.fullmatch(r"gw(\d+)", worker)
    found = REDIS_DB.search(url)
    if not number or not found:
        return url
    database = int(found.group(1)) - int(number.group(1))
    if database < 0:
        raise RuntimeError(f"too many test workers for Redis {url}: worker {worker}")
    return url[: found.start()] + f"/{database}"


BASE_REDIS_URL = os.environ.get("REDIS_URL", "")
if WORKER and BASE_REDIS_URL:
    os.environ["REDIS_URL"] = redis_url_for_worker(BASE_REDIS_URL, WORKER)
