"""A cycle's snapshot dumped, encoded, indexed and compressed in a forked child process (issue
#35: ~10 s of CPU at 131,072 GPUs off the cycle's thread and GIL), and stored in-process when
the child fails or hangs."""

from __future__ import annotations

import logging
import os
import signal
from datetime import timedelta

import pytest

from diagnosis.actions.records.cycles import record_cycle
from diagnosis.core.snapshot.dump import dump
from diagnosis.models import Incident, Snapshot
from diagnosis.models import cycles as stored_cycles
from tests.support.builders import AS_OF, SnapshotBuilder
from tests.support.records import counting_decodes

pytestmark = pytest.mark.django_db


def snapshot(minutes: int = 0, *, xid: bool = True):
    builder = SnapshotBuilder(as_of=AS_OF + timedelta(minutes=minutes), cluster="elsewhere")
    builder.node("n1", gpus=8).node("n2", gpus=8).queue("hpo")
    for index in range(8):
        builder.gpu("n1", index, util=0.5, power_w=210.0)
        builder.gpu("n2", index, util=0.0)
    builder.gpu("n2", 3, health="unhealthy", **({"xid": [(79, "1m")]} if xid else {}))
    builder.job("train", node="n2", ran="2h").job("wait", state="pending")
    builder.event("preempted", job="train", node="n2")
    return builder.build()


@pytest.fixture
def forking(monkeypatch) -> list[int]:
    """Every snapshot dumped in a child (whatever its size); the children's pids, growing."""
    monkeypatch.setattr(stored_cycles, "FORKED_GPUS", 0)
    children: list[int] = []
    fork = os.fork

    def noting_the_child() -> int:
        pid = fork()
        if pid:
            children.append(pid)
        return pid

    monkeypatch.setattr(os, "fork", noting_the_child)
    return children


@pytest.fixture
def made_here(monkeypatch) -> list[int]:
    """The pids of the processes that compress a document (this one's, or a child's that
    failed over to it), as this process sees them."""
    made: list[int] = []
    compress = stored_cycles._compress_and_index

    def noting(document):
        made.append(os.getpid())
        return compress(document)

    monkeypatch.setattr(stored_cycles, "_compress_and_index", noting)
    return made


def stored_as_of_old(cluster, snap) -> tuple[bytes, bytes, bytes, int]:
    parts = stored_cycles._compress_and_index(dump(snap, cluster=cluster.name))
    return parts[1], parts[2].header, parts[2].body, parts[0]


def stored_bytes(row: Snapshot) -> tuple[bytes, bytes, bytes, int]:
    row = Snapshot.objects.get(pk=row.pk)
    return bytes(row.document), bytes(row.index_header), bytes(row.index_body), row.json_bytes


def test_a_big_snapshot_is_stored_from_a_child_as_it_would_be_here(
    make_cluster, forking, made_here
) -> None:
    cluster, snap = make_cluster("forked"), snapshot()

    storing = Snapshot.dumping(cluster, snap)
    row = storing.save()

    assert len(forking) == 1
    assert made_here == []  # the child compressed it; this process only read the bytes
    assert stored_bytes(row) == stored_as_of_old(cluster, snap)
    assert row.load_document()["cluster"] == "forked"
    with pytest.raises(ChildProcessError):  # reaped
        os.waitpid(forking[0], os.WNOHANG)


def test_what_the_cycle_reads_meanwhile_is_built_here_without_the_gpu_metrics(
    make_cluster, forking
) -> None:
    cluster, snap = make_cluster("forked"), snapshot()
    whole = dump(snap, cluster=cluster.name)

    storing = Snapshot.dumping(cluster, snap)
    view = storing.document
    storing.save()

    assert list(view) == list(whole)
    for part in ("as_of", "nodes", "events", "jobs"):
        assert view[part] == whole[part]
    without_metrics = [
        {k: v for k, v in g.items() if k not in ("util", "power_w")} for g in whole["gpus"]
    ]
    assert view["gpus"] == without_metrics != whole["gpus"]


def test_a_child_that_fails_leaves_the_snapshot_stored_here_and_logged(
    make_cluster, forking, made_here, monkeypatch, caplog
) -> None:
    parent = os.getpid()
    compress = stored_cycles._compress_and_index

    def failing_in_the_child(document):
        if os.getpid() != parent:
            raise MemoryError
        return compress(document)

    monkeypatch.setattr(stored_cycles, "_compress_and_index", failing_in_the_child)
    cluster, snap = make_cluster("forked"), snapshot()

    with caplog.at_level(logging.WARNING, logger="diagnosis.models.cycles"):
        row = Snapshot.dumping(cluster, snap).save()

    assert stored_bytes(row) == stored_as_of_old(cluster, snap)
    assert "dumped in-process: its child process failed (exit status 1)" in caplog.text


def test_a_child_past_its_time_is_killed_and_the_snapshot_stored_here(
    make_cluster, forking, monkeypatch, caplog
) -> None:
    parent = os.getpid()
    compress = stored_cycles._compress_and_index

    def hanging_in_the_child(document):
        if os.getpid() != parent:
            signal.pause()
        return compress(document)

    monkeypatch.setattr(stored_cycles, "_compress_and_index", hanging_in_the_child)
    monkeypatch.setattr(stored_cycles, "FORKED_DUMP_TIMEOUT_S", 0.2)
    cluster, snap = make_cluster("forked"), snapshot()

    with caplog.at_level(logging.WARNING, logger="diagnosis.models.cycles"):
        row = Snapshot.dumping(cluster, snap).save()

    assert stored_bytes(row) == stored_as_of_old(cluster, snap)
    assert "its child process ran past 0.2 s" in caplog.text
    with pytest.raises(ChildProcessError):
        os.waitpid(forking[0], os.WNOHANG)


def test_a_cycle_that_never_saves_leaves_no_child_behind(make_cluster, forking) -> None:
    storing = Snapshot.dumping(make_cluster("forked"), snapshot())

    del storing  # a cycle that failed between its start and its save

    with pytest.raises(ChildProcessError):
        os.waitpid(forking[0], os.WNOHANG)


def test_a_small_snapshot_is_dumped_here(make_cluster, made_here, monkeypatch) -> None:
    monkeypatch.setattr(stored_cycles, "FORKED_GPUS", 17)
    cluster, snap = make_cluster("small"), snapshot()

    row = Snapshot.dumping(cluster, snap).save()

    assert made_here == [os.getpid()]
    assert stored_bytes(row) == stored_as_of_old(cluster, snap)


def incidents_after_three_cycles(cluster) -> list[dict]:
    for minutes, xid in ((0, True), (2, False), (4, False)):
        record_cycle(cluster, snapshot(minutes, xid=xid))
    return [i.details for i in Incident.objects.filter(cluster=cluster).order_by("gpu_index")]


def test_a_forked_cycles_incidents_read_its_snapshot_from_the_frames(
    make_cluster, monkeypatch
) -> None:
    here = incidents_after_three_cycles(make_cluster("here", metrics_kind="none"))
    monkeypatch.setattr(stored_cycles, "FORKED_GPUS", 0)
    cluster = make_cluster("forked", metrics_kind="none")
    decoded = counting_decodes(monkeypatch)

    forked = incidents_after_three_cycles(cluster)

    assert here
    assert forked == here
    assert forked[0]["jobs"]  # the hit job, read from the cycles' own snapshots
    newest = Snapshot.objects.filter(cluster=cluster).latest()
    assert newest.pk not in decoded
