"""``manage.py api_token``: hashed API tokens (diagnosis/models/tokens.py).

- ``create --user U --name N [--days 90]`` prints a new token once (``--days 0``: no expiry);
- ``list`` shows each token's user, name, prefix, expiry and last use (never the secret);
- ``revoke --prefix P`` deletes the tokens whose secret starts with P;
- ``migrate-legacy`` moves DRF's plain tokens of existing clients into hashed rows (the same
  secret, so clients change nothing; no expiry unless ``--days``) and deletes the plain rows.
"""

from __future__ import annotations

from datetime import timedelta

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction
from django.utils import timezone
from rest_framework.authtoken.models import Token

from diagnosis.models import ApiToken


class Command(BaseCommand):
    help = "Create, list, revoke hashed API tokens, or migrate DRF's plain tokens to them."

    def add_arguments(self, parser) -> None:
        parser.add_argument("verb", choices=["create", "list", "revoke", "migrate-legacy"])
        parser.add_argument("--user")
        parser.add_argument("--name", default="api")
        parser.add_argument("--days", type=int, default=None)
        parser.add_argument("--prefix")

    def handle(self, *args, verb: str, **options) -> None:
        getattr(self, verb.replace("-", "_"))(**options)

    def create(self, *, user: str | None, name: str, days: int | None, **_: object) -> None:
        owner = get_user_model().objects.filter(username=user or "").first()
        if owner is None:
            raise CommandError(f"--user: no user {user!r}", returncode=2)
        row, key = ApiToken.issue(owner, name, days=90 if days is None else days)
        until = row.expires_at.isoformat() if row.expires_at else "never"
        self.stdout.write(f"token for {owner} ({name}, expires {until}), shown only now: {key}")

    def list(self, **_: object) -> None:
        for row in ApiToken.objects.select_related("user"):
            self.stdout.write(
                f"{row.user}\t{row.name}\t{row.prefix}…\t"
                f"expires {row.expires_at or 'never'}\tlast used {row.last_used_at or 'never'}"
            )

    def revoke(self, *, prefix: str | None, **_: object) -> None:
        if not prefix or len(prefix) < 4:
            raise CommandError("--prefix: at least 4 characters of the token", returncode=2)
        deleted, _ = ApiToken.objects.filter(prefix__startswith=prefix[:8]).delete()
        self.stdout.write(f"revoked {deleted} token(s)")

    @transaction.atomic
    def migrate_legacy(self, *, days: int | None, **_: object) -> None:
        moved = 0
        for legacy in Token.objects.select_related("user"):
            row, _key = ApiToken.issue(legacy.user, "migrated", days=None, key=legacy.key)
            if days:
                row.expires_at = timezone.now() + timedelta(days=days)
                row.save(update_fields=["expires_at"])
            legacy.delete()
            moved += 1
        self.stdout.write(f"moved {moved} plain token(s) to hashed tokens")
