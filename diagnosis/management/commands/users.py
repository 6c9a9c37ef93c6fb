"""``manage.py users``: people and their roles without the admin (docs/operations.md, "Users
and roles").

- ``add NAME --role sre [--role oncall] [--tenant T ...] [--email E] [--password-stdin]``;
- ``set-role NAME --role ... [--tenant T ...]``: the roles given replace those held;
- ``list [--json]``: each user's roles and managed tenants;
- ``remove NAME``;
- ``unlock NAME``: lift the name's login lockouts (every address) and its progressive delay
  (diagnosis/throttling.py).

Bad input or an unknown user, role or tenant is exit code 2, naming it. Without
``--password-stdin`` the account has no usable password: it logs in through single sign-on or
the auth proxy (or after ``changepassword``).
"""

from __future__ import annotations

import json
import sys
from typing import Any

from axes.utils import reset
from django.contrib.auth import get_user_model
from django.contrib.auth.password_validation import validate_password
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser

from diagnosis.actions.people.roles import (
    PeopleError,
    RoleGrant,
    add_user,
    check_grant,
    current_grant,
    get_person,
    parse_roles,
    remove_user,
    set_roles,
)
from diagnosis.roles import Role
from diagnosis.throttling import forget_login_failures


class Command(BaseCommand):
    help = "Add, list, remove users and set their roles (viewer, sre, oncall, manager, admin)."

    def add_arguments(self, parser: CommandParser) -> None:
        verbs = parser.add_subparsers(dest="verb", required=True)
        for verb in ("add", "set-role"):
            sub = verbs.add_parser(verb)
            sub.add_argument("name")
            sub.add_argument(
                "--role",
                action="append",
                required=True,
                help=f"one of {', '.join(Role)}; repeat for several",
            )
            sub.add_argument("--tenant", action="append", default=[], help="a manager's tenant")
            if verb == "add":
                sub.add_argument("--email", default="")
                sub.add_argument("--password-stdin", action="store_true")
        verbs.add_parser("list").add_argument("--json", action="store_true", dest="as_json")
        verbs.add_parser("remove").add_argument("name")
        verbs.add_parser("unlock").add_argument("name")

    def handle(self, *args: Any, verb: str, **options: Any) -> None:
        try:
            getattr(self, verb.replace("-", "_"))(**options)
        except PeopleError as exc:
            raise CommandError(str(exc), returncode=2) from None

    @staticmethod
    def _grant(role: list[str], tenant: list[str]) -> RoleGrant:
        return RoleGrant(parse_roles(role), frozenset(tenant))

    def add(self, *, name: str, role: list[str], tenant: list[str], **options: Any) -> None:
        grant = self._grant(role, tenant)
        password = None
        if options["password_stdin"]:
            password = sys.stdin.readline().rstrip("\n")
            try:
                validate_password(password, get_user_model()(username=name))
            except ValidationError as exc:
                raise PeopleError("the password is refused: " + " ".join(exc.messages)) from None
        user = add_user(name, grant, email=options["email"], password=password)
        self.stdout.write(f"added {user.get_username()}: {grant.describe()}")

    def set_role(self, *, name: str, role: list[str], tenant: list[str], **_: Any) -> None:
        user = get_person(name)
        grant = self._grant(role, tenant)
        check_grant(grant)
        changed = set_roles(user, grant)
        self.stdout.write(f"{name}: {grant.describe()}" + ("" if changed else " (unchanged)"))

    def list(self, *, as_json: bool, **_: Any) -> None:
        rows = [
            {
                "name": user.get_username(),
                "roles": sorted(grant.roles),
                "tenants": sorted(grant.tenants),
                "superuser": user.is_superuser,
                "active": user.is_active,
                "password": user.has_usable_password(),
            }
            for user in get_user_model().objects.order_by("username")
            for grant in [current_grant(user)]
        ]
        if as_json:
            self.stdout.write(json.dumps(rows, indent=2))
            return
        for row in rows:
            tenants = f" (tenants: {', '.join(row['tenants'])})" if row["tenants"] else ""
            extra = " superuser" if row["superuser"] else ""
            self.stdout.write(f"{row['name']}\t{', '.join(row['roles']) or '-'}{tenants}{extra}")

    def remove(self, *, name: str, **_: Any) -> None:
        remove_user(name)
        self.stdout.write(f"removed {name}")

    def unlock(self, *, name: str, **_: Any) -> None:
        """Lift the name's login lockouts (every address) and its progressive delay."""
        locks = reset(username=name)
        forget_login_failures(name)
        self.stdout.write(f"unlocked {name} ({locks} lockout record(s) removed, delay cleared)")
