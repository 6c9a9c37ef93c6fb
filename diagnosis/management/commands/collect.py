"""``manage.py collect``: collection from Prometheus, one-shot or as a cluster's cycles.

One-shot, before any scheduler adapter is set up::

    manage.py collect --prometheus URL --scheduler-snapshot FILE [--window SECONDS]
                      [--as-of RFC3339] [--match NAME=VALUE ...] --out FILE

takes nodes, jobs and queues from a ``gpuobs.snapshot/v1`` file (its ``gpus[]``, when present,
give UUIDs and health) and fills every GPU's statistics from Prometheus for the window ending at
``--as-of`` (default now); the result is a snapshot document (with a ``collection`` section:
coverage, data age, queries, bytes, warnings) that ``manage.py diagnose`` reads.

A configured cluster's cycles, through the same path Celery beat uses::

    manage.py collect --cluster NAME [--cycles N] [--interval SECONDS] [--json]

Exit 2 for bad options or an unknown cluster, 1 when Prometheus fails
(diagnosis/management/cli.py).
"""

from __future__ import annotations

import json
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from diagnosis.actions.enqueue import run_deferred_impacts
from diagnosis.actions.records.cycles import run_cluster_cycle
from diagnosis.core import snapshot as snapshot_format
from diagnosis.edge.errors import CollectError
from diagnosis.edge.sources.prometheus import PrometheusConfig, collect_document
from diagnosis.edge.sources.prometheus.promql import PromQLError
from diagnosis.management.cli import bad_input, cluster_named
from diagnosis.management.deferred_impacts import write_deferred_note
from diagnosis.models import Cluster
from diagnosis.tasks import run_collect_shards


class Command(BaseCommand):
    help = "Collect GPU metrics from Prometheus into a snapshot, or run a cluster's cycles."

    def add_arguments(self, parser):
        parser.add_argument("--prometheus", metavar="URL", help="Prometheus base URL")
        parser.add_argument("--scheduler-snapshot", metavar="FILE", type=Path)
        parser.add_argument("--window", type=int, help="window in seconds (default 900)")
        parser.add_argument("--as-of", help="RFC 3339 end of the window (default now)")
        parser.add_argument(
            "--out", metavar="FILE", help="where to write the snapshot ('-': stdout)"
        )
        parser.add_argument(
            "--match",
            action="append",
            default=[],
            metavar="NAME=VALUE",
            help="extra label matcher on every series, e.g. cluster=a100-east",
        )
        parser.add_argument("--host-label", choices=["auto", "Hostname", "hostname"])
        parser.add_argument("--scrape-interval", type=float, help="seconds (default: estimated)")
        parser.add_argument("--timeout", type=float, help="seconds per query (default 30)")
        parser.add_argument("--cluster", help="run this configured cluster's cycles instead")
        parser.add_argument("--cycles", type=int, default=1, help="with --cluster (0: forever)")
        parser.add_argument("--interval", type=float, default=60.0, help="with --cluster")
        parser.add_argument(
            "--json", action="store_true", help="with --cluster: one JSON object per cycle"
        )

    def handle(self, *args, **options):
        if options["cluster"]:
            self._cycles(options)
            return
        missing = [f"--{n}" for n in ("prometheus", "scheduler_snapshot", "out") if not options[n]]
        if missing:
            names = ", ".join(m.replace("_", "-") for m in missing)
            raise bad_input(f"{names} required (or --cluster NAME)")
        config = self._config(options)
        scheduler = self._scheduler(options["scheduler_snapshot"])
        as_of = self._as_of(options["as_of"])
        try:
            document = collect_document(config, scheduler, as_of=as_of, window_s=options["window"])
        except (CollectError, PromQLError) as exc:
            raise CommandError(str(exc)) from exc
        snapshot_format.load(document)  # what we write must load
        text = json.dumps(document, indent=1, allow_nan=False)
        if options["out"] == "-":
            sys.stdout.write(text + "\n")
        else:
            Path(options["out"]).write_text(text + "\n", encoding="utf-8")
        report = document["collection"]
        coverage = report["coverage"]
        self.stderr.write(
            f"collected {len(document['gpus'])} GPUs as of {document['as_of']}: coverage "
            f"{'n/a' if coverage is None else f'{coverage:.1%}'}, data age "
            f"{report['data_age_s']} s, {report['queries']} queries, {report['bytes']} bytes "
            f"({report['wire_bytes']} on the wire) in {report['seconds']:.2f} s"
        )
        for problem in report["problems"]:
            self.stderr.write(f"not judged: {problem}")
        for warning in report["warnings"]:
            self.stderr.write(f"Prometheus warned: {warning}")

    def _config(self, options) -> PrometheusConfig:
        raw: dict = {"url": options["prometheus"]}
        matchers = {}
        for text in options["match"]:
            name, sep, value = text.partition("=")
            if not sep:
                raise bad_input(f"--match: expected NAME=VALUE, got {text!r}")
            matchers[name] = value
        if matchers:
            raw["matchers"] = matchers
        for option, key in (
            ("host_label", "host_label"),
            ("scrape_interval", "scrape_interval_s"),
            ("timeout", "timeout_s"),
            ("window", "window_s"),
        ):
            if options[option] is not None:
                raw[key] = options[option]
        try:
            return PrometheusConfig.parse(raw, prefix="options")
        except CollectError as exc:
            raise bad_input(str(exc)) from exc

    @staticmethod
    def _scheduler(path: Path) -> dict:
        try:
            document = json.loads(path.read_bytes())
        except OSError as exc:
            raise bad_input(f"--scheduler-snapshot: cannot read {path}: {exc.strerror}") from None
        except ValueError as exc:
            raise bad_input(f"--scheduler-snapshot: {path} is not JSON: {exc}") from None
        errors = snapshot_format.validate(document)
        if errors:
            shown = "\n  ".join(errors[:20])
            raise bad_input(f"--scheduler-snapshot: {path} is not a valid snapshot:\n  {shown}")
        return document

    @staticmethod
    def _as_of(text: str | None) -> datetime:
        if not text:
            return datetime.now(UTC).replace(microsecond=0)
        moment = snapshot_format.parse_time(text)
        if moment is None:
            raise bad_input(f"--as-of: {text!r} is not an RFC 3339 time with a zone")
        return moment.to_pydatetime()

    def _cycles(self, options) -> None:

        cluster = cluster_named(options["cluster"])
        number = 0
        while options["cycles"] <= 0 or number < options["cycles"]:
            started = time.monotonic()
            number += 1
            cluster.refresh_from_db()
            cycle = run_cluster_cycle(cluster, shard_runner=run_collect_shards)
            if options["json"]:
                cluster.refresh_from_db(fields=["status", "status_message"])
                self.stdout.write(json.dumps(_cycle_json(number, cycle, cluster)))
            elif not cycle.ok:
                self.stdout.write(f"cycle {number}: FAILED: {cycle.error}")
            else:
                coverage = "n/a" if cycle.coverage is None else f"{cycle.coverage:.1%}"
                cluster.refresh_from_db(fields=["status", "status_message"])
                self.stdout.write(
                    f"cycle {number}: as of {cycle.as_of:%Y-%m-%d %H:%M:%S} UTC, {cycle.gpus} "
                    f"GPUs, coverage {coverage}, status {cluster.status}"
                    + (f" ({cluster.status_message})" if cluster.status_message else "")
                )
            self.stdout.flush()
            if options["cycles"] <= 0 or number < options["cycles"]:
                # idle time: the impact estimates deferred in the embedded mode (enqueue.py)
                run_deferred_impacts(until=started + options["interval"])
                time.sleep(max(0.0, options["interval"] - (time.monotonic() - started)))
        if not options["json"]:
            write_deferred_note(self.stdout)


def _cycle_json(number: int, cycle: Any, cluster: Cluster) -> dict[str, Any]:
    return {
        "cycle": number,
        "ok": cycle.ok,
        "as_of": cycle.as_of.isoformat() if cycle.as_of else None,
        "gpus": cycle.gpus,
        "coverage": cycle.coverage,
        "error": cycle.error or None,
        "status": cluster.status,
        "status_message": cluster.status_message or None,
    }
