from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from diagnosis.core.rules.registry import all_rules
from diagnosis.rule_text import render_rule_catalog, render_xid_catalog


class Command(BaseCommand):
    help = (
        "Write diagnosis/rule_catalog.py, the rules' titles and docs marked for translation, "
        "and diagnosis/xid_text.py, the Xid catalog's meanings and actions (or, with --check, "
        "fail if either is stale)."
    )

    def add_arguments(self, parser):
        default = Path(settings.BASE_DIR) / "diagnosis" / "rule_catalog.py"
        parser.add_argument("--out", default=str(default))
        parser.add_argument(
            "--check", action="store_true", help="exit 1 if the file differs from the rules"
        )

    def handle(self, *args, out: str, check: bool, **options):
        path = Path(out)
        catalogs = [
            (path, render_rule_catalog(all_rules())),
            (path.with_name("xid_text.py"), render_xid_catalog()),
        ]
        for target, text in catalogs:
            if check:
                current = target.read_text() if target.exists() else ""
                if current != text:
                    raise CommandError(
                        f"{target} is stale: run `python manage.py rule_catalog`, then "
                        "makemessages",
                        returncode=1,
                    )
                self.stdout.write(f"{target} is up to date")
                continue
            target.write_text(text)
            self.stdout.write(f"wrote {target}")
