"""``manage.py report fairness --cluster NAME [--from T --to T | --period 24h|7d|30d]
--format json|csv|pdf [--out FILE] [--user NAME]``: the tenant fairness report of a cluster
(docs/fairness.md), the same numbers as its page, API and downloads.

Without ``--user`` the report covers every tenant (the command runs with the server's own
rights); with it, exactly what that user may see (a manager: their tenants). Exit 2 on a bad
option (the message names it), 1 when the cluster or user does not exist.
"""

from __future__ import annotations

import json
import sys

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.http import Http404

from diagnosis.access import get_cluster_for_user
from diagnosis.management.cli import bad_input
from diagnosis.reports.csv_export import render_csv
from diagnosis.reports.fairness_report import build_fairness_report, default_end
from diagnosis.reports.pdf import render_pdf
from diagnosis.reports.period import PRESETS, PeriodError, ReportPeriod
from diagnosis.roles import Role


def system_reader():
    """An unsaved admin standing for the command itself (it has the server's rights anyway):
    ``diagnosis.roles.roles_of`` reads its cached roles, so it needs no group rows."""
    reader = get_user_model()(username="system:report", is_active=True, is_superuser=True)
    reader._gpuobs_roles = frozenset({Role.ADMIN})
    return reader


class Command(BaseCommand):
    help = "Write a cluster's tenant fairness report as JSON, CSV or PDF."

    def add_arguments(self, parser):
        parser.add_argument("kind", choices=["fairness"], help="the report (fairness)")
        parser.add_argument("--cluster", required=True, help="cluster name")
        parser.add_argument("--from", dest="start", help="start, ISO 8601 (e.g. 2026-11-01)")
        parser.add_argument("--to", dest="end", help="end, ISO 8601 (e.g. 2026-11-08T00:00Z)")
        parser.add_argument(
            "--period", choices=sorted(PRESETS), help="a preset ending now (default 24h)"
        )
        parser.add_argument("--format", choices=["json", "csv", "pdf"], default="json")
        parser.add_argument("--out", help="file to write (default: standard output)")
        parser.add_argument("--user", help="report as this user may see it (e.g. a manager)")
        parser.add_argument(
            "--tenant", action="append", default=[], help="only this tenant (repeatable)"
        )

    def handle(self, *args, **options):
        reader = system_reader()
        if options["user"]:
            reader = get_user_model().objects.filter(username=options["user"]).first()
            if reader is None:
                raise bad_input(f"--user: no user {options['user']!r}")
        try:
            cluster = get_cluster_for_user(reader, options["cluster"])
        except Http404:
            raise bad_input(f"--cluster: no cluster {options['cluster']!r}") from None
        query = {"from": options["start"] or "", "to": options["end"] or ""}
        query["period"] = options["period"] or ""
        try:
            period = ReportPeriod.parse(query, default_end=default_end(cluster))
        except PeriodError as error:
            raise CommandError(f"--{error}", returncode=2) from None
        try:
            data = build_fairness_report(reader, cluster, period, tenants=options["tenant"])
        except Http404:
            raise CommandError("--tenant: no such tenant (or not visible)", returncode=2) from None
        if options["format"] == "pdf":
            payload: bytes | str = render_pdf(data)
        elif options["format"] == "csv":
            payload = render_csv(data)
        else:
            payload = json.dumps(data.as_dict(), indent=2) + "\n"
        self._write(payload, options["out"])

    def _write(self, payload: bytes | str, path: str | None) -> None:
        if path:
            mode = "wb" if isinstance(payload, bytes) else "w"
            with open(path, mode, **({} if mode == "wb" else {"encoding": "utf-8"})) as out:
                out.write(payload)
            self.stderr.write(f"wrote {path}")
        elif isinstance(payload, bytes):
            sys.stdout.buffer.write(payload)
            sys.stdout.buffer.flush()
        else:
            self.stdout.write(payload, ending="")
