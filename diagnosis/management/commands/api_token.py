"""``manage.py api_token``: hashed API tokens (diagnosis/models/tokens.py).

- ``create --user U --name N [--days 90] [--cluster C ... --kind K ...]`` prints a new token once
  (``--days 0``: no expiry). With ``--cluster`` and ``--kind`` (``topology``, ``events``,
  ``alerts``; each repeatable) the token may write those kinds to those clusters, and nothing
  else (docs/integrations.md#senders-are-scoped); a missing user is then made as a machine user
  (no password, no role);
- ``list`` shows each token's user, name, prefix, scope, expiry and last use (never the secret);
- ``revoke --prefix P [--user U]`` deletes the one token whose prefix (the 8 characters
  ``list`` shows) is P, of U when given; a prefix matching several tokens revokes none;
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

from diagnosis.choices import SenderKind
from diagnosis.models import ApiToken, Cluster


class Command(BaseCommand):
    help = "Create, list, revoke hashed API tokens, or migrate DRF's plain tokens to them."

    def add_arguments(self, parser) -> None:
        parser.add_argument("verb", choices=["create", "list", "revoke", "migrate-legacy"])
        parser.add_argument("--user")
        parser.add_argument("--name", default="api")
        parser.add_argument("--days", type=int, default=None)
        parser.add_argument("--prefix")
        parser.add_argument("--cluster", action="append", default=[], dest="clusters")
        parser.add_argument(
            "--kind", action="append", default=[], dest="kinds", choices=SenderKind.values
        )

    def handle(self, *args, verb: str, **options) -> None:
        getattr(self, verb.replace("-", "_"))(**options)

    @transaction.atomic
    def create(
        self,
        *,
        user: str | None,
        name: str,
        days: int | None,
        clusters: list[str],
        kinds: list[str],
        **_: object,
    ) -> None:
        if bool(clusters) != bool(kinds):
            raise CommandError("--cluster and --kind go together", returncode=2)
        targets = list(Cluster.objects.filter(name__in=clusters))
        unknown = sorted(set(clusters) - {c.name for c in targets})
        if unknown:
            raise CommandError(f"--cluster: no cluster {', '.join(unknown)}", returncode=2)
        users = get_user_model().objects
        owner = users.filter(username=user or "").first()
        if owner is None and kinds and user:
            owner = users.create_user(username=user, password=None)  # a machine: no password
        if owner is None:
            raise CommandError(f"--user: no user {user!r}", returncode=2)
        row, key = ApiToken.issue(owner, name, days=90 if days is None else days)
        if kinds:
            row.kinds = sorted(set(kinds))
            row.save(update_fields=["kinds"])
            row.clusters.set(targets)
        until = row.expires_at.isoformat() if row.expires_at else "never"
        scope = f", writes {'+'.join(row.kinds)} to {', '.join(sorted(clusters))}" if kinds else ""
        self.stdout.write(
            f"token for {owner} ({name}{scope}, expires {until}), shown only now: {key}"
        )

    def list(self, **_: object) -> None:
        for row in ApiToken.objects.select_related("user").prefetch_related("clusters"):
            clusters = ",".join(c.name for c in row.clusters.all())
            scope = f"writes {'+'.join(row.kinds)} to {clusters}" if row.kinds else "writes nothing"
            self.stdout.write(
                f"{row.user}\t{row.name}\t{row.prefix}…\t{scope}\t"
                f"expires {row.expires_at or 'never'}\tlast used {row.last_used_at or 'never'}"
            )

    def revoke(self, *, prefix: str | None, user: str | None, **_: object) -> None:
        if not prefix or len(prefix) != 8:
            raise CommandError(
                "--prefix: the token's 8-character prefix, as `api_token list` shows it",
                returncode=2,
            )
        rows = ApiToken.objects.filter(prefix=prefix)
        if user:
            rows = rows.filter(user__username=user)
        matched = list(rows)
        if len(matched) > 1:
            raise CommandError(
                f"--prefix {prefix} matches {len(matched)} tokens: name the owner with --user "
                "(none revoked)",
                returncode=2,
            )
        for row in matched:
            row.delete()
        self.stdout.write(f"revoked {len(matched)} token(s)")

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
