"""A large cluster's cycle on real Celery workers and Redis: its collection's shards go as a
chord (``diagnosis.tasks.run_cycle`` sends them and ends; ``run_cycle_after_shards`` ends the
cycle), so the worker that sent them is free to run them, a failed shard is a failed cycle row,
and shards that never come back do not hold the cluster past GPUOBS_SHARD_DEADLINE_SECONDS."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import redis
from django.conf import settings

from diagnosis.models import Cluster, ClusterCycle
from diagnosis.tasks import cycle_lock_key, pending_shards_key, run_cycle
from tests.support.celery_worker import celery_worker_process
from tests.support.processes import wait_until

pytestmark = [
    pytest.mark.prometheus,
    pytest.mark.celery_worker,
    pytest.mark.django_db(transaction=True),
]

POOLS = 5  # the showcase scenario's node pools: one shard each


@pytest.fixture
def sharded_cluster(make_sim_cluster, prometheus, redis_url: str) -> Cluster:
    """The simulator's five-pool showcase cluster measured by the test Prometheus, every pool a
    shard (``shard_min_gpus`` 1); no lock or kept collection left by an earlier run."""
    cluster = make_sim_cluster(
        prometheus.url, name="sharded", scenario="showcase", shard_min_gpus=1
    )
    forget_cycle_state(cluster)
    yield cluster
    forget_cycle_state(cluster)


def forget_cycle_state(cluster: Cluster) -> None:
    redis.Redis.from_url(settings.REDIS_URL).delete(
        cycle_lock_key(cluster.pk), pending_shards_key(cluster.pk)
    )


def lock_held(cluster: Cluster) -> bool:
    return bool(redis.Redis.from_url(settings.REDIS_URL).exists(cycle_lock_key(cluster.pk)))


def cycles_of(cluster: Cluster, *, ok: bool) -> list[ClusterCycle]:
    return list(ClusterCycle.objects.filter(cluster=cluster, ok=ok))


def test_a_one_process_worker_runs_the_shards_its_own_cycle_sent(
    sharded_cluster, redis_url, tmp_path
):
    with celery_worker_process("collect,diagnose", redis_url, tmp_path) as worker:
        sent = run_cycle.delay(sharded_cluster.pk)
        # the cycle task ended with its shards out: its one process was free to take them
        assert sent.get(timeout=60)["outcome"] == "shards-sent"
        (cycle,) = wait_until(lambda: cycles_of(sharded_cluster, ok=True), "the chord's cycle")
        wait_until(lambda: not lock_held(sharded_cluster), "the callback to release the lock")
        assert worker.poll() is None

    assert cycle.source["shards"] == POOLS
    assert cycle.gpus > 0
    assert cycles_of(sharded_cluster, ok=False) == []


def test_the_shards_results_and_the_kept_collection_leave_redis_with_the_cycle(
    sharded_cluster, redis_url, tmp_path
):
    client = redis.Redis.from_url(redis_url)
    with celery_worker_process("collect,diagnose", redis_url, tmp_path):
        run_cycle.delay(sharded_cluster.pk).get(timeout=60)
        wait_until(lambda: cycles_of(sharded_cluster, ok=True), "the chord's cycle")
        wait_until(lambda: not lock_held(sharded_cluster), "the callback to release the lock")
    shard_ids = re.findall(r"collect_metrics_shard\[(\w+)\] succeeded", worker_log(tmp_path))

    assert len(shard_ids) == POOLS
    # no shard's result (0.8-1.9 MB each at 16k GPUs) outlives its cycle
    assert not client.exists(*(f"celery-task-meta-{shard_id}" for shard_id in shard_ids))
    assert not client.exists(pending_shards_key(sharded_cluster.pk))


def worker_log(tmp_path: Path) -> str:
    return (tmp_path / "worker.log").read_text()


def test_a_failing_shard_is_a_failed_cycle_row_and_releases_the_lock(
    make_sim_cluster, redis_url, tmp_path
):
    cluster = make_sim_cluster(
        "http://127.0.0.1:9", name="sharded-down", scenario="showcase", shard_min_gpus=1
    )
    forget_cycle_state(cluster)
    with celery_worker_process("collect,diagnose", redis_url, tmp_path):
        assert run_cycle.delay(cluster.pk).get(timeout=60)["outcome"] == "shards-sent"
        (failed,) = wait_until(lambda: cycles_of(cluster, ok=False), "the failed cycle row")
        wait_until(lambda: not lock_held(cluster), "the callback to release the lock")
        # the lock went with the failed cycle: the next one runs (and sends its shards)
        assert run_cycle.delay(cluster.pk).get(timeout=60)["outcome"] == "shards-sent"

    cluster.refresh_from_db()
    assert "Prometheus at http://127.0.0.1:9 is unreachable" in failed.error
    assert (
        cluster.status_message
        == "metrics source (prometheus) failed: temporary failure, retried next cycle"
    )


def test_shards_no_worker_takes_do_not_hold_the_cluster_past_the_deadline(
    sharded_cluster, redis_url, tmp_path
):
    deadline = {"GPUOBS_SHARD_DEADLINE_SECONDS": "2"}
    # a worker on the diagnose queue only: nothing ever takes the shards on `collect`
    with celery_worker_process("diagnose", redis_url, tmp_path, env=deadline):
        assert run_cycle.delay(sharded_cluster.pk).get(timeout=60)["outcome"] == "shards-sent"
        assert lock_held(sharded_cluster)
        wait_until(lambda: not lock_held(sharded_cluster), "the deadline to free the lock")
        assert run_cycle.delay(sharded_cluster.pk).get(timeout=60)["outcome"] == "shards-sent"

    (stuck,) = cycles_of(sharded_cluster, ok=False)
    assert "collection shards did not finish in time" in stuck.error
    assert f"0 of {POOLS} shards" in stuck.error
    sharded_cluster.refresh_from_db()
    assert sharded_cluster.status == "error"


def test_the_embedded_mode_runs_a_sharded_cycle_in_process(sharded_cluster, settings):
    settings.REDIS_URL = None  # no broker: one process, shards one after another

    assert run_cycle(sharded_cluster.pk)["outcome"] == "ran"

    (cycle,) = cycles_of(sharded_cluster, ok=True)
    assert cycle.source["shards"] == POOLS
