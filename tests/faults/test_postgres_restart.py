"""PostgreSQL restarted mid-cycle, for real (issue #18, defect 7: a cycle killed by a database
error left no failed-cycle row and the status stayed ``ok``). The test starts a PostgreSQL
cluster of its own (``initdb`` / ``pg_ctl`` from /usr/lib/postgresql/*/bin, its own port and
folder: under a second to make), copies the test database into it, and points this process,
the worker and beat at it. A cycle is held on the cluster's row lock, PostgreSQL is stopped
(``-m immediate``, as a crash), left down 3 s and started again: the cycle's task records a
failed row saying the database was lost, and the next cycles are good by themselves."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import psycopg
import pytest
from django.db import DatabaseError, connection

from diagnosis.models import ClusterCycle
from tests.faults.conftest import (
    free_port,
    good_cycles,
    row_counts,
    someone_waits_on_a_row_lock,
    wait_until,
)
from tests.support.world import logged_in_client

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.lab("lab-faults")]

T = TypeVar("T")
DOWN_S = 3
RECOVERY_S = 30
LONGER_TASKS = {"GPUOBS_TASK_SOFT_TIME_LIMIT": "20", "GPUOBS_TASK_TIME_LIMIT": "25"}


def postgres_binaries() -> Path:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"))
    if not found:
        if os.environ.get("CI"):
            pytest.fail("pg_ctl not found: apt-get install postgresql")
        pytest.skip("pg_ctl not found: apt-get install postgresql")
    return Path(found[-1]).parent


@dataclass
class PrivatePostgres:
    """A PostgreSQL cluster of the test's own (``initdb`` refuses root: run as ``postgres``)."""

    bin: Path
    folder: Path
    port: int

    def _run(self, *args: str) -> None:
        command = [str(self.bin / args[0]), *args[1:]]
        if os.geteuid() == 0:
            command = ["runuser", "-u", "postgres", "--", *command]
        subprocess.run(command, check=True, capture_output=True, timeout=60)

    def init(self) -> None:
        self.folder.mkdir(mode=0o700)
        if os.geteuid() == 0:
            shutil.chown(self.folder, "postgres")
        self._run("initdb", "-D", str(self.folder), "-A", "trust", "-U", "postgres", "--no-sync")
        self.start()

    def start(self) -> None:
        options = f"-p {self.port} -k {self.folder} -c listen_addresses=127.0.0.1 -c fsync=off"
        self._run(
            "pg_ctl",
            "-D",
            str(self.folder),
            "-o",
            options,
            "-l",
            str(self.folder / "postgres.log"),
            "-w",
            "start",
        )

    def crash(self) -> None:
        self._run("pg_ctl", "-D", str(self.folder), "-m", "immediate", "-w", "stop")


def settled(query: Callable[[], T]) -> T | None:
    """``query`` on this process's connection; None (and the connection dropped, so the next
    try reconnects) while the database is away."""
    try:
        return query()
    except DatabaseError:
        connection.close()
        return None


@pytest.fixture
def private_postgres(lab) -> Iterator[PrivatePostgres]:
    """The test database copied into a PostgreSQL of the test's own, and this process's
    connection pointed at it (so ``database_url_of_test_database`` names it to the workers).
    Its folder is outside pytest's (which only root may enter)."""
    base = Path(tempfile.mkdtemp(prefix="gpuobs-fault-pg-"))
    base.chmod(0o755)
    server = PrivatePostgres(postgres_binaries(), base / "pgdata", free_port())
    server.init()
    db = connection.settings_dict
    source = f"postgresql://{db['USER']}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}"
    target = f"postgresql://postgres@127.0.0.1:{server.port}"
    with psycopg.connect(f"{target}/postgres", autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{db["NAME"]}"')  # the test database's own name
    dump = subprocess.run(
        ["pg_dump", "--no-owner", "--no-privileges", f"{source}/{db['NAME']}"],
        check=True,
        capture_output=True,
        timeout=60,
    )
    subprocess.run(
        ["psql", "-q", "-v", "ON_ERROR_STOP=1", f"{target}/{db['NAME']}"],
        input=dump.stdout,
        check=True,
        capture_output=True,
        timeout=60,
    )
    saved = {key: db[key] for key in ("HOST", "PORT")}
    connection.close()
    db.update(HOST="127.0.0.1", PORT=server.port)
    try:
        yield server
    finally:
        connection.close()
        db.update(saved)
        with suppress(subprocess.CalledProcessError):
            server.crash()
        shutil.rmtree(base, ignore_errors=True)


def test_a_postgresql_restart_mid_cycle_is_a_failed_row_and_cycles_resume(
    private_postgres, fault_stack, lab, alice
) -> None:
    before = row_counts(lab)
    holder = psycopg.connect(
        f"postgresql://postgres@127.0.0.1:{private_postgres.port}/{connection.settings_dict['NAME']}"
    )
    holder.execute("SELECT 1 FROM diagnosis_cluster WHERE id = %s FOR UPDATE", [lab.pk])
    # the cycle task may wait out the restart to record itself (production: 240 s soft limit)
    worker = fault_stack.start_worker(extra=LONGER_TASKS)
    fault_stack.start_beat()
    wait_until(someone_waits_on_a_row_lock, "a cycle to wait on the cluster's row", 30)
    private_postgres.crash()  # the cycle's connection, and every other, is cut
    crashed = time.monotonic()
    with suppress(psycopg.Error):
        holder.close()
    time.sleep(DOWN_S)  # the fault itself: PostgreSQL is away this long
    private_postgres.start()
    back = time.monotonic()

    lost = wait_until(
        lambda: settled(
            lambda: ClusterCycle.objects.filter(
                cluster=lab, ok=False, error__contains="database connection was lost"
            ).first()
        ),
        "a failed row saying the database was lost",
        RECOVERY_S,
    )
    wait_until(
        lambda: settled(
            lambda: ClusterCycle.objects.filter(
                cluster=lab, ok=True, ran_at__gt=lost.ran_at
            ).exists()
        ),
        "a good cycle after the restart",
        RECOVERY_S,
    )
    recovered_s = time.monotonic() - back
    api = logged_in_client(alice).get(f"/api/clusters/{lab.pk}/").json()
    after = row_counts(lab)
    print(
        f"fault matrix: postgresql crashed mid-cycle, down {back - crashed:.1f} s: "
        f"{lost.error!r}; a good cycle "
        f"{recovered_s:.1f} s after it was back; rows before {before}, after {after}"
    )

    assert lost.error.startswith("failed: the database connection was lost mid-cycle")
    assert api["status"] == "ok"
    assert api["stale"] is False
    assert worker.alive()
    assert after["findings"] >= before["findings"]
    assert len(good_cycles(lab)) >= 1
