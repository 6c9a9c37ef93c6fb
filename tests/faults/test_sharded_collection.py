"""Sharded collection scales out (issue #17): a Prometheus-backed cluster's per-pool shards
(``diagnosis.tasks.run_collect_shards``) are read by several real workers at once, and the
merged collection is the one a single, unsharded read gives.

How the test knows both workers took a shard: its own Prometheus is paused (SIGSTOP) while the
shards are sent, so each worker (one pool process, prefetch 1) holds one shard in flight; then
Prometheus goes on and both answer, each result naming its worker."""

from __future__ import annotations

import threading
import time

import pytest
import redis

from diagnosis.edge.sources.prometheus import PrometheusConfig, collect_document
from diagnosis.tasks import run_collect_shards
from tests.edge.test_prometheus import scheduler_doc
from tests.faults.conftest import wait_until

pytestmark = [pytest.mark.prometheus, pytest.mark.django_db(transaction=True)]

# a worker's log line "Task diagnosis.tasks.collect_metrics_shard[<id>] received" (its start-up
# banner lists the task's bare name)
SHARD_RECEIVED = "collect_metrics_shard["


def mixed_pools() -> dict:
    """Two pools (``a100`` with profiling metrics, ``old`` without), one node of 2 GPUs each."""
    document = scheduler_doc([("mx-prof", 2), ("mx-dev", 2)])
    document["nodes"][1]["pool"] = "old"
    return document


def test_a_sharded_collection_is_read_by_two_workers_in_parallel(
    fault_stack, make_prometheus, planted_history
) -> None:
    server = make_prometheus()
    workers = fault_stack.start_workers(2)
    settings = {"url": server.url, "matchers": {"cluster": "mixed"}, "timeout_s": 20}
    whole = collect_document(
        PrometheusConfig.parse(settings), mixed_pools(), as_of=planted_history.as_of
    )
    outcomes: list[dict] = []

    def shard_runner(payloads: list[dict]) -> list[dict]:
        outcomes.extend(run_collect_shards(payloads))
        return outcomes

    sharded: dict = {}
    collecting = threading.Thread(
        target=lambda: sharded.update(
            collect_document(
                PrometheusConfig.parse({**settings, "shard_min_gpus": 1}),
                mixed_pools(),
                as_of=planted_history.as_of,
                shard_runner=shard_runner,
            )
        )
    )
    server.pause()
    try:
        started = time.monotonic()
        collecting.start()
        wait_until(
            lambda: all(SHARD_RECEIVED in w.text() for w in workers),
            "each worker to hold a shard while Prometheus is paused",
            30,
        )
    finally:
        server.resume()
    collecting.join(timeout=60)
    print(
        f"fault matrix: sharded collection on 2 workers: {len(outcomes)} shards in "
        f"{time.monotonic() - started:.1f} s, read by {sorted(o['worker'] for o in outcomes)}"
    )

    assert sorted(o["worker"] for o in outcomes) == sorted(w.hostname for w in workers)
    # no shard result outlives its cycle in Redis (issue #29, item 4: they were kept 24 h)
    results = redis.Redis(port=fault_stack.redis.port).keys("celery-task-meta-*")
    assert results == [], results
    assert sharded["collection"]["shards"] == 2
    assert sharded["gpus"] == whole["gpus"]
    assert sharded["collection"]["coverage"] == whole["collection"]["coverage"] == 1.0
