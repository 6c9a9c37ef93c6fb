"""Redis as companies run it (docs/operations.md, "Redis"): with ``REDIS_URL=sentinel://...`` a
real Celery worker takes a task through kombu's Sentinel transport and returns its result through
Celery's Sentinel result backend, the shared page cache and the cycle lock work, and every key
lands on the master the Sentinel names (tests/support/redis_sentinel.py: a real redis-server
and a real ``redis-server --sentinel``); the same over TLS, ``REDIS_URL=rediss://...``, with a
real redis-server on a TLS port verifying against a CA of the test's own."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import redis

from gpuobs import redis_sentinel
from tests.conftest import REPO_ROOT
from tests.support.celery_worker import celery_worker_process
from tests.support.processes import free_port, start_logged, stop_group, wait_until
from tests.support.recording_prometheus import tls_material
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


def answers(client: redis.Redis) -> bool:
    try:
        return bool(client.ping())
    except redis.ConnectionError:
        return False


def worker_and_client(env: dict[str, str], redis_url: str, tmp_path) -> dict:
    """A real worker and a client process, both with ``env``; what the client printed."""
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
    return json.loads(ran.stdout.strip().splitlines()[-1])


@pytest.mark.celery_worker
@pytest.mark.django_db(transaction=True)
def test_broker_results_cache_and_lock_through_a_real_sentinel(tmp_path, redis_url) -> None:
    with redis_behind_sentinel(tmp_path / "sentinel") as setup:
        env = {"REDIS_URL": setup.url, "GPUOBS_REDIS_SENTINEL_MASTER": MASTER_NAME}
        answer = worker_and_client(env, redis_url, tmp_path)
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


@pytest.mark.celery_worker
@pytest.mark.django_db(transaction=True)
def test_broker_results_cache_and_lock_over_tls(tmp_path, redis_url) -> None:
    tls = tls_material(tmp_path / "tls")
    port = free_port()
    server = start_logged(
        ["redis-server", "--port", "0", "--tls-port", str(port), "--bind", "127.0.0.1",
         "--tls-cert-file", str(tls.path("server.crt")),
         "--tls-key-file", str(tls.path("server.key")),
         "--tls-ca-cert-file", str(tls.path("ca.crt")), "--tls-auth-clients", "no",
         "--save", "", "--appendonly", "no", "--dir", str(tmp_path)],
        tmp_path / "redis-tls.log",
    )  # fmt: skip
    ca = tls.path("ca.crt")
    url = f"rediss://127.0.0.1:{port}/1?ssl_cert_reqs=required&ssl_ca_certs={ca}"
    try:
        direct = redis.Redis.from_url(url)
        wait_until(lambda: answers(direct), "the TLS Redis")
        answer = worker_and_client({"REDIS_URL": url}, redis_url, tmp_path)
        keys = {key.decode() for key in direct.keys("*")}
    finally:
        stop_group(server)

    assert answer == {
        "transport": "gpuobs.broker:RedisTransport",
        "cached": "cached",
        "held": True,
        "second": False,
        "result": "pong",
    }
    assert "gpuobs-pages:1:probe" in keys
    assert any(key.startswith("celery-task-meta-") for key in keys)
