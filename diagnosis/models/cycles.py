"""What each cycle stored: the snapshot document (compressed) and the cycle's row with its
accounting and coverage.
"""

from __future__ import annotations

import contextlib
import gc
import json
import logging
import os
import select
import signal
import struct
import tempfile
import time
import warnings
import zlib
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from typing import TYPE_CHECKING, Any, NoReturn

from django.db import connections, models, transaction
from django.utils import timezone

from diagnosis.core.snapshot_index import BuiltIndex, compress
from diagnosis.core.vocabulary import SNAPSHOT_FORMAT, parse_time, time_problem
from diagnosis.models.inventory import Cluster

if TYPE_CHECKING:
    from diagnosis.core.snapshot.frame import ClusterSnapshot

logger = logging.getLogger(__name__)


class SnapshotDocumentError(ValueError):
    """A snapshot document lacks a field that storing it needs, or has it in the wrong form."""


def _document_as_of(document: Mapping[str, Any]) -> datetime:
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

    @classmethod
    def dumping(cls, cluster: Cluster, snap: ClusterSnapshot) -> CompressingSnapshot:
        """Start storing a cycle's snapshot, its document named after ``cluster``: a big one
        dumped, encoded, indexed and compressed in a forked process (:class:`_ForkedDump`)
        while the caller goes on, a small one dumped here and compressed in a thread."""
        from diagnosis.core.snapshot.dump import dump, lazy_dump  # noqa: PLC0415 -- start-up

        forked = _ForkedDump.start(snap, cluster.name) if len(snap.gpus) >= FORKED_GPUS else None
        if forked is None:
            return CompressingSnapshot(cluster, dump(snap, cluster=cluster.name))
        # the document as the caller may read it meanwhile (the cycle reads its as_of and
        # format only), each part dumped from the frames only if it is read
        view = lazy_dump(snap, cluster=cluster.name, gpu_metrics=False)
        return CompressingSnapshot(cluster, view, compressed=forked)

    def load_document(self) -> dict[str, Any]:
        """The document as it was stored."""
        return json.loads(zlib.decompress(bytes(self.document)))


_COMPRESSOR = ThreadPoolExecutor(max_workers=1, thread_name_prefix="gpuobs-snapshot-zlib")

StoredParts = tuple[int, bytes, BuiltIndex]
"""A document as it is stored: the size of its JSON, the JSON compressed, its index."""


class CompressingSnapshot:
    """A snapshot document on its way to a :class:`Snapshot` row: its JSON encoded, indexed and
    compressed in a background thread while the cycle records its findings (issues #17, #35);
    or, given ``compressed``, made by it (:meth:`Snapshot.dumping`: a forked child).
    ``document`` is what the caller reads of it meanwhile. :meth:`create` writes the row
    without its bytes, :meth:`finish` waits for them and writes them: a cycle creates the row
    its later steps name and writes the bytes at the end of its transaction (#35)."""

    def __init__(
        self,
        cluster: Cluster,
        document: Mapping[str, Any],
        *,
        compressed: _ForkedDump | None = None,
    ) -> None:
        self.cluster = cluster
        self.document = document
        self.as_of = _document_as_of(document)
        self.format = document.get("format", SNAPSHOT_FORMAT)
        self._compressed = compressed or _COMPRESSOR.submit(_compress_and_index, document)

    def save(self) -> Snapshot:
        """Wait for the compression and store the row."""
        with transaction.atomic(savepoint=False):  # the row and its bytes, or neither
            return self.finish(self.create())

    def create(self) -> Snapshot:
        """The row, its bytes not written yet (:meth:`finish` writes them in the caller's
        transaction): what the cycle's later steps name while the dump goes on (#35)."""
        return Snapshot.objects.create(
            cluster=self.cluster,
            as_of=self.as_of,
            format=self.format,
            json_bytes=0,
            stored_bytes=0,
            document=b"",
        )

    def finish(self, snapshot: Snapshot) -> Snapshot:
        """Wait for the compression and write the bytes of ``snapshot`` (:meth:`create`'s row)."""
        json_bytes, compressed, index = self._compressed.result()
        stored = {"document": compressed, "index_header": index.header, "index_body": index.body}
        sizes = {"json_bytes": json_bytes, "stored_bytes": len(compressed)}
        if connections[snapshot._state.db].vendor == "postgresql":
            _write_bytes(snapshot, {**stored, **sizes})
        else:
            Snapshot.objects.filter(pk=snapshot.pk).update(**stored, **sizes)
            for name, value in {**stored, **sizes}.items():
                setattr(snapshot, name, value)
        return snapshot


# A snapshot of this many GPUs or more is dumped in a forked process (a smaller one's dump
# costs less than the fork: ~0.1 s at 2,048 GPUs).
FORKED_GPUS = 2048
# How long a forked dump may take (~4.3 s of CPU at 131,072 GPUs) before it is killed and the
# snapshot dumped in-process.
FORKED_DUMP_TIMEOUT_S = 120.0


class _ForkedDump:
    """A snapshot dumped, encoded, indexed and compressed in a forked child process: its ~4.3 s
    of CPU at 131,072 GPUs off the cycle's thread and out of its GIL while the cycle diagnoses
    and records (2 cores: issue #35). The child runs pure-core
    code only (no Django, no logging, no database: it holds no lock a parent's thread may
    have held at the fork), writes the parts to an unlinked temporary file, a byte to a pipe
    and exits (``os._exit``). :meth:`result` waits for that byte (or the pipe's end: a child
    that died) and reaps the child; a child that failed or ran past
    :data:`FORKED_DUMP_TIMEOUT_S` is logged, and the snapshot is dumped in-process: a cycle
    always stores its snapshot."""

    def __init__(self, snap: ClusterSnapshot, cluster: str, pid: int, done: int, out: int):
        self._snap, self._cluster = snap, cluster
        self._pid: int | None = pid
        self._done, self._out = done, out
        self._started = time.monotonic()

    @classmethod
    def start(cls, snap: ClusterSnapshot, cluster: str) -> _ForkedDump | None:
        """The child started, or None where this process cannot fork (the caller dumps
        in-process)."""
        if not hasattr(os, "fork"):
            return None
        fds: list[int] = []
        try:
            out, path = tempfile.mkstemp(prefix="gpuobs-snapshot-")
            fds.append(out)
            os.unlink(path)  # gone with its last descriptor
            fds += os.pipe()
            done, told = fds[1:]
            pid = os.fork()
        except OSError as error:  # no temporary file, no descriptors, no memory to fork
            logger.warning("snapshot of cluster %s dumped in-process: %s", cluster, error)
            for fd in fds:
                os.close(fd)
            return None
        if pid == 0:  # pragma: no cover -- the child (its coverage is not collected)
            _run_child(snap, cluster, out, told)
        os.close(told)
        return cls(snap, cluster, pid, done, out)

    def result(self) -> StoredParts:
        """The stored parts (made in-process when the child did not make them)."""
        try:
            parts, why = self._wait()
        finally:
            self._close()
        if parts is not None:
            return parts
        logger.warning("snapshot of cluster %s dumped in-process: %s", self._cluster, why)
        from diagnosis.core.snapshot.dump import dump  # noqa: PLC0415 -- start-up, #35

        return _compress_and_index(dump(self._snap, cluster=self._cluster))

    def _wait(self) -> tuple[StoredParts | None, str]:
        left = FORKED_DUMP_TIMEOUT_S - (time.monotonic() - self._started)
        ready, _, _ = select.select([self._done], [], [], max(left, 0.0))
        told = os.read(self._done, 1) if ready else b""
        if not ready:
            os.kill(self._pid, signal.SIGKILL)
        status = _reap(self._pid)
        self._pid = None
        if told != _DONE:
            why = "its child process " + (
                f"ran past {FORKED_DUMP_TIMEOUT_S:g} s" if not ready else f"failed ({status})"
            )
            return None, why
        try:
            return _read_parts(self._out), ""
        except (OSError, ValueError) as error:
            return None, f"its child process's output is unreadable ({error})"

    def _close(self) -> None:
        if self._pid is not None:  # not waited for: killed, not left running or a zombie
            with contextlib.suppress(OSError):
                os.kill(self._pid, signal.SIGKILL)
            _reap(self._pid)
            self._pid = None
        if self._done >= 0:
            os.close(self._done)
            os.close(self._out)
            self._done = self._out = -1

    def __del__(self) -> None:
        """A cycle that failed before it saved: its child is ended and reaped."""
        self._close()


_DONE = b"\x01"
_SIZES = struct.Struct("<4Q")  # the JSON's size, then the lengths of the three parts


def _run_child(snap: ClusterSnapshot, cluster: str, out: int, told: int) -> NoReturn:
    """The forked child: dump, encode, index and compress, write, exit (never returns)."""
    code = 1
    try:
        gc.disable()  # short-lived; a collection would touch (and copy) the parent's pages
        warnings.simplefilter("ignore")  # Django sends warnings to logging: not in the child
        signal.signal(signal.SIGALRM, signal.SIG_DFL)
        signal.alarm(int(FORKED_DUMP_TIMEOUT_S) + 1)  # if the parent is gone, it still ends
        from diagnosis.core.snapshot.dump import dump  # noqa: PLC0415 -- start-up, #35

        json_bytes, compressed, index = _compress_and_index(dump(snap, cluster=cluster))
        parts = (compressed, index.header, index.body)
        _write_all(out, _SIZES.pack(json_bytes, *(len(p) for p in parts)))
        for part in parts:
            _write_all(out, part)
        _write_all(told, _DONE)
        code = 0
    finally:
        os._exit(code)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _read_parts(fd: int) -> StoredParts:
    size = os.fstat(fd).st_size
    head = os.pread(fd, _SIZES.size, 0)
    if len(head) != _SIZES.size:
        raise ValueError("cut short")
    json_bytes, *lengths = _SIZES.unpack(head)
    if _SIZES.size + sum(lengths) != size:
        raise ValueError(f"{size} bytes, not {_SIZES.size + sum(lengths)}")
    offset, parts = _SIZES.size, []
    for length in lengths:
        parts.append(os.pread(fd, length, offset))
        offset += length
    compressed, header, body = parts
    return json_bytes, compressed, BuiltIndex(header, body)


def _reap(pid: int) -> str:
    """Wait for a child to exit; how it ended."""
    try:
        _, status = os.waitpid(pid, 0)
    except ChildProcessError:  # reaped elsewhere (a SIGCHLD handler)
        return "reaped elsewhere"
    if os.WIFSIGNALED(status):
        return f"killed by signal {os.WTERMSIG(status)}"
    return f"exit status {os.waitstatus_to_exitcode(status)}"


def _write_bytes(snapshot: Snapshot, values: dict[str, bytes]) -> None:
    """Write a stored snapshot's columns (its bytes) as binary parameters: Django binds parameters
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


def _compress_and_index(document: Mapping[str, Any]) -> StoredParts:
    """The size of the document's JSON, the stored document and its index. ``document`` is
    read here while the caller records the findings (encoded here too: its Python runs while
    the caller waits on the database, ~0.6 s at 131,072 GPUs), and changes only after
    :meth:`CompressingSnapshot.save` has waited for this."""
    # the snapshot package (pandas) when a snapshot is stored, not at every start-up (#35)
    from diagnosis.core.snapshot.dump import encode_indexed  # noqa: PLC0415 -- start-up, #35

    encoded, index = encode_indexed(document)
    return len(encoded), compress(encoded), index


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
