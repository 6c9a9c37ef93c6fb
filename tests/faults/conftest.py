"""The fault suite's real processes (issue #18), each on its own ports and files: a
``redis-server`` the test may stop and start again, Celery workers (prefork, one pool process)
and beats started with ``subprocess`` against the test database and that Redis, with a short
cycle period. A test states what it breaks, waits on conditions with deadlines, and checks what
the pages and the API then say and that no row was lost or written twice.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import psycopg
import pytest
import redis
import requests
from django.conf import settings
from django.db import connection, models
from django.utils import timezone

from diagnosis.actions.upkeep import health
from diagnosis.models import (
    AuditEntry,
    Cluster,
    ClusterCycle,
    Finding,
    FindingEvent,
    Incident,
    Recommendation,
)
from gpuobs import celery_app
from tests.conftest import REPO_ROOT, require_binary
from tests.support.celery_worker import database_url_of_test_database
from tests.support.records import make_recommendation

T = TypeVar("T")

# The suite's clock: cycles every 2 s, tasks killed after 6 s (so an apply claim is stale after
# 11 s), and a worker clock more than 30 s off the database's refuses cycles.
CYCLE_SECONDS = 2
TASK_TIME_LIMIT = 6
FAULT_ENV = {
    "GPUOBS_CYCLE_SECONDS": str(CYCLE_SECONDS),
    "GPUOBS_TASK_TIME_LIMIT": str(TASK_TIME_LIMIT),
    "GPUOBS_TASK_SOFT_TIME_LIMIT": str(TASK_TIME_LIMIT - 2),
}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/faults/" in str(item.fspath):
            item.add_marker(pytest.mark.faults)
            item.add_marker(pytest.mark.xdist_group("faults"))


def wait_until(check: Callable[[], T], what: str, timeout: float = 30.0) -> T:
    """Poll ``check`` until it returns something true; fail naming ``what`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.1)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class RedisServer:
    """A ``redis-server`` on its own port, its append-only file in ``folder`` (so a restart
    keeps the queued messages, as compose's ``--appendonly yes`` does)."""

    binary: str
    folder: Path
    port: int = field(default_factory=free_port)
    process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        log = (self.folder / "redis.log").open("a")
        self.process = subprocess.Popen(
            [
                self.binary,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--dir",
                str(self.folder),
                "--save",
                "",
                "--appendonly",
                "yes",
                "--appendfsync",
                "always",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        client = redis.Redis(port=self.port, socket_connect_timeout=0.5)
        wait_until(lambda: _pings(client), "redis-server to answer", timeout=15)

    def stop(self) -> None:
        """Kill it, as a crash would (``appendfsync always``: every write is already on disk)."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=15)
        self.process = None

    def restart(self, down_s: float = 3.0) -> float:
        """Stop, stay down ``down_s`` (as a container restart does), start again; returns how
        long Redis was down, seconds."""
        down = time.monotonic()
        self.stop()
        time.sleep(down_s)  # the fault itself: the broker is away this long
        self.start()
        return time.monotonic() - down


@dataclass
class WebServer:
    """A gunicorn the stack started: its base URL and its process."""

    url: str
    process: CeleryProcess


def _answers(url: str) -> bool:
    try:
        return requests.get(url, timeout=2).status_code == 200
    except requests.RequestException:
        return False


def _pings(client: redis.Redis) -> bool:
    try:
        return bool(client.ping())
    except redis.RedisError:
        return False


@dataclass
class CeleryProcess:
    """``celery -A gpuobs worker|beat`` as a child process; its log in ``log``."""

    process: subprocess.Popen
    log: Path
    hostname: str = ""  # a worker's Celery node name (what task results name)

    @property
    def pid(self) -> int:
        return self.process.pid

    def alive(self) -> bool:
        return self.process.poll() is None

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def pool_child_pids(self) -> list[int]:
        """The worker's pool processes (its children)."""
        children = Path(f"/proc/{self.pid}/task/{self.pid}/children")
        return [int(p) for p in children.read_text().split()] if children.exists() else []

    def stop(self) -> None:
        """Kill it and its pool processes (the suite needs no warm shutdown, only speed)."""
        for pid in [*self.pool_child_pids(), self.pid]:
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self.process.wait(timeout=15)


@dataclass
class FaultStack:
    """The processes of one fault test; everything it started is stopped at the end."""

    redis: RedisServer
    folder: Path
    processes: list[CeleryProcess] = field(default_factory=list)

    def env(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        return {
            **os.environ,
            **FAULT_ENV,
            "DATABASE_URL": database_url_of_test_database(),
            "REDIS_URL": self.redis.url,
            **(extra or {}),
        }

    def _start(
        self, name: str, args: list[str], prefix: list[str], extra: dict, hostname: str = ""
    ) -> CeleryProcess:
        log = self.folder / f"{name}-{len(self.processes)}.log"
        command = [*prefix, sys.executable, "-m", "celery", "-A", "gpuobs", *args]
        with log.open("w") as out:
            process = subprocess.Popen(
                command, cwd=REPO_ROOT, env=self.env(extra), stdout=out, stderr=subprocess.STDOUT
            )
        started = CeleryProcess(process, log, hostname)
        self.processes.append(started)
        return started

    def start_worker(
        self, *, prefix: list[str] | None = None, extra: dict[str, str] | None = None
    ) -> CeleryProcess:
        """A worker on every queue, one prefork pool process, ready to take tasks."""
        (worker,) = self.start_workers(1, prefix=prefix, extra=extra)
        return worker

    def start_workers(
        self, count: int, *, prefix: list[str] | None = None, extra: dict[str, str] | None = None
    ) -> list[CeleryProcess]:
        """``count`` workers as :meth:`start_worker` makes them, started together (their start-ups
        overlap), each ready to take tasks."""
        workers = [self._spawn_worker(prefix or [], extra or {}) for _ in range(count)]
        for worker in workers:
            wait_until(lambda w=worker: " ready." in w.text() or not w.alive(), "the worker", 60)
            assert worker.alive(), worker.text()
        return workers

    def _spawn_worker(self, prefix: list[str], extra: dict[str, str]) -> CeleryProcess:
        hostname = f"fault-{uuid.uuid4().hex[:6]}@{socket.gethostname()}"
        return self._start(
            "worker",
            [
                "worker",
                "-Q",
                "collect,diagnose,actuate,celery",
                "--pool=prefork",
                "--concurrency=1",
                "--loglevel=INFO",
                "--hostname",
                hostname,
            ],
            prefix,
            extra,
            hostname,
        )

    def start_web(self, workers: int = 3) -> WebServer:
        """gunicorn serving gpuobs as the image does (``workers`` sync workers, production
        settings) on a free port, against the test database and this stack's Redis, with this
        process's secret key (the sessions the test logs in are valid there)."""
        extra = {
            "DJANGO_DEBUG": "0",
            "DJANGO_SECRET_KEY": settings.SECRET_KEY,
            "DJANGO_ALLOWED_HOSTS": "127.0.0.1",
            "DJANGO_SECURE_SSL_REDIRECT": "0",
            "DJANGO_SECURE_COOKIES": "0",
            "DJANGO_SECURE_HSTS_SECONDS": "0",
            "DJANGO_LOG_LEVEL": "WARNING",
        }
        if not (REPO_ROOT / "staticfiles" / "staticfiles.json").exists():
            # production pages name hashed static files through collectstatic's manifest
            subprocess.run(
                [sys.executable, "manage.py", "collectstatic", "--noinput", "-v", "0"],
                cwd=REPO_ROOT,
                env=self.env(extra),
                check=True,
            )
        port = free_port()
        gunicorn = str(Path(sys.executable).parent / "gunicorn")
        command = [gunicorn, "gpuobs.wsgi:application", "--bind", f"127.0.0.1:{port}"]
        command += ["--workers", str(workers), "--log-level", "warning"]
        log = self.folder / f"web-{len(self.processes)}.log"
        with log.open("w") as out:
            process = subprocess.Popen(
                command, cwd=REPO_ROOT, env=self.env(extra), stdout=out, stderr=subprocess.STDOUT
            )
        web = CeleryProcess(process, log)
        self.processes.append(web)
        url = f"http://127.0.0.1:{port}"
        wait_until(lambda: _answers(f"{url}/healthz") or not web.alive(), "gunicorn", 60)
        assert web.alive(), web.text()
        return WebServer(url, web)

    def start_beat(self) -> CeleryProcess:
        schedule = self.folder / f"beat-schedule-{len(self.processes)}"
        return self._start("beat", ["beat", "--loglevel=INFO", "--schedule", str(schedule)], [], {})

    def stop_all(self) -> None:
        for process in reversed(self.processes):
            process.stop()
        for process in self.processes:
            print(f"--- {process.log.name}\n{process.text()[-6000:]}")  # shown when a test fails


@pytest.fixture
def fault_stack(tmp_path: Path, settings) -> Iterator[FaultStack]:
    """A Redis of the test's own, and this process's settings and Celery app pointed at it."""
    server = RedisServer(require_binary("redis-server", "apt-get install redis-server"), tmp_path)
    server.start()
    settings.REDIS_URL = server.url
    settings.GPUOBS_CYCLE_SECONDS = CYCLE_SECONDS
    settings.GPUOBS_APPLY_CLAIM_STALE_SECONDS = TASK_TIME_LIMIT + 5
    conf = celery_app.conf
    saved = conf.broker_url, conf.result_backend, conf.task_always_eager
    conf.broker_url = conf.result_backend = server.url  # results too: shards are waited on
    conf.task_always_eager = False
    _forget_connections()
    stack = FaultStack(server, tmp_path)
    try:
        yield stack
    finally:
        stack.stop_all()
        server.stop()
        conf.broker_url, conf.result_backend, conf.task_always_eager = saved
        _forget_connections()


def _forget_connections() -> None:
    """Drop this process's cached broker, result-backend and Redis connections."""
    celery_app.amqp._producer_pool = None
    celery_app._pool = None
    with suppress(AttributeError):
        del celery_app._local.backend
    health.redis_client.cache_clear()


def own_connection() -> psycopg.Connection:
    """A connection to the test database of its own (outside Django's), to hold a lock with."""
    db = connection.settings_dict
    return psycopg.connect(
        host=db["HOST"] or "127.0.0.1",
        port=db["PORT"] or 5432,
        user=db["USER"],
        password=db["PASSWORD"] or None,
        dbname=db["NAME"],
    )


@contextmanager
def row_locked(model: type[models.Model], pk: int) -> Iterator[None]:
    """Hold ``SELECT ... FOR UPDATE`` on one row from a connection of its own: a worker that
    needs the row waits, so the test knows where its task is while it breaks something."""
    with own_connection() as holder:
        table = model._meta.db_table  # a model's own table name, not input
        holder.execute(f'SELECT 1 FROM "{table}" WHERE id = %s FOR UPDATE', [pk])  # noqa: S608
        yield
        holder.rollback()


def someone_waits_on_a_row_lock() -> bool:
    """A session of the test database (a worker's) waits for a row lock."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND wait_event_type = 'Lock'"
        )
        return cursor.fetchone()[0] > 0


def row_counts(cluster: Cluster) -> dict[str, int]:
    """The rows a fault must neither lose nor duplicate, counted for one cluster."""
    return {
        "findings": Finding.objects.filter(cluster=cluster).count(),
        "finding events": FindingEvent.objects.filter(finding__cluster=cluster).count(),
        "cycles": ClusterCycle.objects.filter(cluster=cluster, ok=True).count(),
        "skipped or failed cycles": ClusterCycle.objects.filter(cluster=cluster, ok=False).count(),
        "audit rows": AuditEntry.objects.filter(cluster=cluster).count(),
        "incidents": Incident.objects.filter(cluster=cluster).count(),
    }


def scheduler_changes(cluster: Cluster) -> list[dict]:
    """What the simulated scheduler was written (its replayable change log)."""
    return Cluster.objects.get(pk=cluster.pk).scheduler_config.get("changes", [])


@contextmanager
def table_locked_for_writes(model: type[models.Model]) -> Iterator[None]:
    """Hold ``LOCK TABLE ... IN SHARE MODE`` from a connection of its own: reads go on, every
    insert into the table waits (a worker's audit row: the step that records an apply)."""
    with own_connection() as holder:
        table = model._meta.db_table  # a model's own table name, not input
        holder.execute(f'LOCK TABLE "{table}" IN SHARE MODE')
        yield
        holder.rollback()


def approved_recommendation(cluster: Cluster, requester, approver) -> Recommendation:
    """Team-b's weight 1 -> 3, approved (no dry run queued: the test says when a worker runs)."""
    return make_recommendation(
        cluster,
        "queue-weight",
        "queue:team-b",
        {"from": 1, "to": 3},
        state="approved",
        requested_by=requester,
        approved_by=approver,
        approved_at=timezone.now(),
    )


def audit_actions(rec: Recommendation) -> list[str]:
    """A recommendation's audit trail, oldest first."""
    entries = AuditEntry.objects.filter(recommendation=rec).order_by("id")
    return list(entries.values_list("action", flat=True))


def good_cycles(cluster: Cluster) -> list[ClusterCycle]:
    return list(ClusterCycle.objects.filter(cluster=cluster, ok=True).order_by("ran_at"))
