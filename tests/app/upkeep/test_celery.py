"""Celery wiring: routes, the beat schedule, the per-cluster cycle lock, and a real worker."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
import redis
from django.conf import settings
from django.db import connections
from django.utils import timezone

from diagnosis import tasks
from diagnosis.actions import enqueue
from diagnosis.edge.schedulers.registry import is_mirrored
from diagnosis.models import Cluster
from diagnosis.tasks import cycle_lock_key, ping, run_cycle, run_cycles
from gpuobs import celery_app
from gpuobs.celery import cycle_queue, queue_for_task
from tests.support.celery_worker import celery_worker_process


@pytest.mark.parametrize(
    ("task_name", "queue"),
    [
        ("diagnosis.tasks.collect_pool", "collect"),
        ("diagnosis.tasks.run_cycles", "diagnose"),
        ("diagnosis.tasks.run_cycle", "diagnose"),
        ("diagnosis.tasks.diagnose_snapshot", "diagnose"),
        ("diagnosis.tasks.actuate_recommendation", "actuate"),
        ("diagnosis.tasks.ping", "celery"),
        ("diagnosis.tasks.notify_channels", "celery"),
    ],
)
def test_tasks_are_routed_by_the_start_of_their_name(task_name: str, queue: str) -> None:
    assert queue_for_task(task_name) == queue
    assert celery_app.amqp.router.route({}, task_name)["queue"].name == queue


@pytest.mark.parametrize(
    ("cluster_id", "mirrored", "queue_count", "queue"),
    [
        (7, True, 1, "mirror-0"),
        (7, True, 3, "mirror-1"),
        (9, True, 3, "mirror-0"),
        (7, False, 3, "diagnose"),  # no mirror: any diagnose process
        (7, True, 0, "diagnose"),  # mirror queues off: a mirror per process
    ],
)
def test_a_cycle_goes_to_its_clusters_mirror_queue_when_its_adapter_keeps_a_mirror(
    cluster_id: int, mirrored: bool, queue_count: int, queue: str
) -> None:
    assert cycle_queue(cluster_id, mirrored=mirrored, mirror_queue_count=queue_count) == queue


def test_the_kubernetes_adapters_keep_a_mirror_and_the_others_do_not() -> None:
    assert [is_mirrored(k) for k in ("volcano", "kueue", "kai")] == [True, True, True]
    assert [is_mirrored(k) for k in ("sim", "slurm", "yarn", "unknown")] == [False] * 4


@pytest.mark.parametrize(
    "task_name",
    [
        enqueue.DRY_RUN,
        enqueue.APPLY,
        enqueue.NOTIFY,
        enqueue.ESTIMATE_IMPACT,
        enqueue.PRERENDER_PAGES,
    ],
)
def test_every_task_the_actions_send_by_name_is_a_registered_task(task_name: str) -> None:
    assert task_name in celery_app.tasks
    assert celery_app.tasks[task_name].__module__ == "diagnosis.tasks"


def test_beat_runs_the_cycle_fan_out_every_cycle_period(settings) -> None:
    entry = celery_app.conf.beat_schedule["diagnosis cycles"]

    assert entry["task"] == "diagnosis.tasks.run_cycles"
    assert entry["schedule"] == settings.GPUOBS_CYCLE_SECONDS


def test_messages_are_json_only() -> None:
    assert celery_app.conf.accept_content == ["json"]
    assert celery_app.conf.task_serializer == "json"
    assert celery_app.conf.result_serializer == "json"


@pytest.fixture(params=["redis", "database"])
def lock_backend(request, settings) -> str:
    """Runs a test once with the Redis lock and once with the embedded mode's row lease."""
    if request.param == "redis":
        request.getfixturevalue("redis_url")
    else:
        settings.REDIS_URL = None
    return request.param


def forget_cycle_lock(cluster: Cluster) -> None:
    """Drop a Redis lock that an interrupted earlier run may have left for a reused cluster id."""
    if settings.REDIS_URL:
        redis.Redis.from_url(settings.REDIS_URL).delete(cycle_lock_key(cluster.pk))


@pytest.fixture
def cluster(lock_backend: str, make_cluster) -> Cluster:
    """Cluster ``east``, no cycle lock left for it, under each lock backend."""
    cluster = make_cluster("east")
    forget_cycle_lock(cluster)
    return cluster


@pytest.mark.django_db(transaction=True)
def test_two_concurrent_cycles_of_one_cluster_run_once(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    first_cycle_started, finish_first_cycle = threading.Event(), threading.Event()
    cycles_run: list[str] = []

    def slow_cycle(cluster: Cluster, **options) -> None:
        cycles_run.append(cluster.name)
        first_cycle_started.set()
        assert finish_first_cycle.wait(timeout=30)

    monkeypatch.setattr(tasks, "start_cluster_cycle", slow_cycle)
    outcomes: dict[str, dict] = {}

    def first() -> None:
        try:
            outcomes["first"] = run_cycle(cluster.pk)
        finally:
            connections.close_all()

    worker = threading.Thread(target=first)
    worker.start()
    try:
        assert first_cycle_started.wait(timeout=30)
        outcomes["second"] = run_cycle(cluster.pk)
    finally:
        finish_first_cycle.set()
        worker.join(timeout=30)

    assert outcomes["first"] == {"cluster_id": cluster.pk, "outcome": "ran"}
    assert outcomes["second"] == {"cluster_id": cluster.pk, "outcome": "locked"}
    assert cycles_run == ["east"]
    # The lock went with the first cycle: the next one runs.
    assert run_cycle(cluster.pk)["outcome"] == "ran"


@pytest.mark.django_db(transaction=True)
def test_a_failing_cycle_releases_its_lock(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:

    def broken_cycle(cluster: Cluster, **options) -> None:
        raise RuntimeError("scheduler unreachable")

    monkeypatch.setattr(tasks, "start_cluster_cycle", broken_cycle)
    with pytest.raises(RuntimeError):
        run_cycle(cluster.pk)
    monkeypatch.undo()

    assert run_cycle(cluster.pk)["outcome"] == "ran"


@pytest.mark.django_db
def test_an_expired_lease_of_a_dead_worker_is_taken_over(settings, make_cluster) -> None:
    settings.REDIS_URL = None
    cluster = make_cluster(
        "east",
        cycle_lease_until=timezone.now() - timedelta(seconds=1),
        cycle_lease_holder="dead-worker",
    )

    assert run_cycle(cluster.pk)["outcome"] == "ran"
    cluster.refresh_from_db()
    assert cluster.cycle_lease_until is None


@pytest.mark.django_db
def test_fan_out_runs_a_cycle_for_each_enabled_cluster(
    redis_url: str, celery_eager: None, make_cluster
) -> None:
    east = make_cluster("east")
    west = make_cluster("west", enabled=False)

    assert run_cycles.delay().get() == [east.pk]

    east.refresh_from_db()
    west.refresh_from_db()
    assert east.last_cycle_at is not None
    assert west.last_cycle_at is None


@pytest.mark.django_db
def test_a_disabled_or_missing_cluster_is_skipped(redis_url: str, make_cluster) -> None:
    west = make_cluster("west", enabled=False)

    assert run_cycle(west.pk) == {"cluster_id": west.pk, "outcome": "no-cluster"}
    assert run_cycle(west.pk + 1000)["outcome"] == "no-cluster"


@pytest.mark.django_db
def test_a_task_sent_on_commit_waits_for_the_commit(
    redis_url: str, celery_eager: None, make_cluster, django_capture_on_commit_callbacks
) -> None:
    cluster = make_cluster("east")

    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        run_cycle.delay_on_commit(cluster.pk)
        cluster.refresh_from_db()
        assert cluster.last_cycle_at is None

    assert len(callbacks) == 1
    cluster.refresh_from_db()
    assert cluster.last_cycle_at is not None


@pytest.mark.celery_worker
@pytest.mark.django_db(transaction=True)
def test_a_real_worker_takes_tasks_from_redis(redis_url: str, make_cluster, tmp_path) -> None:
    cluster = make_cluster("east")
    forget_cycle_lock(cluster)
    with celery_worker_process("collect,diagnose,actuate,celery", redis_url, tmp_path):
        assert ping.delay().get(timeout=60) == "pong"
        # run_cycle goes through the `diagnose` queue and writes the test database.
        assert run_cycle.delay(cluster.pk).get(timeout=60) == {
            "cluster_id": cluster.pk,
            "outcome": "ran",
        }
        cluster.refresh_from_db()
        assert cluster.last_cycle_at is not None
