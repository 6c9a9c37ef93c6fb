"""``manage.py api_token``: hashed API tokens (diagnosis/models/tokens.py).

- ``create --user U --name N [--days 90] [--cluster C ... --kind K ...]`` prints a new token once
  (``--days 0``: no expiry). With ``--cluster`` and ``--kind`` (``topology``, ``events``,
  ``alerts``; each repeatable) the token may write those kinds to those clusters, and nothing
  else (docs/integrations.md#senders-are-scoped); a missing user is then made as a machine user
  (no password, no role);
- ``list [--json]`` shows each token's user, name, prefix, scope, expiry and last use (never the
  secret);
- ``revoke --prefix P [--user U]`` deletes the one token whose prefix (the 8 characters
  ``list`` shows) is P, of U when given; a prefix matching several tokens revokes none;
- ``scope --prefix P [--user U] --cluster C ... --kind K ...`` gives an existing token (one
  ``migrate-legacy`` moved, which a sender already holds) its clusters and kinds;
- ``migrate-legacy`` moves DRF's plain tokens of existing clients into hashed rows (the same
  secret, so clients change nothing; no expiry unless ``--days``) and deletes the plain rows.
"""

from __future__ import annotations

import json
from datetime import timedelta

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction
from django.utils import timezone
from rest_framework.authtoken.models import Token

from diagnosis.choices import SenderKind
from diagnosis.models import ApiToken, Cluster


class Command(BaseCommand):
    help = "Create, list, revoke, scope hashed API tokens, or migrate DRF's plain tokens to them."

    def add_arguments(self, parser) -> None:
        parser.add_argument("verb", choices=["create", "list", "revoke", "scope", "migrate-legacy"])
        parser.add_argument("--user")
        parser.add_argument("--name", default="api")
        parser.add_argument("--days", type=int, default=None)
        parser.add_argument("--prefix")
        parser.add_argument(
            "--json", action="store_true", dest="as_json", help="list: one JSON array"
        )
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
        targets = _scope_targets(clusters, kinds)
        users = get_user_model().objects
        owner = users.filter(username=user or "").first()
        if owner is None and kinds and user:
            owner = users.create_user(username=user, password=None)  # a machine: no password
        if owner is None:
            raise CommandError(f"--user: no user {user!r}", returncode=2)
        row, key = ApiToken.issue(owner, name, days=90 if days is None else days)
        if kinds:
            _set_scope(row, targets, kinds)
        until = row.expires_at.isoformat() if row.expires_at else "never"
        what = f"{name}, {_scope_text(row)}, expires {until}"
        self.stdout.write(f"token for {owner} ({what}), shown only now: {key}")

    def list(self, *, as_json: bool = False, **_: object) -> None:
        rows = ApiToken.objects.select_related("user").prefetch_related("clusters")
        if as_json:
            self.stdout.write(json.dumps([_token_json(row) for row in rows]))
            return
        for row in rows:
            self.stdout.write(
                f"{row.user}\t{row.name}\t{row.prefix}…\t{_scope_text(row)}\t"
                f"expires {row.expires_at or 'never'}\tlast used {row.last_used_at or 'never'}"
            )

    def revoke(self, *, prefix: str | None, user: str | None, **_: object) -> None:
        row = _one_token(prefix, user, doing="revoked")
        if row is not None:
            row.delete()
        self.stdout.write(f"revoked {0 if row is None else 1} token(s)")

    @transaction.atomic
    def scope(
        self,
        *,
        prefix: str | None,
        user: str | None,
        clusters: list[str],
        kinds: list[str],
        **_: object,
    ) -> None:
        """Give an existing token (a migrated one a sender already holds) its clusters and
        kinds, replacing what it had; without --cluster/--kind it writes nothing again."""
        targets = _scope_targets(clusters, kinds)
        row = _one_token(prefix, user, doing="changed")
        if row is None:
            raise CommandError(f"--prefix {prefix}: no such token", returncode=2)
        _set_scope(row, targets, kinds)
        self.stdout.write(f"token {row.prefix}… of {row.user}: {_scope_text(row)}")

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


def _scope_targets(clusters: list[str], kinds: list[str]) -> list[Cluster]:
    """The clusters ``--cluster`` names (each must exist; it goes with ``--kind``)."""
    if bool(clusters) != bool(kinds):
        raise CommandError("--cluster and --kind go together", returncode=2)
    targets = list(Cluster.objects.filter(name__in=clusters))
    unknown = sorted(set(clusters) - {c.name for c in targets})
    if unknown:
        raise CommandError(f"--cluster: no cluster {', '.join(unknown)}", returncode=2)
    return targets


def _set_scope(row: ApiToken, clusters: list[Cluster], kinds: list[str]) -> None:
    row.kinds = sorted(set(kinds))
    row.save(update_fields=["kinds"])
    row.clusters.set(clusters)


def _scope_text(row: ApiToken) -> str:
    if not row.kinds:
        return "writes nothing"
    clusters = ",".join(sorted(c.name for c in row.clusters.all()))
    return f"writes {'+'.join(row.kinds)} to {clusters or 'no cluster'}"


def _one_token(prefix: str | None, user: str | None, *, doing: str) -> ApiToken | None:
    """The one token of that 8-character prefix (of ``user`` when given), or None; several
    matching is an error, and nothing is ``doing``."""
    if not prefix or len(prefix) != 8:
        raise CommandError(
            "--prefix: the token's 8-character prefix, as `api_token list` shows it",
            returncode=2,
        )
    rows = ApiToken.objects.filter(prefix=prefix)
    if user:
        rows = rows.filter(user__username=user)
    matched = list(rows[:2])
    if len(matched) > 1:
        raise CommandError(
            f"--prefix {prefix} matches several tokens: name the owner with --user (none {doing})",
            returncode=2,
        )
    return matched[0] if matched else None


def _token_json(row: ApiToken) -> dict[str, object]:
    return {
        "user": row.user.get_username(),
        "name": row.name,
        "prefix": row.prefix,
        "clusters": sorted(c.name for c in row.clusters.all()),
        "kinds": list(row.kinds or []),
        "expires_at": row.expires_at.isoformat() if row.expires_at else None,
        "last_used_at": row.last_used_at.isoformat() if row.last_used_at else None,
    }
