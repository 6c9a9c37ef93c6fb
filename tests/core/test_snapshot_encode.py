"""How a snapshot document is encoded for storage (``Snapshot.store``): the fast encoder where it
writes what ``json`` would, ``json`` itself where the two differ."""

from __future__ import annotations

import json
import math

import pytest

from diagnosis.core import snapshot as snapshot_format
from diagnosis.core.snapshot.dump import encode, encode_indexed
from diagnosis.core.snapshot_index import build_index
from tests.support.builders import SnapshotBuilder


def _json(document: dict) -> bytes:
    return json.dumps(document, separators=(",", ":"), ensure_ascii=False).encode()


def _mixed_snapshot() -> snapshot_format.ClusterSnapshot:
    return (
        SnapshotBuilder()
        .node("n1")
        .queue("team-a", weight=2.5)
        .job("j1", node="n1", util=0.25, power_w=312.5)
        .gpu("n1", 7, xid=[(79, "5m")], health="unhealthy")
        .event("preempted", job="j1", reason="Préempté: 中")
        .build()
    )


def test_a_dumped_snapshot_encodes_to_the_bytes_json_writes() -> None:
    document = snapshot_format.dump(_mixed_snapshot())
    assert encode(document) == _json(document)


def test_a_non_finite_number_passed_through_is_written_as_json_writes_it() -> None:
    document = snapshot_format.dump(SnapshotBuilder().node("n1").build())
    document["collection"] = {"coverage": math.nan, "queries": 2**70}
    assert encode(document) == _json(document)  # NaN stays NaN, the integer stays whole


def test_encoded_with_its_index_the_document_and_the_index_are_the_same_bytes() -> None:
    """Each entry encoded once for both (issue #35), the bytes unchanged for their readers."""
    document = snapshot_format.dump(_mixed_snapshot())

    encoded, index = encode_indexed(document)

    assert encoded == _json(document)
    assert index == build_index(document)


@pytest.mark.parametrize(
    "collection",
    [{"coverage": math.nan}, {"queries": 2**70}],
    ids=["non-finite", "beyond-64-bits"],
)
def test_a_document_only_json_encodes_is_indexed_as_before(collection: dict) -> None:
    document = snapshot_format.dump(_mixed_snapshot())
    document["collection"] = collection

    encoded, index = encode_indexed(document)

    assert encoded == _json(document)
    assert index == build_index(document)
