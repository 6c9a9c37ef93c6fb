import json
import re

from django.core.management.base import BaseCommand, CommandError

from diagnosis.core.recommend.base import DEFAULT_HORIZON_S, DEFAULT_SEEDS, RecommendSettings
from diagnosis.core.recommend.engine import recommend, render_table
from diagnosis.management.snapshot_input import load_snapshot_argument

_UNITS = {"s": 1, "m": 60, "h": 3600}


def parse_seeds(value: str) -> tuple[int, ...]:
    try:
        seeds = tuple(int(part) for part in value.split(",") if part.strip())
    except ValueError:
        raise CommandError(
            f"--seeds {value!r}: expected integers like 0,1,2", returncode=2
        ) from None
    if not seeds:
        raise CommandError("--seeds: give at least one seed", returncode=2)
    return seeds


def parse_duration(value: str) -> float:
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smh]?)\s*", value)
    if not match or float(match.group(1)) <= 0:
        raise CommandError(
            f"--horizon {value!r}: expected a positive duration like 3h, 90m or 10800",
            returncode=2,
        )
    return float(match.group(1)) * _UNITS[match.group(2) or "s"]


class Command(BaseCommand):
    help = (
        "The recommendations for a gpuobs.snapshot/v1 file, each with its simulated impact. "
        "Exit 2 on a bad snapshot or option; the errors go to stderr and nothing to stdout."
    )

    def add_arguments(self, parser):
        parser.add_argument("snapshot", help="path of a gpuobs.snapshot/v1 JSON file ('-' = stdin)")
        parser.add_argument("--json", action="store_true", help="print one JSON object")
        parser.add_argument(
            "--seeds",
            default=",".join(str(s) for s in DEFAULT_SEEDS),
            help="replay seeds for the impact, comma-separated (default %(default)s)",
        )
        parser.add_argument(
            "--horizon",
            default=f"{DEFAULT_HORIZON_S / 3600:g}h",
            help="simulated time per replay, e.g. 3h, 90m, 10800 (default %(default)s)",
        )
        parser.add_argument(
            "--no-impact", action="store_true", help="skip the replays (nothing is preselected)"
        )

    def handle(self, *args, **options):
        settings = RecommendSettings(
            seeds=parse_seeds(options["seeds"]),
            horizon_s=parse_duration(options["horizon"]),
            simulate=not options["no_impact"],
        )
        snapshot = load_snapshot_argument(self, options["snapshot"])

        report = recommend(snapshot, settings=settings).as_dict()
        if options["json"]:
            self.stdout.write(json.dumps(report, allow_nan=False, indent=None))
        else:
            self.stdout.write(render_table(report))
