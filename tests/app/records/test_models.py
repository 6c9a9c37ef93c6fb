"""Model invariants: the append-only audit trail, compressed snapshots, finding fingerprints."""

from __future__ import annotations

import threading

import psycopg
import pytest
from django.db import IntegrityError, connection
from django.db.models import ProtectedError
from django.utils import timezone
from isal import isal_zlib

from diagnosis.models import (
    AuditEntry,
    AuditEntryImmutableError,
    Finding,
    Snapshot,
    SnapshotDocumentError,
)

pytestmark = pytest.mark.django_db


def snapshot_document(**fields) -> dict:
    nodes = [
        {"name": f"gpu-{n:03d}", "pool": "a100", "gpu_model": "A100-SXM4-80GB", "gpus": 8}
        for n in range(64)
    ]
    return {
        "format": "gpuobs.snapshot/v1",
        "cluster": "demo",
        "as_of": "2026-11-29T08:00:00Z",
        "window_s": 900,
        "nodes": nodes,
        "jobs": [],
        "events": [{"kind": "xid", "message": "Xid 79 — GPU has fallen off the bus"}],
        **fields,
    }


def test_audit_entry_refuses_to_change(make_cluster) -> None:
    entry = AuditEntry.objects.create(
        actor="alice", action="approve", target="pool:a100", cluster=make_cluster()
    )
    entry.action = "reject"

    with pytest.raises(AuditEntryImmutableError):
        entry.save()
    with pytest.raises(AuditEntryImmutableError):
        AuditEntry.objects.filter(pk=entry.pk).update(action="reject")
    assert AuditEntry.objects.get(pk=entry.pk).action == "approve"


def test_audit_entry_refuses_an_upsert_over_a_row(make_cluster) -> None:
    entry = AuditEntry.objects.create(actor="alice", action="approve", cluster=make_cluster())
    forged = AuditEntry(pk=entry.pk, actor="mallory", action="approve", time=entry.time)

    with pytest.raises(AuditEntryImmutableError):
        AuditEntry.objects.bulk_create(
            [forged], update_conflicts=True, unique_fields=["id"], update_fields=["actor"]
        )
    with pytest.raises(AuditEntryImmutableError):
        AuditEntry.objects.bulk_update([forged], ["actor"])
    assert AuditEntry.objects.get(pk=entry.pk).actor == "alice"


def test_audit_entry_refuses_to_be_deleted() -> None:
    entry = AuditEntry.objects.create(actor="system:cycle", action="apply")

    with pytest.raises(AuditEntryImmutableError):
        entry.delete()
    with pytest.raises(AuditEntryImmutableError):
        AuditEntry.objects.all().delete()
    assert AuditEntry.objects.filter(pk=entry.pk).exists()


def test_a_cluster_with_an_audit_trail_cannot_be_deleted(make_cluster) -> None:
    cluster = make_cluster()
    AuditEntry.objects.create(actor="alice", action="enable-writes", cluster=cluster)

    with pytest.raises(ProtectedError):
        cluster.delete()


def test_a_snapshot_is_compressed_off_the_callers_thread(make_cluster, monkeypatch) -> None:
    compressed_in: list[str] = []
    compress = isal_zlib.compress

    def noting_the_thread(data: bytes, level: int) -> bytes:
        compressed_in.append(threading.current_thread().name)
        return compress(data, level)

    monkeypatch.setattr(isal_zlib, "compress", noting_the_thread)
    document = snapshot_document()

    stored = Snapshot.compressing(make_cluster(), document).save()

    assert Snapshot.objects.get(pk=stored.pk).load_document() == document
    assert compressed_in
    assert compressed_in[0] != threading.current_thread().name


def test_snapshot_round_trip_is_exact_and_compressed(make_cluster) -> None:
    document = snapshot_document()

    stored = Snapshot.store(make_cluster(), document)
    loaded = Snapshot.objects.get(pk=stored.pk)

    assert loaded.load_document() == document
    assert loaded.as_of.isoformat() == "2026-11-29T08:00:00+00:00"
    assert loaded.format == "gpuobs.snapshot/v1"
    assert loaded.stored_bytes == len(bytes(loaded.document))
    assert loaded.stored_bytes < loaded.json_bytes / 5


def test_a_snapshots_bytes_go_to_postgresql_as_binary_parameters(make_cluster) -> None:
    """Not quoted as hex into the SQL text (twice their size, ~1 s of CPU at 131,072 GPUs:
    issue #35), and read back as stored, the index with them."""
    if connection.vendor != "postgresql":
        pytest.skip("client-side quoting is PostgreSQL's")
    bound_in: list[tuple[str, bool]] = []

    def noting_the_binding(execute, sql, params, many, context):
        client_side = isinstance(context["cursor"].cursor, psycopg.ClientCursor)
        bound_in.append((sql, client_side))
        return execute(sql, params, many, context)

    document = snapshot_document()
    with connection.execute_wrapper(noting_the_binding):
        stored = Snapshot.store(make_cluster(), document)

    writes = [client_side for sql, client_side in bound_in if '"index_body"' in sql]
    assert writes[-1] is False
    loaded = Snapshot.objects.get(pk=stored.pk)
    assert loaded.load_document() == document
    assert bytes(loaded.document) == stored.document
    assert bytes(loaded.index_header) == stored.index_header
    assert bytes(loaded.index_body) == stored.index_body
    assert loaded.stored_bytes == len(stored.document)


@pytest.mark.parametrize(
    ("as_of", "message"),
    [
        (None, "no 'as_of'"),
        ("yesterday", "not an RFC 3339 time"),
        ("2026-11-29T08:00:00", "no time zone"),
    ],
)
def test_snapshot_without_a_usable_as_of_is_refused(make_cluster, as_of, message) -> None:
    document = snapshot_document(as_of=as_of)
    if as_of is None:
        del document["as_of"]

    with pytest.raises(SnapshotDocumentError, match=message):
        Snapshot.store(make_cluster(), document)
    assert not Snapshot.objects.exists()


def test_finding_fingerprint_is_unique_per_cluster_rule_and_subject(make_cluster) -> None:
    east, west = make_cluster("east"), make_cluster("west")
    now = timezone.now()

    def finding(cluster, subject="pool:a100"):
        return Finding.objects.create(
            cluster=cluster, rule_id="fragmentation", subject=subject, first_seen=now, last_seen=now
        )

    first = finding(east)
    finding(west)
    finding(east, subject="pool:h100")

    assert first.fingerprint == Finding.fingerprint_of(east.pk, "fragmentation", "pool:a100")
    with pytest.raises(IntegrityError):
        finding(east)


def test_str_names_the_object(make_cluster) -> None:
    cluster = make_cluster("east")
    entry = AuditEntry.objects.create(actor="alice", action="drain", target="node:gpu-117")

    assert str(cluster) == "east"
    assert "alice drain node:gpu-117" in str(entry)
