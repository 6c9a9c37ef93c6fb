"""What each cycle stored: the snapshot document (compressed) and the cycle's row with its
accounting and coverage.
"""

from __future__ import annotations

import json
import zlib
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from typing import Any

from django.db import connections, models, router, transaction
from django.utils import timezone

from diagnosis.core.snapshot_index import BuiltIndex
from diagnosis.core.vocabulary import SNAPSHOT_FORMAT, parse_time, time_problem
from diagnosis.models.inventory import Cluster


class SnapshotDocumentError(ValueError):
    """A snapshot document lacks a field that storing it needs, or has it in the wrong form."""


def _document_as_of(document: dict[str, Any]) -> datetime:
    raw = document.get("as_of")
    if raw is None:
        raise SnapshotDocumentError("snapshot document has no 'as_of'")
    as_of = parse_time(raw)
    if as_of is None:
        raise SnapshotDocumentError(f"snapshot 'as_of' {time_problem(raw)}: {raw!r}")
    return as_of


class ClusterTimeline(models.Model):
    """Rows of a cluster by snapshot time (``as_of``): listed cluster by cluster, newest first;
    ``latest()`` is the newest."""

    class Meta:
        abstract = True
        ordering = ["cluster", "-as_of"]
        get_latest_by = "as_of"


class Snapshot(ClusterTimeline):
    """One ``gpuobs.snapshot/v1`` document of a cluster, stored as zlib-compressed JSON, with
    its :mod:`index <diagnosis.core.snapshot_index>` (the parts the node, GPU and job pages
    read)."""

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="snapshots")
    as_of = models.DateTimeField()
    format = models.CharField(max_length=64, default=SNAPSHOT_FORMAT)
    document = models.BinaryField(help_text="zlib-compressed UTF-8 JSON")
    json_bytes = models.PositiveBigIntegerField(help_text="Size of the JSON before compression.")
    stored_bytes = models.PositiveBigIntegerField(help_text="Size of the compressed document.")
    # the document cut into parts a page reads alone (diagnosis.core.snapshot_index); null for
    # a snapshot stored before there was an index
    index_header = models.BinaryField(null=True, blank=True, help_text="Where each part lies.")
    index_body = models.BinaryField(null=True, blank=True, help_text="The parts.")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta(ClusterTimeline.Meta):
        indexes = [models.Index(fields=["cluster", "-as_of"], name="snapshot_cluster_as_of")]

    def __str__(self) -> str:
        return f"{self.cluster} as of {self.as_of:%Y-%m-%dT%H:%M:%SZ}"

    @classmethod
    def store(cls, cluster: Cluster, document: dict[str, Any]) -> Snapshot:
        """Compress and save a snapshot document; its ``as_of`` and ``format`` become columns."""
        return cls.compressing(cluster, document).save()

    @classmethod
    def compressing(cls, cluster: Cluster, document: dict[str, Any]) -> CompressingSnapshot:
        """Start storing a document: encoded now, compressed in a thread (zlib lets go of the
        GIL) while the caller goes on; :meth:`CompressingSnapshot.save` stores the row."""
        return CompressingSnapshot(cluster, document)

    def load_document(self) -> dict[str, Any]:
        """The document as it was stored."""
        return json.loads(zlib.decompress(bytes(self.document)))


_COMPRESSOR = ThreadPoolExecutor(max_workers=1, thread_name_prefix="gpuobs-snapshot-zlib")


class CompressingSnapshot:
    """A snapshot document on its way to a :class:`Snapshot` row: its JSON compressed in a
    background thread -- ~0.13 s at 16,384 GPUs, ~1.1 s at 131,072, time a cycle spends
    recording its findings meanwhile (issue #17) -- and its index built there too (~0.25 s of
    CPU at 16,384 GPUs, mostly while the cycle waits on the database: issue #35)."""

    def __init__(self, cluster: Cluster, document: dict[str, Any]) -> None:
        self.cluster = cluster
        self.as_of = _document_as_of(document)
        self.format = document.get("format", SNAPSHOT_FORMAT)
        self._compressed = _COMPRESSOR.submit(_compress_and_index, document)

    def save(self) -> Snapshot:
        """Wait for the compression and store the row."""
        json_bytes, compressed, index = self._compressed.result()
        stored = {"document": compressed, "index_header": index.header, "index_body": index.body}
        binary = connections[router.db_for_write(Snapshot)].vendor == "postgresql"
        with transaction.atomic(savepoint=False):  # the row and its bytes, or neither
            snapshot = Snapshot.objects.create(
                cluster=self.cluster,
                as_of=self.as_of,
                format=self.format,
                json_bytes=json_bytes,
                stored_bytes=len(compressed),
                **(dict.fromkeys(stored, b"") if binary else stored),
            )
            if binary:
                _write_bytes(snapshot, stored)
        return snapshot


def _write_bytes(snapshot: Snapshot, values: dict[str, bytes]) -> None:
    """Write a stored snapshot's binary columns as binary parameters: Django binds parameters
    in the client, each byte sent as two hex digits (36 MB of bytes at 131,072 GPUs: ~1 s of
    the cycle's CPU quoting them, 72 MB of SQL; issue #35)."""
    from django.db.backends.postgresql.base import ServerBindingCursor  # noqa: PLC0415

    connection = connections[snapshot._state.db]
    quote = connection.ops.quote_name
    fields = [Snapshot._meta.get_field(name) for name in values]
    columns = ", ".join(f"{quote(field.column)} = %s" for field in fields)
    params = [
        f.get_db_prep_value(v, connection) for f, v in zip(fields, values.values(), strict=True)
    ]
    connection.ensure_connection()
    with connection.make_cursor(ServerBindingCursor(connection.connection)) as cursor:
        cursor.execute(
            f"UPDATE {quote(Snapshot._meta.db_table)} SET {columns} WHERE id = %s",  # noqa: S608
            [*params, snapshot.pk],
        )
    for name, value in values.items():
        setattr(snapshot, name, value)


def _compress_and_index(document: dict[str, Any]) -> tuple[int, bytes, BuiltIndex]:
    """The size of the document's JSON, the stored document and its index. ``document`` is
    read here while the caller records the findings (encoded here too: its Python runs while
    the caller waits on the database, ~0.6 s at 131,072 GPUs), and changes only after
    :meth:`CompressingSnapshot.save` has waited for this."""
    # the snapshot package (pandas) when a snapshot is stored, not at every start-up (#35)
    from diagnosis.core.snapshot.dump import encode_indexed  # noqa: PLC0415 -- start-up, #35

    encoded, index = encode_indexed(document)
    return len(encoded), zlib.compress(encoded, 6), index


class ClusterCycle(ClusterTimeline):
    """One diagnosis cycle of a cluster: the pre-computed rollup that pages and reports read.

    ``accounting`` is the GPU-hour breakdown (``diagnosis.core.accounting.Accounting.as_dict()``) of
    the cycle's snapshot; the utilization columns repeat its cluster figures for cheap trends.
    A cycle whose collection failed has ``ok=False`` and an ``error``; the last good one stays.
    """

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="cycles")
    as_of = models.DateTimeField(help_text="Snapshot time the cycle judged (null if none).")
    ran_at = models.DateTimeField(default=timezone.now)
    seconds = models.FloatField(default=0, help_text="Wall time of the whole cycle.")
    ok = models.BooleanField(default=True)
    error = models.TextField(blank=True)
    gpus = models.PositiveIntegerField(default=0)
    allocated_gpus = models.PositiveIntegerField(default=0)
    allocation_utilization = models.FloatField(null=True, blank=True)
    activity_utilization = models.FloatField(null=True, blank=True)
    accounting = models.JSONField(default=dict, blank=True)
    findings = models.JSONField(
        default=dict, blank=True, help_text="Counts of this cycle's hits: rule -> severity -> n."
    )
    rule_errors = models.JSONField(default=list, blank=True)
    not_judged = models.JSONField(default=dict, blank=True)
    size = models.JSONField(
        default=dict,
        blank=True,
        help_text='The snapshot\'s {"nodes": n, "gpus": g, "jobs": live jobs}: what the next '
        "cycle's size is compared with (diagnosis/actions/records/cluster_size.py).",
    )
    data_age_s = models.FloatField(null=True, blank=True, help_text="ran_at - as_of, seconds.")
    coverage = models.FloatField(
        null=True, blank=True, help_text="GPUs the metrics source answered for ÷ GPUs expected."
    )
    source = models.JSONField(
        default=dict, blank=True, help_text="What the sources reported: queries, bytes, warnings."
    )
    recommendations = models.JSONField(
        default=dict,
        blank=True,
        help_text="What the recommend step did: proposed, kept, superseded, verified, seconds; "
        "an 'error' when the step failed.",
    )
    steps = models.JSONField(
        default=dict,
        blank=True,
        help_text="Seconds each recorded step took (diagnose, store snapshot, findings, "
        "tenancy, incidents, recommend) and what the findings step wrote.",
    )

    class Meta(ClusterTimeline.Meta):
        indexes = [models.Index(fields=["cluster", "-as_of"], name="cycle_cluster_as_of")]

    def __str__(self) -> str:
        return f"{self.cluster} cycle as of {self.as_of:%Y-%m-%dT%H:%M:%SZ}"
