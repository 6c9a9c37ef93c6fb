"""The named world of users, defined once: who alice, bob, carol, dave, erin, mallory, nobody are.

tests/conftest.py makes a fixture of each (``alice``, ``bob``, ...) and ``make_user`` for anyone
else; a module that wants the world once for all its tests (tests/app/pages/test_access_matrix.py)
calls :func:`create_person` itself. Every person's password is :data:`DEFAULT_PASSWORD`.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.contrib.auth.base_user import AbstractBaseUser
from django.contrib.auth.models import Group, Permission, User
from django.test import Client
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from diagnosis.models import ApiToken, Cluster

DEFAULT_PASSWORD = "correct horse battery staple"


@dataclass(frozen=True)
class Person:
    about: str
    roles: tuple[str, ...] = ()
    superuser: bool = False


WORLD = {
    "alice": Person("An administrator: staff and superuser.", superuser=True),
    "bob": Person("A plain viewer: can log in and read, nothing more.", roles=("viewer",)),
    "carol": Person(
        "An SRE: proposes, approves (others' requests) and applies recommendations.",
        roles=("sre",),
    ),
    "dave": Person("A second SRE, to approve what carol asked for.", roles=("sre",)),
    "erin": Person("On-call: incidents, and node drains (even her own).", roles=("oncall",)),
    "mallory": Person(
        "A manager: sees only the tenants she manages (none until a test gives her some).",
        roles=("manager",),
    ),
    "nobody": Person("Can log in but has no role: reads nothing."),
}


def create_user(
    username: str,
    *,
    staff: bool = False,
    superuser: bool = False,
    roles: tuple[str, ...] = (),
) -> User:
    user = User.objects.create_user(
        username=username,
        email=f"{username}@example.org",
        password=DEFAULT_PASSWORD,
        is_staff=staff or superuser,
        is_superuser=superuser,
    )
    for role in roles:
        # get_or_create: transactional tests flush the groups the migration made
        user.groups.add(Group.objects.get_or_create(name=role)[0])
    return user


def create_person(name: str) -> User:
    """One of the world, as :data:`WORLD` describes them."""
    person = WORLD[name]
    return create_user(name, superuser=person.superuser, roles=person.roles)


def logged_in_client(user: AbstractBaseUser) -> Client:
    client = Client()
    client.force_login(user)
    return client


def create_machine_user(username: str, permission: str | None = None) -> User:
    """A user for a machine (a scheduler, an uploader), with no role; with ``permission`` (a
    codename), that model permission, which grants a sender nothing by itself
    (:func:`sender_client` gives the scoped token that does)."""
    user = create_user(username)
    if permission is not None:
        user.user_permissions.add(Permission.objects.get(codename=permission))
    return user


def sender_token(user: User, kind: str, *clusters: Cluster) -> str:
    """The key of a new hashed token of ``user`` that may write ``kind`` (``topology``,
    ``events``, ``alerts``) to ``clusters``."""
    row, key = ApiToken.issue(user, f"{kind} sender", days=None)
    row.kinds = [kind]
    row.save(update_fields=["kinds"])
    row.clusters.set(clusters)
    return key


def sender_client(user: User, kind: str, *clusters: Cluster, keyword: str = "Token") -> APIClient:
    """An API client sending :func:`sender_token`'s key, as ``Authorization: <keyword> <key>``."""
    key = sender_token(user, kind, *clusters)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"{keyword} {key}")
    return client


def token_client(user: User | None, keyword: str = "Token") -> APIClient:
    """An API client sending ``user``'s token (made if it has none) as ``Authorization: <keyword>
    <key>``; without a user, anonymous."""
    client = APIClient()
    if user is not None:
        token, _ = Token.objects.get_or_create(user=user)
        client.credentials(HTTP_AUTHORIZATION=f"{keyword} {token.key}")
    return client
