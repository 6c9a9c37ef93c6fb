from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from diagnosis.core.rules.docs import render_rules_markdown
from diagnosis.core.rules.registry import all_rules


class Command(BaseCommand):
    help = "Write docs/rules.md from the rule modules (or, with --check, fail if it is stale)."

    def add_arguments(self, parser):
        parser.add_argument("--out", default=str(Path(settings.BASE_DIR) / "docs" / "rules.md"))
        parser.add_argument(
            "--check", action="store_true", help="exit 1 if the file differs from the rules"
        )

    def handle(self, *args, out: str, check: bool, **options):
        text = render_rules_markdown(all_rules())
        path = Path(out)
        if check:
            current = path.read_text() if path.exists() else ""
            if current != text:
                raise CommandError(
                    f"{path} is stale: run `python manage.py rules_doc`", returncode=1
                )
            self.stdout.write(f"{path} is up to date ({len(all_rules())} rules)")
            return
        path.write_text(text)
        self.stdout.write(f"wrote {path} ({len(all_rules())} rules)")
