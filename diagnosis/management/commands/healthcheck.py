"""``manage.py healthcheck [worker|beat|all]``: exit 0 when the part is alive, 1 when not (the
same heartbeats as ``/healthz?deep=1``; docker-compose's worker and beat health checks)."""

from __future__ import annotations

import json

from django.core.management.base import BaseCommand, CommandError

from diagnosis.actions.upkeep.health import COMPONENTS, deep_health


class Command(BaseCommand):
    help = (
        "Check gpuobs's worker or beat heartbeat (or everything: database, Redis, worker, beat) "
        "and exit 1 when it is missing or stale, printing why."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("part", nargs="?", default="all", choices=[*COMPONENTS, "all"])

    def handle(self, *args, part: str, **options) -> None:
        ok, report = deep_health(show_hosts=True)  # the operator's own shell
        shown = report if part == "all" else {part: report[part]}
        self.stdout.write(json.dumps(shown, indent=2))
        healthy = ok if part == "all" else report[part]["status"] == "ok"
        if not healthy:
            raise CommandError(f"gpuobs {part}: not healthy")
