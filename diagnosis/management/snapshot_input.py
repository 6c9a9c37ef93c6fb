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
        decoded, text_clean = _decoded(path)
        document = with_declared_traits(decoded)
        if storable and isinstance(document, dict):
            document, repaired = clean_document(document, text_clean=text_clean)
            if repaired:
                collection = document.get("collection")
                collection = dict(collection) if isinstance(collection, dict) else {}
                document["collection"] = {**collection, "repaired": repaired}
        return snapshot_format.load(document)
    except snapshot_format.SnapshotError as exc:
        for line in exc.errors:
            command.stderr.write(line)
        raise CommandError(f"{path}: {len(exc.errors)} validation error(s)", returncode=2) from exc


def _decoded(path: str) -> tuple[object, bool]:
    """The file's JSON, or its raw bytes when it is not JSON (the loader then says so), and
    whether its text is free of what decodes to a NUL or a lone surrogate
    (:func:`diagnosis.edge.sanitize.json_text_clean`). The bytes are let go of here, before the
    snapshot is built from the JSON."""
    raw = sys.stdin.buffer.read() if path == "-" else snapshot_format.read_file(path)
    try:
        return json.loads(raw), json_text_clean(raw)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return raw, False
    except RecursionError as exc:  # 100,000 nested brackets: an error line, not a traceback
        raise snapshot_format.SnapshotError(["$: the JSON is nested too deeply"]) from exc
