"""Reading the snapshot argument of a management command, the same way in every command."""

from __future__ import annotations

import sys

from django.core.management.base import BaseCommand, CommandError

from diagnosis.core import snapshot as snapshot_format


def load_snapshot_argument(command: BaseCommand, path: str) -> snapshot_format.ClusterSnapshot:
    """The snapshot at ``path`` (``-`` = stdin). A bad one: every error on stderr, then a
    CommandError that exits 2 (nothing reaches stdout)."""
    try:
        if path == "-":
            return snapshot_format.load(sys.stdin.buffer.read())
        return snapshot_format.load_file(path)
    except snapshot_format.SnapshotError as exc:
        for line in exc.errors:
            command.stderr.write(line)
        raise CommandError(f"{path}: {len(exc.errors)} validation error(s)", returncode=2) from exc
