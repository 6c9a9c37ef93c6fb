"""Reading the snapshot argument of a management command, the same way in every command."""

from __future__ import annotations

import json
import sys

from django.core.management.base import BaseCommand, CommandError

from diagnosis.core import snapshot as snapshot_format
from diagnosis.edge.collection import with_declared_traits


def load_snapshot_argument(command: BaseCommand, path: str) -> snapshot_format.ClusterSnapshot:
    """The snapshot at ``path`` (``-`` = stdin), its scheduler block completed with what its
    scheduler kind's adapter declares (``gang_advice``), as a collection would have written it.
    A bad one: every error on stderr, then a CommandError that exits 2 (nothing reaches
    stdout)."""
    try:
        return snapshot_format.load(with_declared_traits(_decoded(path)))
    except snapshot_format.SnapshotError as exc:
        for line in exc.errors:
            command.stderr.write(line)
        raise CommandError(f"{path}: {len(exc.errors)} validation error(s)", returncode=2) from exc


def _decoded(path: str) -> object:
    """The file's JSON, or its raw bytes when it is not JSON (the loader then says so)."""
    raw = sys.stdin.buffer.read() if path == "-" else snapshot_format.read_file(path)
    try:
        return json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return raw
