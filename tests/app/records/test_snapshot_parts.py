"""Parts of stored snapshots' indexes read without their rows (diagnosis/models/snapshot_parts.py,
issue #35): by name, from several snapshots at once, in chunks of ranges."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from diagnosis.actions.records.cycles import record_cycle
from diagnosis.core.snapshot_index import node_part
from diagnosis.models import Snapshot, snapshot_parts
from diagnosis.models.snapshot_parts import read_index_parts, read_parts, stored_indexes
from tests.support.builders import AS_OF, SnapshotBuilder

pytestmark = pytest.mark.django_db

NODES = [f"n{n}" for n in range(5)]


def stored(make_cluster, cycles: int = 2) -> list[Snapshot]:
    cluster = make_cluster("parts", metrics_kind="none")
    for minute in range(cycles):
        builder = SnapshotBuilder(as_of=AS_OF + timedelta(minutes=minute), cluster="parts")
        for node in NODES:
            builder.node(node, gpus=8)
        builder.job("train", node="n3", gpus_per_pod=8, ran="1h")
        record_cycle(cluster, builder.build())
    return list(Snapshot.objects.filter(cluster=cluster).order_by("as_of"))


def test_each_snapshots_named_parts_are_read_and_a_missing_name_is_left_out(make_cluster):
    first, second = stored(make_cluster)

    found = read_index_parts([first.pk, second.pk], node_part("n3"), node_part("nowhere"))

    assert set(found) == {first.pk, second.pk}
    for parts in found.values():
        assert list(parts) == [node_part("n3")]
        assert parts[node_part("n3")]["jobs"] == ["train"]


def test_many_parts_are_read_in_chunks_of_ranges_each_one_query(make_cluster, monkeypatch):
    snapshots = stored(make_cluster)
    indexes = stored_indexes(s.pk for s in snapshots)
    wanted = {s.pk: [node_part(node) for node in NODES] for s in snapshots}
    monkeypatch.setattr(snapshot_parts, "RANGES_PER_QUERY", 3)

    with CaptureQueriesContext(connection) as captured:
        found = read_parts(indexes, wanted)

    assert {pk: sorted(parts) for pk, parts in found.items()} == {
        pk: sorted(names) for pk, names in wanted.items()
    }
    assert len(captured.captured_queries) == 4  # 10 ranges, 3 a query


def test_a_snapshot_without_an_index_is_left_out(make_cluster):
    first, second = stored(make_cluster)
    Snapshot.objects.filter(pk=first.pk).update(index_header=None, index_body=None)

    assert set(read_index_parts([first.pk, second.pk], node_part("n3"))) == {second.pk}
