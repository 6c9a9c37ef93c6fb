"""A stored snapshot's bytes (issue #35: compressed by ISA-L, encoded by orjson) read back as
the reference encoder writes them: ``json.dumps`` of the dump, and each index part as
``index_parts`` gives it from that JSON."""

from __future__ import annotations

import json
import zlib

import pytest

from diagnosis.core import snapshot as snapshot_format
from diagnosis.core.snapshot.dump import dump
from diagnosis.core.snapshot_index import SnapshotIndex, index_parts
from diagnosis.models import Snapshot
from tests.support.builders import SnapshotBuilder

pytestmark = pytest.mark.django_db


def odd_snapshot() -> snapshot_format.ClusterSnapshot:
    """Unicode names, metrics some GPUs lack (NaN in the frame), whole-number metrics, MIG
    instances, fields left out, a time with a fraction of a second."""
    builder = SnapshotBuilder(cluster="grappe-été")
    builder.node("nœud-α", gpus=4, cpu_util=0.5, nvlink_domains=[[0, 1]], numa=[0, 0, 1, None])
    builder.node("n2", gpus=1, gpu_model="H100-SXM5-80GB")
    builder.queue("équipe-中", weight=2.5)
    builder.gpu("nœud-α", 0, util=0.25, power_w=250, temp_c=71.5, uuid="GPU-ü")
    builder.gpu("nœud-α", 1, util=0.75, row_remap={"pending": 1, "failure": 0})
    builder.gpu("nœud-α", 2, health="unhealthy", xid=[(79, "5m")], index_guessed=True)
    builder.mig("n2", 0, 1, compute_fraction=0.25, util=0.5)
    builder.mig("n2", 0, 2, parent_uuid="GPU-parent", profile="2g.20gb")
    builder.job("entraîné", node="nœud-α", gpus_per_pod=2, tp=2, tflops=123.5)
    builder.job("mig", node="n2", gpus_per_pod=1, uuids=[["MIG-n2-0-1"]], share=0.5)
    builder.job("attend", state="pending", pool=None, partial_since="3m")
    builder.event("preempted", job="entraîné", reason="Préempté: 中")
    document = builder.document()
    document["jobs"][0]["submitted"] = "2026-11-29T06:59:59.25Z"
    return snapshot_format.load(document)


def test_a_stored_snapshot_reads_back_as_json_writes_its_dump(make_cluster) -> None:
    document = dump(odd_snapshot(), cluster="grappe-été")

    row = Snapshot.objects.get(pk=Snapshot.store(make_cluster(), document).pk)

    expected = json.dumps(document, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    assert zlib.decompress(bytes(row.document)) == expected.encode()
    assert row.load_document() == json.loads(expected)


def test_a_stored_snapshots_index_parts_read_back_as_they_are_made_from_that_json(
    make_cluster,
) -> None:
    document = dump(odd_snapshot(), cluster="grappe-été")
    expected = index_parts(json.loads(json.dumps(document)))

    row = Snapshot.objects.get(pk=Snapshot.store(make_cluster(), document).pk)
    index = SnapshotIndex.in_memory(bytes(row.index_header), bytes(row.index_body))

    assert list(json.loads(zlib.decompress(bytes(row.index_header)))) == list(expected)
    assert {name: index.part(name) for name in expected} == expected
    assert all(index.has(name) for name in ("node:nœud-α", "node:n2", "gpus", "queues"))
