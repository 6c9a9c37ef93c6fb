"""The stored snapshot's index (diagnosis/core/snapshot_index.py, issue #35): one node or one
job read without the rest of the document."""

from __future__ import annotations

import zlib

import orjson
import pytest

from diagnosis.core.incident_hits import jobs_by_node, on_node
from diagnosis.core.snapshot_index import (
    JOB_BUCKETS,
    SUMMARY_METRICS,
    BuiltIndex,
    SnapshotIndex,
    SnapshotIndexError,
    build_index,
    hit_parts,
    job_bucket,
    job_parts,
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


def counting_reads(built: BuiltIndex) -> tuple[SnapshotIndex, list[tuple[int, int]]]:
    """An index over ``built`` and the list, growing, of the byte ranges it reads."""
    asked: list[tuple[int, int]] = []

    def read_range(offset: int, length: int) -> bytes:
        asked.append((offset, length))
        return built.body[offset : offset + length]

    return SnapshotIndex(built.header, read_range), asked


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
    index, asked = counting_reads(built)
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


def cluster_with_events() -> dict:
    """Two listed nodes, a job placed on a node the snapshot does not list, and events naming
    no node, each node, and that unlisted node, interleaved."""
    document = (
        SnapshotBuilder()
        .pool("a100", nodes=2)
        .job("solo", pods=1, gpus_per_pod=2, node="a100-000")
        .job("gang", pods=2, gpus_per_pod=2, nodes=["a100-000", "a100-001"])
        .job("waiting", state="pending", pods=1, gpus_per_pod=8)
        .event("preempted", ago="9m", job="solo", node="a100-000")
        .event("evicted", ago="8m", job="gang")
        .event("failed", ago="7m", job="gang", node="a100-001")
        .event("xid", ago="6m", job="gang", node="")
        .event("restarted", ago="5m", job="solo", node="a100-000")
        .document()
    )
    document["jobs"].append(
        {**document["jobs"][0], "id": "stray", "allocation": [{"node": "gone-7", "gpus": [0]}]}
    )
    document["events"].append({**document["events"][0], "job": "stray", "node": "gone-7"})
    return document


def hit_read_of_the_document(document: dict, node: str) -> dict:
    """What the incidents' hit window read of a document for a fault on ``node`` before the
    index held it (diagnosis/actions/oncall/windows.py, the document path)."""
    indexed = jobs_by_node(document)
    return {
        **on_node(indexed, node),
        "events": [e for e in indexed["events"] if e.get("node") in (None, "", node)],
    }


@pytest.mark.parametrize("node", ["a100-000", "a100-001", "gone-7", "never-there"])
def test_a_faults_hit_read_from_the_index_is_what_the_document_gives(node: str) -> None:
    document = cluster_with_events()

    read_from_index = read(document).hit_read(node)

    assert read_from_index == hit_read_of_the_document(document, node)
    assert read_from_index["events"], "every node here reads at least the node-less events"


def test_a_hit_read_keeps_the_documents_order_of_events() -> None:
    document = cluster_with_events()

    kinds = [event["kind"] for event in read(document).hit_read("a100-000")["events"]]

    assert kinds == ["preempted", "evicted", "xid", "restarted"]


def test_a_hit_read_takes_the_parts_already_read_and_reads_only_the_rest() -> None:
    built = build_index(cluster_with_events())
    index, asked = counting_reads(built)
    given = {
        name: SnapshotIndex.in_memory(built.header, built.body).part(name)
        for name in hit_parts("a100-001")
    }

    assert index.hit_read("a100-001", given)["jobs"][0]["id"] == "gang"
    assert asked == [index.where(name) for name in job_parts(["gang"])]


def test_an_index_stored_before_the_hit_parts_reads_none() -> None:
    built = build_index(cluster_with_events())
    header = orjson.loads(zlib.decompress(built.header))
    without = {name: where for name, where in header.items() if name != "hits"}
    older = SnapshotIndex.in_memory(zlib.compress(orjson.dumps(without)), built.body)

    assert older.hit_read("a100-000") is None
