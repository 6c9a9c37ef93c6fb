"""The IdP's groups → gpuobs roles (``GPUOBS_ROLE_MAP``; docs/operations.md, "Single sign-on").

The map is a comma-separated list of ``GROUP=ROLE`` entries; a manager's entry names its tenants
after a colon, ``+``-separated: ``gpu-admins=admin,gpu-sre=sre,nlp-leads=manager:nlp+pretrain``.
A group may appear in several entries; a person gets the union of their groups' roles and
tenants, and a group that is in no entry gives nothing.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from diagnosis.actions.people.roles import PeopleError, RoleGrant, parse_roles
from diagnosis.roles import Role


@dataclass(frozen=True)
class RoleMapEntry:
    group: str
    role: Role
    tenants: frozenset[str] = frozenset()


def parse_role_map(text: str) -> tuple[RoleMapEntry, ...]:
    """The entries of a ``GPUOBS_ROLE_MAP`` value, or :class:`PeopleError` naming the bad one."""
    entries = []
    for raw in (item.strip() for item in text.split(",")):
        if not raw:
            continue
        group, sep, target = raw.partition("=")
        role_name, _, tenant_list = target.partition(":")
        if not sep or not group.strip() or not role_name.strip():
            raise PeopleError(f"GPUOBS_ROLE_MAP entry {raw!r}: expected GROUP=ROLE[:TENANT+...]")
        (role,) = parse_roles([role_name])
        tenants = frozenset(t.strip() for t in tenant_list.split("+") if t.strip())
        if tenants and role is not Role.MANAGER:
            raise PeopleError(f"GPUOBS_ROLE_MAP entry {raw!r}: only a manager has tenants")
        entries.append(RoleMapEntry(group.strip(), role, tenants))
    return tuple(entries)


def grant_for_groups(entries: Iterable[RoleMapEntry], groups: Iterable[str]) -> RoleGrant:
    """The roles and tenants a person in ``groups`` gets."""
    mine = set(groups)
    matched = [entry for entry in entries if entry.group in mine]
    return RoleGrant(
        roles=frozenset(entry.role for entry in matched),
        tenants=frozenset(t for entry in matched for t in entry.tenants),
    )
