"""Shared fixtures: the named world of users, builders, real services, and `require_binary`.

The world: ``alice`` is staff and superuser (an admin), ``bob`` a viewer, ``carol`` and ``dave``
SREs, ``erin`` on-call, ``mallory`` a manager (of no tenant until a test says so), ``nobody`` a
user with no role. Build more with
``make_user``; build clusters with ``make_cluster``. Tests run against real PostgreSQL
(DATABASE_URL) and real Redis (REDIS_URL, db 15); ``make test`` sets both.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.contrib.auth.models import User
from django.test import Client, override_settings

REPO_ROOT = Path(__file__).resolve().parent.parent
pytest_plugins = ["tests.support.prometheus_fixtures"]
DEFAULT_PASSWORD = "correct horse battery staple"


def running_in_ci() -> bool:
    return os.environ.get("CI", "").lower() in {"1", "true", "yes"}


def require_binary(name: str, install_hint: str) -> str:
    """The path of a program the test needs; without it, fail under CI=true and skip elsewhere.

    ``install_hint`` is the command that installs it, e.g. ``apt-get install prometheus``; add the
    package to APT_PACKAGES in .ci/run so CI has it.
    """
    path = shutil.which(name)
    if path:
        return path
    message = f"{name} is not installed; install it with: {install_hint}"
    if running_in_ci():
        pytest.fail(message, pytrace=False)
    pytest.skip(message)


@pytest.fixture(scope="session")
def django_db_modify_db_settings(django_db_modify_db_settings_parallel_suffix: None) -> None:
    """Refuse to run database tests on anything but PostgreSQL, the production database."""
    engine = settings.DATABASES["default"]["ENGINE"]
    if engine != "django.db.backends.postgresql":
        pytest.fail(
            f"tests need PostgreSQL, not {engine}: run `make test`, or set "
            "DATABASE_URL=postgres://postgres@127.0.0.1:5432/test",
            pytrace=False,
        )


@pytest.fixture(autouse=True, scope="session")
def _fast_password_hashing() -> Iterator[None]:
    """Production's hasher takes most of a second per password on purpose; tests need speed."""
    with override_settings(PASSWORD_HASHERS=["django.contrib.auth.hashers.MD5PasswordHasher"]):
        yield


@pytest.fixture
def redis_url() -> str:
    """The tests' Redis (db 15); a test that needs it fails under CI and skips elsewhere."""
    if not settings.REDIS_URL:
        message = "REDIS_URL is not set: run `make test` (it uses redis://127.0.0.1:6379/15)"
        if running_in_ci():
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    return settings.REDIS_URL


@pytest.fixture
def celery_eager() -> Iterator[None]:
    """Run tasks in-process for one test, as the embedded mode does."""
    from gpuobs import celery_app

    saved = celery_app.conf.task_always_eager, celery_app.conf.task_eager_propagates
    celery_app.conf.task_always_eager = True
    celery_app.conf.task_eager_propagates = True
    try:
        yield
    finally:
        celery_app.conf.task_always_eager, celery_app.conf.task_eager_propagates = saved


@pytest.fixture
def make_user(db: None) -> Callable[..., User]:
    from django.contrib.auth.models import Group

    def build(
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

    return build


@pytest.fixture
def alice(make_user: Callable[..., User]) -> User:
    """An administrator: staff and superuser."""
    return make_user("alice", superuser=True)


@pytest.fixture
def bob(make_user: Callable[..., User]) -> User:
    """A plain viewer: can log in and read, nothing more."""
    return make_user("bob", roles=("viewer",))


@pytest.fixture
def carol(make_user: Callable[..., User]) -> User:
    """An SRE: proposes, approves (others' requests) and applies recommendations."""
    return make_user("carol", roles=("sre",))


@pytest.fixture
def dave(make_user: Callable[..., User]) -> User:
    """A second SRE, to approve what carol asked for."""
    return make_user("dave", roles=("sre",))


@pytest.fixture
def erin(make_user: Callable[..., User]) -> User:
    """On-call: incidents, and node drains (even her own)."""
    return make_user("erin", roles=("oncall",))


@pytest.fixture
def mallory(make_user: Callable[..., User]) -> User:
    """A manager: sees only the tenants she manages (none until a test gives her some)."""
    return make_user("mallory", roles=("manager",))


@pytest.fixture
def nobody(make_user: Callable[..., User]) -> User:
    """Can log in but has no role: reads nothing."""
    return make_user("nobody")


def logged_in_client(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def alice_client(alice: User) -> Client:
    return logged_in_client(alice)


@pytest.fixture
def bob_client(bob: User) -> Client:
    return logged_in_client(bob)


@pytest.fixture
def make_cluster(db: None) -> Callable[..., Any]:
    from diagnosis.models import Cluster

    def build(name: str = "demo", **fields: Any) -> Cluster:
        return Cluster.objects.create(name=name, **fields)

    return build
