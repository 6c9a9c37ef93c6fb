import json

from django.core.management.base import BaseCommand, CommandError

from diagnosis.core.diagnose import diagnose_snapshot, parse_threshold_settings, render_table
from diagnosis.core.rules.base import ThresholdError
from diagnosis.management.snapshot_input import load_snapshot_argument


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
        snapshot = load_snapshot_argument(self, options["snapshot"])

        report = diagnose_snapshot(snapshot, overrides, only=options["rule"])
        if options["json"]:
            self.stdout.write(json.dumps(report, allow_nan=False, indent=None))
        else:
            self.stdout.write(render_table(report))
