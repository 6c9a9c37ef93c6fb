"""A collection stopped where its source fans out (``start_collection``'s ``ShardsDeferred``) and
finished elsewhere with its shards' results (``resume_collection``), as a scheduled cycle's chord
does (diagnosis/tasks.py)."""

from __future__ import annotations

import json

import pytest

from diagnosis.edge.collection import SchedulerReading, measure_reading, resume_collection
from diagnosis.edge.errors import CollectError
from diagnosis.edge.sources import ShardsDeferred
from tests.edge.test_prometheus import scheduler_doc


def two_pool_reading() -> SchedulerReading:
    """A reading of two single-node pools whose Prometheus source shards every pool (no
    Prometheus is asked: the payloads are made from the reading alone)."""
    document = scheduler_doc([("mx-prof", 2), ("mx-dev", 2)])
    document["nodes"][1]["pool"] = "old"
    return SchedulerReading(
        cluster="mixed",
        scheduler_kind="sim",
        metrics_kind="prometheus",
        metrics_config={"url": "http://127.0.0.1:9", "shard_min_gpus": 1},
        as_of=document["as_of"],
        scheduler={"kind": "sim"},
        nodes=document["nodes"],
        gpus=[],
        jobs=[],
        queues=[],
        events=[],
        measured={},
        reads={"scheduler": "sim"},
    )


def deferred_payloads(reading: SchedulerReading) -> list[dict]:
    def defer(payloads: list[dict]) -> list[dict]:
        raise ShardsDeferred(payloads)

    with pytest.raises(ShardsDeferred) as deferred:
        measure_reading(reading, shard_runner=defer)
    return deferred.value.payloads


def test_the_collection_stops_with_one_payload_per_pool_before_any_read():
    payloads = deferred_payloads(two_pool_reading())

    assert [p["hosts"] for p in payloads] == [["mx-prof"], ["mx-dev"]]


def test_the_reading_survives_its_trip_through_json():
    reading = two_pool_reading()

    assert SchedulerReading.from_dict(json.loads(json.dumps(reading.as_dict()))) == reading


def test_results_that_do_not_match_the_shards_fail_the_collection():
    reading = two_pool_reading()

    with pytest.raises(CollectError, match="1 shard results for a collection of 2 shards"):
        resume_collection(reading.as_dict(), [{"error": "never read", "permanent": False}])


def test_a_failed_shards_error_fails_the_resumed_collection():
    reading = two_pool_reading()
    failed = {"error": "Prometheus is unreachable", "permanent": False}

    with pytest.raises(CollectError, match="Prometheus is unreachable"):
        resume_collection(reading.as_dict(), [failed, failed])
