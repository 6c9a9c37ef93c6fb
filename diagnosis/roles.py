"""Roles (docs/architecture.md#roles-and-security) as Django groups, and the questions access checks
ask of them.

- ``viewer``: reads everything of every cluster.
- ``sre``: findings and recommendations: propose, approve (someone else's), apply.
- ``oncall``: incidents: acknowledge, resolve; may approve and apply a node drain, even their own
  (the one write one person may make alone).
- ``manager``: reads the fairness reports, jobs and findings of their own tenants only
  (``Tenant.managers``).
- ``admin``: everything, including data sources, thresholds, users and the write switch --
  but an admin's own request, like anyone's, is approved by someone else. Superusers are admins.

A user in no group reads nothing. A user who is only a ``manager`` is tenant-scoped; any other
role lifts the scope.
"""

from __future__ import annotations

from enum import StrEnum

from django.contrib.auth.base_user import AbstractBaseUser
from django.contrib.auth.models import AnonymousUser

User = AbstractBaseUser | AnonymousUser


class Role(StrEnum):
    VIEWER = "viewer"
    SRE = "sre"
    ONCALL = "oncall"
    MANAGER = "manager"
    ADMIN = "admin"


def roles_of(user: User) -> frozenset[Role]:
    """The user's roles (cached on the user object for the request)."""
    if not user.is_authenticated or not user.is_active:
        return frozenset()
    cached = getattr(user, "_gpuobs_roles", None)
    if cached is None:
        names = set(user.groups.values_list("name", flat=True))
        cached = frozenset(role for role in Role if role.value in names)
        if user.is_superuser:
            cached = cached | {Role.ADMIN}
        user._gpuobs_roles = cached
    return cached


def has_role(user: User, *roles: Role) -> bool:
    """Whether the user has any of ``roles`` (admins have every role)."""
    mine = roles_of(user)
    return Role.ADMIN in mine or any(role in mine for role in roles)


def is_tenant_scoped(user: User) -> bool:
    """A manager and nothing more: sees only their own tenants' rows."""
    mine = roles_of(user)
    return Role.MANAGER in mine and not (mine & {Role.VIEWER, Role.SRE, Role.ONCALL, Role.ADMIN})


def can_read(user: User) -> bool:
    return bool(roles_of(user))


def can_propose(user: User) -> bool:
    return has_role(user, Role.SRE)


def can_approve(
    user: User, kind: str, requested_by: User | None, *, rollback: bool = False
) -> tuple[bool, str]:
    """Whether the user may approve a recommendation of ``kind``, and why not.

    An SRE may approve any kind, but never a change they asked for themselves -- admins
    included (docs/recommendations.md#workflow: two people for every write). The one exception is an
    on-call drain: a member of the ``oncall`` group may approve a ``drain-node`` they asked for (it
    cannot wait
    for a second person). Putting a drained node back (the rollback of a drain) is no drain: it
    needs a second person like any other change.
    """
    oncall_drain = kind == "drain-node" and not rollback and has_role(user, Role.ONCALL)
    if not (has_role(user, Role.SRE) or oncall_drain):
        return False, "approving needs the sre role (or oncall, for a node drain)"
    own_drain_exempt = oncall_drain and Role.ONCALL in roles_of(user)
    if requested_by is not None and requested_by.pk == user.pk and not own_drain_exempt:
        return False, "a change must be approved by someone other than the person who asked"
    return True, ""


def can_apply(user: User, kind: str) -> bool:
    return has_role(user, Role.SRE) or (kind == "drain-node" and has_role(user, Role.ONCALL))


def can_handle_incidents(user: User) -> bool:
    return has_role(user, Role.ONCALL, Role.SRE)


def can_read_failure_cause(user: User) -> bool:
    """The whole error of a failed collection (host, port, the remote's answer): for those who
    run the integrations, SREs and admins; others read which integration failed and how."""
    return has_role(user, Role.SRE)


def can_administer(user: User) -> bool:
    """Data sources, thresholds, users and the per-cluster write switch."""
    return Role.ADMIN in roles_of(user)


def can_write_policy(user: User) -> bool:
    """Write or edit a remediation policy (docs/autopilot.md): an SRE. On-call's exemption for
    a drain does not reach policies: a standing approval always needs two people."""
    return has_role(user, Role.SRE)


def can_approve_policy(user: User, written_by: User | None) -> tuple[bool, str]:
    """Whether the user may approve a policy version written by ``written_by``, and why not."""
    if not has_role(user, Role.SRE):
        return False, "approving a policy needs the sre role"
    if written_by is not None and written_by.pk == user.pk:
        return False, "a policy must be approved by someone other than the person who wrote it"
    return True, ""


def can_stop_autopilot(user: User) -> bool:
    """The kill switch that stops every policy at once: admins only."""
    return can_administer(user)
