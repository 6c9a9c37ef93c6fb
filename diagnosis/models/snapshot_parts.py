"""Parts of stored snapshots' indexes, read without the rest of their rows (issue #35).

A stored snapshot's row holds its document and its index (``index_header``, ``index_body``:
26 MB at 131,072 GPUs); a reader of one node in several snapshots (a page's time series, an
incident's hit window) reads each header, then only the bytes of the parts it names, all
snapshots at once (a query for every :data:`RANGES_PER_QUERY` parts): ``substr`` of the stored
body, which PostgreSQL and SQLite both do.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from django.db import connection

from diagnosis.core.snapshot_index import SnapshotIndex, SnapshotIndexError, decode_part
from diagnosis.models.cycles import Snapshot

logger = logging.getLogger(__name__)


def stored_indexes(snapshot_ids: Iterable[int]) -> dict[int, SnapshotIndex]:
    """The indexes of those of the snapshots that have one that reads, by id: their headers
    read in one query; a part asked of one later reads its bytes alone."""
    found: dict[int, SnapshotIndex] = {}
    rows = Snapshot.objects.filter(pk__in=list(snapshot_ids)).exclude(index_header=None)
    for snapshot_id, header in rows.values_list("id", "index_header"):
        try:
            found[snapshot_id] = SnapshotIndex(bytes(header), _range_reader(snapshot_id))
        except SnapshotIndexError as error:
            logger.warning(
                "a stored snapshot index does not read (%s): the document is read", error
            )
    return found


def read_parts(
    indexes: Mapping[int, SnapshotIndex], wanted: Mapping[int, Iterable[str]]
) -> dict[int, dict[str, Any]]:
    """The parts named in ``wanted`` (snapshot id -> part names) of the snapshots in
    ``indexes``, by snapshot id and name, in one query a :data:`RANGES_PER_QUERY` parts; a name
    an index lacks is left out, and so is a part that does not decode (logged)."""
    ranges: list[tuple[int, int, int]] = []
    named: dict[tuple[int, int, int], list[str]] = {}
    found: dict[int, dict[str, Any]] = {}
    for snapshot_id, names in wanted.items():
        index = indexes.get(snapshot_id)
        if index is None:
            continue
        found[snapshot_id] = {}
        for name in dict.fromkeys(names):
            if (where := index.where(name)) is not None:
                key = (snapshot_id, *where)
                if key not in named:
                    ranges.append(key)
                named.setdefault(key, []).append(name)
    for key, part in _read_ranges(ranges).items():
        for name in named[key]:
            found[key[0]][name] = part
    return found


def read_index_parts(snapshot_ids: Iterable[int], *names: str) -> dict[int, dict[str, Any]]:
    """The parts ``names`` of each of the snapshots that have an index, by snapshot id and
    name: their headers in one query, the parts' bytes in as few as :func:`read_parts` needs."""
    indexes = stored_indexes(snapshot_ids)
    return read_parts(indexes, dict.fromkeys(indexes, names))


def _range_reader(snapshot_id: int) -> Callable[[int, int], bytes]:
    def read(offset: int, length: int) -> bytes:
        key = (snapshot_id, offset, length)
        return _range_bytes([key]).get(key, b"")

    return read


def _read_ranges(ranges: list[tuple[int, int, int]]) -> dict[tuple[int, int, int], Any]:
    """Byte ranges of stored index bodies, decoded: keyed ``(snapshot id, offset, length)``."""
    found: dict[tuple[int, int, int], Any] = {}
    for key, data in _range_bytes(ranges).items():
        try:
            found[key] = decode_part(data)
        except SnapshotIndexError as error:
            logger.warning("a stored snapshot index part does not read (%s)", error)
    return found


# ranges per query: three parameters each, well under SQLite's 32,766 (an incident's windows in
# a new process at 131,072 GPUs ask for ~27,000 parts)
RANGES_PER_QUERY = 2000


def _range_bytes(ranges: list[tuple[int, int, int]]) -> dict[tuple[int, int, int], bytes]:
    table = Snapshot._meta.db_table
    found: dict[tuple[int, int, int], bytes] = {}
    for start in range(0, len(ranges), RANGES_PER_QUERY):
        chunk = ranges[start : start + RANGES_PER_QUERY]
        values = ", ".join(["(%s, %s, %s)"] * len(chunk))
        sql = (
            f"WITH wanted (snapshot_id, start_at, length) AS (VALUES {values}) "  # noqa: S608 - ints only
            f"SELECT w.snapshot_id, w.start_at, w.length, "
            f"substr(s.index_body, CAST(w.start_at + 1 AS INTEGER), CAST(w.length AS INTEGER)) "
            f"FROM wanted w JOIN {table} s ON s.id = w.snapshot_id"
        )
        with connection.cursor() as cursor:
            cursor.execute(sql, [value for where in chunk for value in where])
            for snapshot_id, offset, length, data in cursor.fetchall():
                found[(int(snapshot_id), int(offset), int(length))] = bytes(data)
    return found
