"""The stored snapshot's index (diagnosis/core/snapshot_index.py, issue #35): one node or one
job read without the rest of the document."""

from __future__ import annotations

import zlib

import pytest

from diagnosis.core.snapshot_index import (
    JOB_BUCKETS,
    SUMMARY_METRICS,
    SnapshotIndex,
    SnapshotIndexError,
    build_index,
    job_bucket,
)
from tests.support.builders import SnapshotBuilder


def two_node_cluster() -> dict:
    """Two nodes; a job on each, a two-pod gang across both, a pending job on none."""
    return (
        SnapshotBuilder()
        .pool("a100", nodes=2)
        .job("solo", pods=1, gpus_per_pod=2, node="a100-000")
        .job("other", pods=1, gpus_per_pod=2, node="a100-001")
        .job("gang", pods=2, gpus_per_pod=2, nodes=["a100-000", "a100-001"])
        .job("waiting", state="pending", pods=1, gpus_per_pod=8)
        .document()
    )


def read(document: dict) -> SnapshotIndex:
    built = build_index(document)
    return SnapshotIndex.in_memory(built.header, built.body)


def test_a_node_part_holds_its_entry_its_gpus_and_the_jobs_placed_on_it() -> None:
    document = two_node_cluster()

    part = read(document).node("a100-000")

    assert part["node"] == document["nodes"][0]
    assert part["gpus"] == [g for g in document["gpus"] if g["node"] == "a100-000"]
    assert part["jobs"] == ["solo", "gang"]


def test_a_node_the_snapshot_does_not_list_has_no_part() -> None:
    assert read(two_node_cluster()).node("a100-009") is None


def test_job_records_are_read_by_id_pending_ones_too() -> None:
    document = two_node_cluster()
    by_id = {job["id"]: job for job in document["jobs"]}

    found = read(document).jobs(["gang", "waiting", "never-listed"])

    assert found == {"gang": by_id["gang"], "waiting": by_id["waiting"]}


def test_a_part_is_read_alone_from_its_byte_range() -> None:
    """A reader of many snapshots reads only the header and the one part's bytes."""
    built = build_index(two_node_cluster())
    asked: list[tuple[int, int]] = []

    def read_range(offset: int, length: int) -> bytes:
        asked.append((offset, length))
        return built.body[offset : offset + length]

    index = SnapshotIndex(built.header, read_range)
    assert index.node("a100-001")["jobs"] == ["other", "gang"]
    assert asked == [index.where("node:a100-001")]
    assert asked[0][1] < len(built.body)


def test_job_buckets_are_stable_and_in_range() -> None:
    assert job_bucket("train-7") == job_bucket("train-7")
    assert {job_bucket(f"job-{i}") for i in range(5000)} == set(range(JOB_BUCKETS))


def test_bytes_that_are_not_an_index_header_are_refused() -> None:
    with pytest.raises(SnapshotIndexError):
        SnapshotIndex(zlib.compress(b"[1, 2"), lambda offset, length: b"")
    with pytest.raises(SnapshotIndexError):
        SnapshotIndex(b"not zlib", lambda offset, length: b"")


def test_the_gpus_part_keeps_each_gpus_identity_and_the_charted_statistics_only() -> None:
    document = (
        SnapshotBuilder().pool("a100", nodes=1).gpu("a100-000", 0, util=0.25, power_w=300.0)
    ).document()

    part = read(document).part("gpus")

    entry = next(g for g in part["gpus"] if g["index"] == 0)
    assert entry["node"] == "a100-000"
    assert entry["util"] == {"mean": document["gpus"][0]["util"]["mean"]}
    assert set(entry) <= {"node", "index", "uuid", "health", "mig", "xid", "gpu_model"} | set(
        SUMMARY_METRICS
    )
    assert part["nodes"] == document["nodes"]


def test_the_queues_part_lists_every_job_with_what_the_queue_pages_read() -> None:
    document = two_node_cluster()

    part = read(document).part("queues")

    assert [job["id"] for job in part["jobs"]] == [job["id"] for job in document["jobs"]]
    gang = next(job for job in part["jobs"] if job["id"] == "gang")
    assert gang["allocation"] == [
        {"node": pod["node"], "gpus": pod["gpus"]}
        for pod in next(j for j in document["jobs"] if j["id"] == "gang")["allocation"]
    ]
    assert sum(n["gpus"] for n in part["nodes"]) == 16
