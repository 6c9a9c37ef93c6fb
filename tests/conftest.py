"""Shared fixtures: the named world of users, builders, real services, and `require_binary`.

The world (tests/support/world.py says who each is): ``alice`` is staff and superuser (an admin),
``bob`` a viewer, ``carol`` and ``dave`` SREs, ``erin`` on-call, ``mallory`` a manager (of no
tenant until a test says so), ``nobody`` a user with no role. Build more with ``make_user``; build
clusters with ``make_cluster``, and the simulated ``lab`` cluster with the fixture of that name.
Tests run against real PostgreSQL (DATABASE_URL) and real Redis (REDIS_URL, db 15); ``make test``
sets both.
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
from django.core.cache import caches
from django.test import Client, override_settings
from django.utils import translation

from diagnosis.actions.workflow.review import approve_recommendation, request_recommendation
from diagnosis.edge.sim import runtime as sim_runtime
from diagnosis.models import Cluster, Recommendation
from diagnosis.pages.support import page_cache
from gpuobs import celery_app
from tests.support.records import make_recommendation
from tests.support.world import create_person, create_user, logged_in_client

REPO_ROOT = Path(__file__).resolve().parent.parent
# Real data nobody here wrote (CRDs, dcgm-exporter and nvidia-smi output, the Xid catalogue, the
# OpenB trace): beside the checkout, or where GPUOBS_SHARED_DATA says (README.md, "make test")
SHARED_DATA = Path(os.environ.get("GPUOBS_SHARED_DATA") or REPO_ROOT.parent / "shared" / "data")
pytest_plugins = ["tests.support.prometheus_fixtures"]
LAB_CONFIG = {"scenario": "small", "seed": 1, "clock": "step", "step_s": 900}


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "lab(name='lab', **fields): the name and cluster fields of the module's `lab` fixture",
    )


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
def _page_cache_in_memory() -> Iterator[None]:
    """The pages' cache in the test process's memory: under ``make test`` it would be Redis db
    15, and emptying it for each test (FLUSHDB) would drop what other tests' workers keep there
    (tests/app/pages/test_page_cache.py checks it against the real Redis on its own keys)."""
    in_memory = {"BACKEND": "django.core.cache.backends.locmem.LocMemCache", "LOCATION": "pages"}
    with override_settings(CACHES={**settings.CACHES, page_cache.CACHE: in_memory}):
        yield


@pytest.fixture(autouse=True)
def _empty_page_cache(_page_cache_in_memory: None) -> None:
    """Each test starts without rendered page fragments: a module's shared cluster (same name,
    same newest cycle) would otherwise be served from an earlier test's cache."""
    caches[page_cache.CACHE].clear()


@pytest.fixture(autouse=True)
def _own_throttle_counts(request: pytest.FixtureRequest) -> Iterator[None]:
    """Each test counts its API calls under its own key prefix of the throttles' cache (the real
    Redis under ``make test``, diagnosis/throttling.py): one test's anonymous or failed calls from
    127.0.0.1 never throttle the next one's."""
    throttle = {**settings.CACHES["throttle"], "KEY_PREFIX": f"test-throttle-{os.urandom(6).hex()}"}
    with override_settings(CACHES={**settings.CACHES, "throttle": throttle}):
        yield


@pytest.fixture(autouse=True)
def _default_language() -> Iterator[None]:
    """Each test starts in the default language: a request served in Chinese leaves its language
    active in the test's thread (LocaleMiddleware activates it and never deactivates it), and
    the next test's figures and texts would be built in Chinese."""
    translation.deactivate()
    yield
    translation.deactivate()


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
    saved = celery_app.conf.task_always_eager, celery_app.conf.task_eager_propagates
    celery_app.conf.task_always_eager = True
    celery_app.conf.task_eager_propagates = True
    try:
        yield
    finally:
        celery_app.conf.task_always_eager, celery_app.conf.task_eager_propagates = saved


@pytest.fixture
def run_tasks(celery_eager: None, django_capture_on_commit_callbacks) -> Callable[..., Any]:
    """``run_tasks(action, *args)``: the action, with what it sends on commit (dry runs, applies)
    run in-process as the embedded mode does; its result, read again from the database."""

    def run(action: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        with django_capture_on_commit_callbacks(execute=True):
            result = action(*args, **kwargs)
        result.refresh_from_db()
        return result

    return run


@pytest.fixture
def approve(carol: User, dave: User, erin: User, run_tasks) -> Callable[..., Recommendation]:
    """``approve(cluster, kind, target, change)``: a recommendation of ``cluster`` approved the
    usual way: carol requests and dave approves; a drain, erin (on-call) approves alone. The
    approval sends the dry run (run in-process)."""

    def build(cluster: Cluster, *args: Any) -> Recommendation:
        rec = make_recommendation(cluster, *args)
        if rec.kind == "drain-node":
            return run_tasks(approve_recommendation, rec, erin)
        request_recommendation(rec, carol)
        return run_tasks(approve_recommendation, rec, dave)

    return build


@pytest.fixture
def make_user(db: None) -> Callable[..., User]:
    """``make_user(username, staff=False, superuser=False, roles=())``: someone not in the world."""
    return create_user


@pytest.fixture
def alice(db: None) -> User:
    return create_person("alice")


@pytest.fixture
def bob(db: None) -> User:
    return create_person("bob")


@pytest.fixture
def carol(db: None) -> User:
    return create_person("carol")


@pytest.fixture
def dave(db: None) -> User:
    return create_person("dave")


@pytest.fixture
def erin(db: None) -> User:
    return create_person("erin")


@pytest.fixture
def mallory(db: None) -> User:
    return create_person("mallory")


@pytest.fixture
def nobody(db: None) -> User:
    return create_person("nobody")


@pytest.fixture
def alice_client(alice: User) -> Client:
    return logged_in_client(alice)


@pytest.fixture
def bob_client(bob: User) -> Client:
    return logged_in_client(bob)


@pytest.fixture
def make_cluster(db: None) -> Callable[..., Cluster]:
    def build(name: str = "demo", **fields: Any) -> Cluster:
        return Cluster.objects.create(name=name, **fields)

    return build


@pytest.fixture
def lab(request: pytest.FixtureRequest, make_cluster: Callable[..., Cluster]) -> Iterator[Cluster]:
    """The simulator's small scenario (4 nodes x 8 GPUs, queues team-a and team-b, pool a100 under
    spread), 15 simulated minutes a cycle; its simulator is forgotten afterwards.

    It is called ``lab`` and in dry-run, as every new cluster is; a module names it and sets other
    fields with a mark, e.g. ``pytest.mark.lab("lab-api", dry_run=False)`` for writes on.
    """
    mark = request.node.get_closest_marker("lab")
    name = mark.args[0] if mark and mark.args else "lab"
    fields = mark.kwargs if mark else {}
    cluster = make_cluster(
        name, scheduler_kind="sim", metrics_kind="sim", scheduler_config=dict(LAB_CONFIG), **fields
    )
    yield cluster
    sim_runtime.forget(cluster.name)
