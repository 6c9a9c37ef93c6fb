from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from diagnosis.core.rules.registry import all_rules
from diagnosis.rule_text import render_rule_catalog


class Command(BaseCommand):
    help = (
        "Write diagnosis/rule_catalog.py, the rules' titles and docs marked for translation "
        "(or, with --check, fail if it is stale)."
    )

    def add_arguments(self, parser):
        default = Path(settings.BASE_DIR) / "diagnosis" / "rule_catalog.py"
        parser.add_argument("--out", default=str(default))
        parser.add_argument(
            "--check", action="store_true", help="exit 1 if the file differs from the rules"
        )

    def handle(self, *args, out: str, check: bool, **options):
        text = render_rule_catalog(all_rules())
        path = Path(out)
        if check:
            current = path.read_text() if path.exists() else ""
            if current != text:
                raise CommandError(
                    f"{path} is stale: run `python manage.py rule_catalog`, then makemessages",
                    returncode=1,
                )
            self.stdout.write(f"{path} is up to date ({len(all_rules())} rules)")
            return
        path.write_text(text)
        self.stdout.write(f"wrote {path} ({len(all_rules())} rules)")
