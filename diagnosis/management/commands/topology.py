import json
import sys
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from diagnosis.edge.topology import MAX_TEXT_BYTES, TopologyError, parse_topo_tables


class Command(BaseCommand):
    help = (
        "Read `nvidia-smi topo -m` output and print its NVLink domains and NUMA nodes: "
        '{"gpus": N, "nvlink_domains": [[...]], "numa": [...] | null}. Exit 2 on text that is '
        "no topology matrix."
    )

    def add_arguments(self, parser):
        parser.add_argument("file", help="a file holding `nvidia-smi topo -m` output ('-' = stdin)")
        parser.add_argument("--json", action="store_true", help="print one JSON object")
        parser.add_argument(
            "--table",
            type=int,
            default=None,
            metavar="N",
            help="the N-th matrix (from 1) of a file that quotes several",
        )

    def handle(self, *args, **options):
        name = options["file"]
        try:
            if name == "-":
                raw = sys.stdin.buffer.read(MAX_TEXT_BYTES + 1)
            else:
                with Path(name).open("rb") as handle:
                    raw = handle.read(MAX_TEXT_BYTES + 1)
        except OSError as exc:
            raise CommandError(f"{name}: {exc.strerror or exc}", returncode=2) from exc
        try:
            tables = parse_topo_tables(raw)
        except TopologyError as exc:
            raise CommandError(f"{name}: {exc}", returncode=2) from exc
        number = options["table"]
        if number is None and len(tables) > 1:
            raise CommandError(
                f"{name}: holds {len(tables)} matrices; choose one with --table 1..{len(tables)}",
                returncode=2,
            )
        if number is not None and not 1 <= number <= len(tables):
            raise CommandError(f"{name}: no matrix {number} (it has {len(tables)})", returncode=2)
        summary = tables[(number or 1) - 1].summary()
        if options["json"]:
            self.stdout.write(json.dumps(summary))
            return
        self.stdout.write(f"GPUs: {summary['gpus']}")
        for d, domain in enumerate(summary["nvlink_domains"]):
            self.stdout.write(f"NVLink domain {d}: GPUs {', '.join(map(str, domain))}")
        numa = summary["numa"]
        self.stdout.write(
            "NUMA: unknown"
            if numa is None
            else "NUMA: "
            + ", ".join(f"GPU{g}={'?' if n is None else n}" for g, n in enumerate(numa))
        )
