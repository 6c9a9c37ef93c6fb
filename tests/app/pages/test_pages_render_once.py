"""One render per page and cycle across processes (issue #35,
diagnosis/pages/support/page_cache.py ``rendered_once``): what the heatmap and the queue pages
compute from a stored snapshot is kept in the shared cache (the tests' real Redis) under the
snapshot's id, a process with empty caches reads it from there and shows the same page, and two
concurrent first requests compute it once.

The world: the demo's seed scenario on the built-in simulator, a few cycles, committed for the
module (tests/support/browser.py ``module_seed_cluster``); bob is a viewer.
"""

from __future__ import annotations

import re
import threading
import uuid
from collections.abc import Iterator

import pytest
from django.conf import settings
from django.test import Client, override_settings

from diagnosis.models import Cluster, Snapshot
from diagnosis.pages.support import page_cache, snapshots
from tests.support.browser import module_seed_cluster

pytestmark = pytest.mark.django_db

NAME = "render-once"
CYCLES = 3


@pytest.fixture(scope="module")
def seed(django_db_setup, django_db_blocker) -> Iterator[Cluster]:
    with module_seed_cluster(django_db_blocker, NAME, CYCLES) as cluster:
        yield cluster


@pytest.fixture
def shared_cache(redis_url: str) -> Iterator[None]:
    """The page cache on the real Redis, under keys of this test only."""
    in_redis = {
        "BACKEND": "django.core.cache.backends.redis.RedisCache",
        "LOCATION": redis_url,
        "KEY_PREFIX": f"gpuobs-test-once-{uuid.uuid4().hex}",
    }
    snapshots.forget_cached()
    with override_settings(CACHES={**settings.CACHES, page_cache.CACHE: in_redis}):
        yield
    snapshots.forget_cached()


def another_process() -> None:
    """What a second web process has of the snapshots: nothing (its caches are its own)."""
    snapshots.forget_cached()


def heatmap_of(html: str) -> str:
    payload = re.search(r'id="gpu-heatmap-figure"[^>]*>(.*?)</script>', html, re.S)
    assert payload, "no heatmap"
    return payload[1]


def pending_queue(cluster: Cluster) -> str:
    document = Snapshot.objects.filter(cluster=cluster).order_by("-as_of")[0].load_document()
    return next(j["queue"] for j in document["jobs"] if j["state"] == "pending" and j["queue"])


def test_a_second_process_shows_the_heatmap_the_first_computed(
    bob_client: Client, seed, shared_cache
) -> None:
    first = bob_client.get(f"/clusters/{seed.name}/nodes/").content.decode()
    renders = page_cache.renders
    another_process()

    second = bob_client.get(f"/clusters/{seed.name}/nodes/").content.decode()

    assert page_cache.renders == renders
    assert heatmap_of(second) == heatmap_of(first)


def test_a_second_process_shows_the_queue_rows_the_first_computed(
    bob_client: Client, seed, shared_cache
) -> None:
    first = bob_client.get(f"/clusters/{seed.name}/queues/")
    renders = page_cache.renders
    another_process()

    second = bob_client.get(f"/clusters/{seed.name}/queues/")

    assert page_cache.renders == renders
    assert [vars(r) for r in second.context["rows"]] == [vars(r) for r in first.context["rows"]]


def test_a_second_process_shows_the_pending_jobs_the_first_computed(
    bob_client: Client, seed, shared_cache
) -> None:
    path = f"/clusters/{seed.name}/queues/{pending_queue(seed)}/"
    first = bob_client.get(path)
    renders = page_cache.renders
    another_process()

    second = bob_client.get(path)

    assert page_cache.renders == renders
    assert second.context["pending"] == first.context["pending"]
    assert second.context["pending_total"] > 0


def test_a_new_snapshot_is_computed_again(seed, shared_cache) -> None:
    stored = snapshots.latest_snapshot(seed)
    older = Snapshot.objects.filter(cluster=seed).order_by("as_of")[0]
    renders = page_cache.renders

    for snapshot_id in (older.pk, stored.id):
        page_cache.rendered_once(("test", snapshot_id), lambda i=snapshot_id: i)

    assert page_cache.renders == renders + 2


def test_two_concurrent_first_requests_compute_once(shared_cache, monkeypatch) -> None:
    tried = threading.Semaphore(0)
    real_lock = page_cache._lock

    def counted_lock(lock: str) -> bool:
        taken = real_lock(lock)
        tried.release()
        return taken

    monkeypatch.setattr(page_cache, "_lock", counted_lock)
    both_tried = threading.Event()

    def compute() -> str:
        assert both_tried.wait(10), "the second request never tried the lock"
        return "the heatmap"

    results: list[str] = []
    requests = [
        threading.Thread(
            target=lambda: results.append(page_cache.rendered_once(("test", NAME), compute))
        )
        for _ in range(2)
    ]
    renders = page_cache.renders
    for request in requests:
        request.start()
    assert tried.acquire(timeout=10)
    assert tried.acquire(timeout=10)
    both_tried.set()  # the second found the lock taken: it waits for the first's result
    for request in requests:
        request.join(10)

    assert results == ["the heatmap", "the heatmap"]
    assert page_cache.renders == renders + 1


def test_without_a_cache_each_request_computes(settings) -> None:
    settings.GPUOBS_PAGE_CACHE_SECONDS = 0
    renders = page_cache.renders

    for _ in range(2):
        page_cache.rendered_once(("test", "uncached"), lambda: 1)

    assert page_cache.renders == renders + 2
