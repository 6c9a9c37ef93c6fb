"""Issue #35: after a cycle commits, a worker renders the pages' parts of its snapshot
(diagnosis/pages/prerender.py, the task ``prerender_pages``) into the shared page cache (the
tests' real Redis), so the first request of a web process after the cycle renders nothing --
and shows that cycle's data, and a manager still sees only their own tenants'.

The world: cluster ``ahead`` with nodes ``n1``/``n2`` and queues ``team-a`` and ``team-b``
(tenants of the same names), each with a pending job, recorded as real cycles; the second
cycle adds node ``n3`` and queue ``team-c``. bob is a viewer, mallory manages ``team-a``. The
worker's step runs in the test process (as the task would), except in the last test: a real
``celery worker`` takes it from Redis after the cycle commits.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from django.conf import settings
from django.test import Client, override_settings

from diagnosis.actions import enqueue
from diagnosis.actions.records.cycles import record_cycle
from diagnosis.models import Cluster, Tenant
from diagnosis.pages import prerender
from diagnosis.pages.support import page_cache, snapshots
from tests.support.builders import AS_OF, SnapshotBuilder
from tests.support.celery_worker import celery_worker_process
from tests.support.processes import wait_until
from tests.support.world import logged_in_client

pytestmark = pytest.mark.django_db


@pytest.fixture
def shared_cache(redis_url: str) -> Iterator[None]:
    """The page cache on the real Redis, under keys of this test only."""
    in_redis = {
        "BACKEND": "django.core.cache.backends.redis.RedisCache",
        "LOCATION": redis_url,
        "KEY_PREFIX": f"gpuobs-test-ahead-{uuid.uuid4().hex}",
    }
    snapshots.forget_cached()
    with override_settings(CACHES={**settings.CACHES, page_cache.CACHE: in_redis}):
        yield
    snapshots.forget_cached()


def snapshot(minutes_later: int = 0, *, grown: bool = False, org: bool = False):
    """``org``: team-a and team-b are queues under the group ``org``."""
    b = SnapshotBuilder(as_of=AS_OF + timedelta(minutes=minutes_later), cluster="ahead")
    if org:
        b.doc["scheduler"]["queue_parents"] = {"team-a": "org", "team-b": "org"}
    nodes = ["n1", "n2", "n3"] if grown else ["n1", "n2"]
    for node in nodes:
        b.node(node, gpus=4)
    for queue in ["team-a", "team-b", "team-c"] if grown else ["team-a", "team-b"]:
        b.queue(queue)
        b.job(f"{queue}-run", tenant=queue, queue=queue, node="n1", gpus_per_pod=1, util=0.5)
        b.job(f"{queue}-wait", tenant=queue, queue=queue, state="pending", gpus_per_pod=4)
    return b.build()


@pytest.fixture
def cluster(make_cluster, shared_cache) -> Cluster:
    cluster = make_cluster("ahead", metrics_kind="none")
    record_cycle(cluster, snapshot())
    return cluster


def after_a_cycle(cluster: Cluster, **shape) -> dict:
    """A cycle of ``cluster`` recorded and its pages rendered by the worker's step; this web
    process then holds nothing of the new snapshot (as another process would)."""
    if shape:
        record_cycle(cluster, snapshot(10, **shape))
    latest = snapshots.latest_snapshot(cluster)
    done = prerender.prerender_pages(cluster.pk, latest.id)
    snapshots.forget_cached()
    return done


PAGES = ("/nodes/", "/nodes/?color=health", "/queues/", "/queues/team-a/", "/queues/team-b/")


@pytest.mark.parametrize("page", PAGES)
def test_the_first_request_after_the_worker_rendered_renders_nothing(
    bob_client: Client, cluster, page: str
) -> None:
    done = after_a_cycle(cluster)
    renders = page_cache.renders

    response = bob_client.get(f"/clusters/{cluster.name}{page}")

    assert response.status_code == 200
    assert page_cache.renders == renders
    assert done["outcome"] == "rendered"
    assert done["failed"] == {}


def test_a_new_cycles_nodes_and_queues_show_up(bob_client: Client, cluster) -> None:
    after_a_cycle(cluster)
    bob_client.get(f"/clusters/{cluster.name}/queues/")

    after_a_cycle(cluster, grown=True)
    renders = page_cache.renders
    nodes = bob_client.get(f"/clusters/{cluster.name}/nodes/").content.decode()
    queues = bob_client.get(f"/clusters/{cluster.name}/queues/")
    pending = bob_client.get(f"/clusters/{cluster.name}/queues/team-c/")

    assert page_cache.renders == renders
    assert "/nodes/n3/" in nodes
    assert "team-c" in [row.name for row in queues.context["rows"]]
    assert [row.job["id"] for row in pending.context["pending"]] == ["team-c-wait"]


def test_a_manager_sees_no_other_tenants_names_in_what_the_worker_rendered(
    mallory, cluster
) -> None:
    Tenant.objects.get(cluster=cluster, name="team-a").managers.add(mallory)
    client = logged_in_client(mallory)
    after_a_cycle(cluster)
    renders = page_cache.renders

    queues = client.get(f"/clusters/{cluster.name}/queues/")
    mine = client.get(f"/clusters/{cluster.name}/queues/team-a/")
    theirs = client.get(f"/clusters/{cluster.name}/queues/team-b/")

    assert page_cache.renders == renders
    assert [row.name for row in queues.context["rows"]] == ["team-a"]
    assert "team-b" not in queues.content.decode()
    assert [row.job["id"] for row in mine.context["pending"]] == ["team-a-wait"]
    assert theirs.status_code == 404


def test_a_groups_page_is_rendered_by_its_first_request_with_every_job_below_it(
    bob_client: Client, cluster
) -> None:
    after_a_cycle(cluster, org=True)
    renders = page_cache.renders

    leaf = bob_client.get(f"/clusters/{cluster.name}/queues/team-a/")
    assert page_cache.renders == renders
    group = bob_client.get(f"/clusters/{cluster.name}/queues/org/")

    assert [row.job["id"] for row in leaf.context["pending"]] == ["team-a-wait"]
    assert page_cache.renders == renders + 1  # each pending job is pre-rendered once, a leaf's
    assert {row.job["id"] for row in group.context["pending"]} == {"team-a-wait", "team-b-wait"}


def test_a_part_that_fails_is_said_and_its_page_renders_as_before(
    bob_client: Client, cluster, monkeypatch
) -> None:
    def broken(*args) -> None:
        raise RuntimeError("the chart library is gone")

    monkeypatch.setattr(prerender, "heatmap_view", broken)
    done = after_a_cycle(cluster)
    renders = page_cache.renders

    nodes = bob_client.get(f"/clusters/{cluster.name}/nodes/")
    queues = bob_client.get(f"/clusters/{cluster.name}/queues/")

    assert done["outcome"] == "failed"
    assert done["failed"]["heatmap util"] == "RuntimeError: the chart library is gone"
    assert "queue tree" in done["rendered"]
    assert nodes.status_code == 200
    assert "/nodes/n2/" in nodes.content.decode()
    assert queues.status_code == 200
    assert page_cache.renders == renders + 1  # the heatmap, on its first request


def test_an_older_snapshot_is_not_rendered(cluster) -> None:
    older = snapshots.latest_snapshot(cluster)
    record_cycle(cluster, snapshot(10))
    renders = page_cache.renders

    done = prerender.prerender_pages(cluster.pk, older.id)

    assert done == {"outcome": "skipped", "why": "not the cluster's newest snapshot"}
    assert page_cache.renders == renders


def test_the_cycle_sends_the_step_once_it_commits(
    cluster, monkeypatch, django_capture_on_commit_callbacks
) -> None:
    sent: list[tuple[str, tuple]] = []
    monkeypatch.setattr(enqueue, "send_task", lambda name, args, **kw: sent.append((name, args)))

    with django_capture_on_commit_callbacks(execute=True):
        record_cycle(cluster, snapshot(10))

    latest = snapshots.latest_snapshot(cluster)
    assert (enqueue.PRERENDER_PAGES, (cluster.pk, latest.id)) in sent


def test_the_embedded_mode_sends_no_step(
    cluster, monkeypatch, celery_eager, django_capture_on_commit_callbacks
) -> None:
    sent: list[str] = []
    monkeypatch.setattr(enqueue, "send_task", lambda name, args, **kw: sent.append(name))

    with django_capture_on_commit_callbacks(execute=True):
        record_cycle(cluster, snapshot(10))

    assert enqueue.PRERENDER_PAGES not in sent


@pytest.mark.celery_worker
@pytest.mark.django_db(transaction=True)
def test_a_real_worker_renders_a_committed_cycles_pages_for_the_web(
    make_cluster, bob_client: Client, redis_url: str, tmp_path: Path
) -> None:
    # the page cache the worker writes to: the deployment's (Redis, its own key prefix)
    deployed = {**settings.CACHES[page_cache.CACHE], "LOCATION": redis_url}
    deployed["BACKEND"] = "django.core.cache.backends.redis.RedisCache"
    deployed["KEY_PREFIX"] = "gpuobs-pages"
    # a name of its own: the keys in the shared Redis name it, whatever ran there before
    cluster = make_cluster(f"ahead-{uuid.uuid4().hex[:8]}", metrics_kind="none")
    with (
        override_settings(CACHES={**settings.CACHES, page_cache.CACHE: deployed}),
        celery_worker_process("celery", redis_url, tmp_path),
    ):
        record_cycle(cluster, snapshot())  # its commit sends the step
        done = wait_until(
            lambda: re.search(r"prerender_pages\[\S+\] succeeded in .*", worker_log(tmp_path)),
            "the worker's step",
            timeout=60,
        )
        snapshots.forget_cached()  # this process holds nothing of the snapshot
        renders = page_cache.renders

        nodes = bob_client.get(f"/clusters/{cluster.name}/nodes/")

    assert "'outcome': 'rendered'" in done[0]
    assert page_cache.renders == renders
    assert "/nodes/n2/" in nodes.content.decode()


def worker_log(tmp_path: Path) -> str:
    log = tmp_path / "worker.log"
    return log.read_text() if log.exists() else ""
