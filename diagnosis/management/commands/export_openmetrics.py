"""``manage.py export_openmetrics --cluster NAME --hours N > FILE``: a simulated cluster's GPU
metrics history as OpenMetrics text, to backfill a Prometheus with
``promtool tsdb create-blocks-from openmetrics FILE DATA_DIR``.

The history ends at ``--end`` (default: the time the cluster's next cycle will judge -- now for
a wall-clock cluster) and reaches back ``--hours`` (not before the simulation's start). Series
carry dcgm-exporter's names and labels, plus any ``--label NAME=VALUE`` (e.g. ``cluster=demo``,
as a Prometheus scrape config would add). GPU-to-pod labels are left out of history.
"""

from __future__ import annotations

import sys
from datetime import UTC, datetime

from django.core.management.base import BaseCommand, CommandError

from diagnosis.core import snapshot as snapshot_format
from diagnosis.edge.errors import CollectError
from diagnosis.edge.sim import runtime as sim_runtime
from diagnosis.edge.sources.dcgm.exporter import SimExporter
from diagnosis.edge.sources.prometheus.promql import LABEL_NAME
from diagnosis.management.cli import bad_input, cluster_named
from diagnosis.models import Cluster, ClusterCycle


def parse_label(text: str) -> tuple[str, str]:
    """``NAME=VALUE`` with a valid Prometheus label name."""
    name, sep, value = text.partition("=")
    if not sep or not LABEL_NAME.fullmatch(name):
        raise bad_input(f"--label: expected NAME=VALUE with a label name, got {text!r}")
    return name, value


class Command(BaseCommand):
    help = "Write a simulated cluster's GPU metrics history as OpenMetrics (for promtool)."

    def add_arguments(self, parser):
        parser.add_argument("--cluster", required=True, help="a cluster whose scheduler is sim")
        parser.add_argument("--hours", type=float, required=True)
        parser.add_argument("--end", help="RFC 3339 end of the history (default: see above)")
        parser.add_argument("--step", type=float, default=15.0, help="seconds between samples")
        parser.add_argument("--host-label", default="Hostname", choices=["Hostname", "hostname"])
        parser.add_argument("--no-profiling", action="store_true")
        parser.add_argument("--label", action="append", default=[], metavar="NAME=VALUE")
        parser.add_argument("--output", "-o", help="file to write (default: standard output)")

    def handle(self, *args, **options):
        if options["hours"] <= 0 or options["step"] <= 0:
            raise bad_input("--hours and --step must be positive")
        labels = dict(parse_label(text) for text in options["label"])
        cluster = cluster_named(options["cluster"], sim_only=True)
        try:
            runtime = sim_runtime.runtime_for(cluster)
            end = self._end(cluster, runtime, options["end"])
        except CollectError as exc:
            raise CommandError(str(exc)) from exc
        start = max(0.0, end - options["hours"] * 3600)
        if end - start < options["hours"] * 3600:
            self.stderr.write(
                f"the simulation starts at {runtime.started_at.isoformat()}: history shortened "
                f"to {(end - start) / 3600:.2f} h"
            )
        exporter = SimExporter(
            runtime, options["host_label"], profiling=not options["no_profiling"]
        )
        if options["output"]:
            with open(options["output"], "w", encoding="utf-8") as out:
                samples = exporter.history(out, start, end, options["step"], extra=labels)
        else:
            samples = exporter.history(sys.stdout, start, end, options["step"], extra=labels)
        self.stderr.write(
            f"wrote {samples} samples of {cluster.name} from "
            f"{runtime.simulator.time_of(start).isoformat()} to "
            f"{runtime.simulator.time_of(end).isoformat()}"
        )

    @staticmethod
    def _end(cluster: Cluster, runtime, end: str | None) -> float:
        if end:
            moment = snapshot_format.parse_time(end)
            if moment is None:
                raise bad_input(f"--end: {end!r} is not an RFC 3339 time with a zone")
            return max(0.0, (moment.to_pydatetime() - runtime.started_at).total_seconds())
        latest = (
            ClusterCycle.objects.filter(cluster=cluster, ok=True)
            .order_by("-as_of")
            .values_list("as_of", flat=True)
            .first()
        )
        return sim_runtime.target_time(cluster, runtime, datetime.now(UTC), latest)
