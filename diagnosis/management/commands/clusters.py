"""``manage.py clusters``: clusters declared as code (docs/operations.md, "Clusters as code";
the format: :mod:`diagnosis.actions.records.cluster_specs`).

- ``apply -f FILE|DIR [-f ...] [--dry-run]``: create or update the declared clusters, printing
  each one's outcome (``created``, ``updated`` with the fields' before and after, or
  ``unchanged``); ``--dry-run`` prints the same and writes nothing;
- ``export [--out FILE] [--format yaml|json]``: every cluster as one document, which applied
  again is ``unchanged``.

A document that is not valid is exit code 2, each problem on its own line of stderr.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from django.core.management.base import BaseCommand, CommandError, CommandParser

from diagnosis.actions.records.cluster_specs import (
    ClusterSpecError,
    apply_cluster_specs,
    export_document,
    parse_documents,
    plan,
    read_path,
)

ACTOR = "system:clusters-apply"


class Command(BaseCommand):
    help = "Apply clusters declared in YAML/JSON files, or export the clusters as such a file."

    def add_arguments(self, parser: CommandParser) -> None:
        verbs = parser.add_subparsers(dest="verb", required=True)
        apply = verbs.add_parser("apply")
        apply.add_argument("-f", "--filename", action="append", required=True, type=Path)
        apply.add_argument("--dry-run", action="store_true", help="print the changes only")
        export = verbs.add_parser("export")
        export.add_argument("--out", type=Path)
        export.add_argument("--format", choices=["yaml", "json"], default="yaml")

    def handle(self, *args: Any, verb: str, **options: Any) -> None:
        if verb == "apply":
            self.apply(options["filename"], dry_run=options["dry_run"])
        else:
            self.export(options["out"], options["format"])

    def apply(self, paths: list[Path], *, dry_run: bool) -> None:
        try:
            specs = parse_documents(doc for path in paths for doc in read_path(path))
        except ClusterSpecError as exc:
            raise CommandError("\n".join(exc.problems), returncode=2) from None
        changes = plan(specs) if dry_run else apply_cluster_specs(specs, actor=ACTOR)
        for change in changes:
            for line in change.lines():
                self.stdout.write(line)
        if dry_run:
            self.stdout.write("(dry run: nothing written)")

    def export(self, out: Path | None, fmt: str) -> None:
        document = export_document()
        if fmt == "json":
            text = json.dumps(document, indent=2) + "\n"
        else:
            text = yaml.safe_dump(document, sort_keys=False, allow_unicode=True)
        if out is None:
            self.stdout.write(text, ending="")
        else:
            out.write_text(text, encoding="utf-8")
