"""Reading the snapshot argument of a management command, the same way in every command."""

from __future__ import annotations

import json
import sys

from django.core.management.base import BaseCommand, CommandError

from diagnosis.core import snapshot as snapshot_format
from diagnosis.edge.collection import with_declared_traits
from diagnosis.edge.sanitize import clean_document, json_text_clean


def load_snapshot_argument(
    command: BaseCommand, path: str, *, storable: bool = False
) -> snapshot_format.ClusterSnapshot:
    """The snapshot at ``path`` (``-`` = stdin), its scheduler block completed with what its
    scheduler kind's adapter declares (``gang_advice``), as a collection would have written it.
    With ``storable`` (a snapshot the database will hold), every string made storable first, as
    a cycle does (:func:`diagnosis.edge.sanitize.clean_document`: a 300-character job id
    clipped, a NUL replaced), what was changed kept as the collection's ``repaired``. A bad
    one: every error on stderr, then a CommandError that exits 2 (nothing reaches stdout)."""
    try:
        raw = sys.stdin.buffer.read() if path == "-" else snapshot_format.read_file(path)
        document = with_declared_traits(_decoded(raw))
        if storable and isinstance(document, dict):
            document, repaired = clean_document(document, text_clean=json_text_clean(raw))
            if repaired:
                collection = document.get("collection")
                collection = dict(collection) if isinstance(collection, dict) else {}
                document["collection"] = {**collection, "repaired": repaired}
        return snapshot_format.load(document)
    except snapshot_format.SnapshotError as exc:
        for line in exc.errors:
            command.stderr.write(line)
        raise CommandError(f"{path}: {len(exc.errors)} validation error(s)", returncode=2) from exc


def _decoded(raw: bytes) -> object:
    """The JSON of ``raw``, or ``raw`` itself when it is not JSON (the loader then says so)."""
    try:
        return json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return raw
    except RecursionError as exc:  # 100,000 nested brackets: an error line, not a traceback
        raise snapshot_format.SnapshotError(["$: the JSON is nested too deeply"]) from exc
