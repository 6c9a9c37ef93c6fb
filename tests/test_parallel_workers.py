"""The parallel suite's workers each get their own Redis database (tests/support/parallel.py)."""

import os

import pytest
from django.conf import settings

from tests.support import parallel
from tests.support.parallel import redis_url_for_worker


def test_each_worker_lowers_the_redis_database_by_its_number() -> None:
    assert redis_url_for_worker("redis://127.0.0.1:6379/15", "gw0") == "redis://127.0.0.1:6379/15"
    assert redis_url_for_worker("redis://127.0.0.1:6379/15", "gw3") == "redis://127.0.0.1:6379/12"


def test_a_url_without_a_database_number_is_left_alone() -> None:
    assert redis_url_for_worker("redis://127.0.0.1:6379", "gw1") == "redis://127.0.0.1:6379"


def test_more_workers_than_databases_is_an_error() -> None:
    with pytest.raises(RuntimeError, match="too many test workers"):
        redis_url_for_worker("redis://127.0.0.1:6379/1", "gw2")


def test_this_worker_reads_its_own_redis_database() -> None:
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if not worker or not settings.REDIS_URL:
        pytest.skip("not running under make test's parallel workers")
    assert redis_url_for_worker(parallel.BASE_REDIS_URL, worker) == settings.REDIS_URL
    if worker != "gw0":
        assert settings.REDIS_URL != parallel.BASE_REDIS_URL
