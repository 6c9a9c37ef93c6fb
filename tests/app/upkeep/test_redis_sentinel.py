"""Redis behind Sentinel (docs/operations.md, "Redis"): with ``REDIS_URL=sentinel://...`` a real
Celery worker takes a task through kombu's Sentinel transport and returns its result through
Celery's Sentinel result backend, the shared page cache and the cycle lock work, and every key
lands on the master the Sentinel names (tests/support/redis_sentinel.py: a real redis-server
and a real ``redis-server --sentinel``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from gpuobs import redis_sentinel
from tests.conftest import REPO_ROOT
from tests.support.celery_worker import celery_worker_process
from tests.support.redis_sentinel import MASTER_NAME, redis_behind_sentinel

AS_ROOT = "ignore:You're running the worker with superuser privileges"

CLIENT = """
import json, os
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gpuobs.settings")
import django
django.setup()
from django.conf import settings
from django.core.cache import caches
from diagnosis.tasks import cluster_cycle_lock
from gpuobs.celery import app

caches["pages"].set("probe", "cached", 60)
with cluster_cycle_lock(4242) as held:
    with cluster_cycle_lock(4242) as second:
        pass
print(json.dumps({
    "transport": settings.CELERY_BROKER_TRANSPORT,
    "cached": caches["pages"].get("probe"),
    "held": held, "second": second,
    "result": app.send_task("diagnosis.tasks.ping").get(timeout=60),
}))
"""


def test_the_url_names_every_sentinel_the_database_and_the_password() -> None:
    address = redis_sentinel.parse("sentinel://:s%40cret@s1:26380;sentinel://s2;sentinel://s3/2")

    assert address.sentinels == (("s1", 26380), ("s2", 26379), ("s3", 26379))
    assert (address.db, address.password) == (2, "s@cret")


@pytest.mark.parametrize("url", ["sentinel://s1;redis://s2", "sentinel://s1/zero", "sentinel://"])
def test_a_bad_sentinel_url_is_refused(url) -> None:
    with pytest.raises(ValueError, match="REDIS_URL"):
        redis_sentinel.parse(url)


@pytest.mark.celery_worker
@pytest.mark.django_db(transaction=True)
def test_broker_results_cache_and_lock_through_a_real_sentinel(tmp_path, redis_url) -> None:
    with redis_behind_sentinel(tmp_path / "sentinel") as setup:
        env = {"REDIS_URL": setup.url, "GPUOBS_REDIS_SENTINEL_MASTER": MASTER_NAME}
        worker_env = {**env, "PYTHONWARNINGS": AS_ROOT}
        with celery_worker_process("celery", redis_url, tmp_path, env=worker_env, quiet=True):
            ran = subprocess.run(
                [sys.executable, "-c", CLIENT],
                cwd=REPO_ROOT,
                env={**os.environ, **env},
                capture_output=True,
                text=True,
                timeout=120,
                check=False,
            )
        assert ran.returncode == 0, ran.stderr
        answer = json.loads(ran.stdout.strip().splitlines()[-1])
        master = setup.master()
        keys = {key.decode() for key in master.keys("*")}

    assert answer == {
        "transport": "gpuobs.broker:SentinelTransport",
        "cached": "cached",
        "held": True,
        "second": False,
        "result": "pong",
    }
    assert "gpuobs-pages:1:probe" in keys  # the cache wrote to the master
    assert any(key.startswith("celery-task-meta-") for key in keys)  # the result too
    assert "gpuobs:cycle:4242" not in keys  # the lock was taken there, and released
