"""A person's roles and a manager's tenants, written in one place (docs/operations.md, "Users and
roles").

The roles given replace the roles held: a role left out is taken away (a single sign-on login
re-syncs a person's roles from the IdP's groups each time, so a group removed there removes the
role here). Groups that are no role are left alone. A manager's tenants are names: the tenants
of that name on every cluster (a tenant present on several clusters is one tenant to its
manager). The admin role opens ``/admin/`` too (``is_staff``); a superuser stays one.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass

from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractUser, Group
from django.db import transaction

from diagnosis.models import Tenant
from diagnosis.roles import Role

logger = logging.getLogger(__name__)


class PeopleError(ValueError):
    """Input that names no role, no tenant or no user, or contradicts itself (the message says
    which)."""


@dataclass(frozen=True)
class RoleGrant:
    """The roles a person should hold, and for a manager the names of their tenants."""

    roles: frozenset[Role]
    tenants: frozenset[str] = frozenset()

    def describe(self) -> str:
        roles = ", ".join(sorted(self.roles)) or "no role"
        return f"{roles} (tenants: {', '.join(sorted(self.tenants))})" if self.tenants else roles


def parse_roles(names: Iterable[str]) -> frozenset[Role]:
    """The roles named, or :class:`PeopleError` naming the unknown one."""
    roles = set()
    for name in names:
        try:
            roles.add(Role(name.strip()))
        except ValueError:
            known = ", ".join(role.value for role in Role)
            raise PeopleError(f"no role {name!r} (roles: {known})") from None
    return frozenset(roles)


def unknown_tenants(names: Iterable[str]) -> list[str]:
    """The tenant names no cluster has (yet: tenants appear with a cluster's first cycles)."""
    wanted = set(names)
    known = set(Tenant.objects.filter(name__in=wanted).values_list("name", flat=True))
    return sorted(wanted - known)


def check_grant(grant: RoleGrant) -> None:
    """Refuse tenants without the manager role, and tenants no cluster has."""
    if grant.tenants and Role.MANAGER not in grant.roles:
        raise PeopleError("tenants are given to the manager role only")
    missing = unknown_tenants(grant.tenants)
    if missing:
        raise PeopleError(f"no tenant {', '.join(map(repr, missing))} on any cluster")


def role_groups(roles: Iterable[Role]) -> list[Group]:
    # get_or_create: the groups come from migration 0007, but a flushed test database lacks them
    return [Group.objects.get_or_create(name=role.value)[0] for role in sorted(roles)]


@transaction.atomic
def set_roles(user: AbstractUser, grant: RoleGrant) -> bool:
    """Give ``user`` exactly the roles and tenants of ``grant``; whether anything changed.
    Tenant names no cluster has are skipped (a later login or ``set-role`` adds them)."""
    before = current_grant(user)
    others = user.groups.exclude(name__in=[role.value for role in Role])
    user.groups.set([*others, *role_groups(grant.roles)])
    tenants = grant.tenants if Role.MANAGER in grant.roles else frozenset()
    user.managed_tenants.set(Tenant.objects.filter(name__in=tenants))
    staff = user.is_superuser or Role.ADMIN in grant.roles
    if user.is_staff != staff:
        user.is_staff = staff
        user.save(update_fields=["is_staff"])
    if hasattr(user, "_gpuobs_roles"):
        del user._gpuobs_roles  # roles_of caches per request
    after = current_grant(user)
    if after != before:
        logger.info(
            "roles of %s: %s (were %s)", user.get_username(), after.describe(), before.describe()
        )
    return after != before


def current_grant(user: AbstractUser) -> RoleGrant:
    """The roles (groups) and managed tenant names ``user`` holds now."""
    roles = parse_roles(
        user.groups.filter(name__in=[role.value for role in Role]).values_list("name", flat=True)
    )
    tenants = frozenset(user.managed_tenants.values_list("name", flat=True))
    return RoleGrant(roles, tenants)


@transaction.atomic
def add_user(
    username: str, grant: RoleGrant, *, email: str = "", password: str | None = None
) -> AbstractUser:
    """A new person with ``grant`` (checked first). Without a password the account has an
    unusable one: it logs in through single sign-on or the auth proxy, or after
    ``changepassword``."""
    check_grant(grant)
    users = get_user_model()
    if users.objects.filter(username=username).exists():
        raise PeopleError(f"user {username!r} exists (change its role with set-role)")
    user = users.objects.create_user(username=username, email=email, password=password)
    set_roles(user, grant)
    return user


def get_person(username: str) -> AbstractUser:
    """The user called ``username``, or :class:`PeopleError`."""
    try:
        return get_user_model().objects.get(username=username)
    except get_user_model().DoesNotExist:
        raise PeopleError(f"no user {username!r}") from None


@transaction.atomic
def remove_user(username: str) -> None:
    """Delete a person (their audit rows keep the name they acted under)."""
    get_person(username).delete()
