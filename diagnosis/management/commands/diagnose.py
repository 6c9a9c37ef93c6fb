import json
import sys

from django.core.management.base import BaseCommand, CommandError

from diagnosis import snapshot as snapshot_format
from diagnosis.diagnose import diagnose_snapshot, parse_threshold_settings, render_table
from diagnosis.rules.base import ThresholdError


class Command(BaseCommand):
    help = (
        "Run every diagnosis rule on a gpuobs.snapshot/v1 file. Exit 2 on a bad snapshot or a "
        "bad --set; the errors go to stderr and nothing to stdout."
    )

    def add_arguments(self, parser):
        parser.add_argument("snapshot", help="path of a gpuobs.snapshot/v1 JSON file ('-' = stdin)")
        parser.add_argument("--json", action="store_true", help="print one JSON object")
        parser.add_argument(
            "--set",
            action="append",
            default=[],
            metavar="RULE.THRESHOLD=VALUE",
            help="override a rule threshold for this run (repeatable)",
        )
        parser.add_argument(
            "--rule", action="append", default=None, metavar="ID", help="run only these rules"
        )

    def handle(self, *args, **options):
        try:
            overrides = parse_threshold_settings(options["set"], only=options["rule"])
        except ThresholdError as exc:
            raise CommandError(str(exc), returncode=2) from exc
        try:
            if options["snapshot"] == "-":
                snapshot = snapshot_format.load(sys.stdin.buffer.read())
            else:
                snapshot = snapshot_format.load_file(options["snapshot"])
        except snapshot_format.SnapshotError as exc:
            for line in exc.errors:
                self.stderr.write(line)
            raise CommandError(
                f"{options['snapshot']}: {len(exc.errors)} validation error(s)", returncode=2
            ) from exc

        report = diagnose_snapshot(snapshot, overrides, only=options["rule"])
        if options["json"]:
            self.stdout.write(json.dumps(report, allow_nan=False, indent=None))
        else:
            self.stdout.write(render_table(report))
