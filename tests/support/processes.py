"""The child processes of the tests' real servers (Prometheus, Alertmanager, Slurm's daemons,
Celery workers, the bench's Prometheus): a free loopback port, a start in a session of its own
with its output in a log file, a stop of its whole process group, and the wait for what they
do. Standard library and requests only: bench/ uses it without Django."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import requests

T = TypeVar("T")


def free_port() -> int:
    """A loopback TCP port nobody listens on now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_until(check: Callable[[], T], what: str = "condition", *, timeout: float = 30.0) -> T:
    """Poll ``check`` until it returns something truthy; that value. A connection, lookup or
    value error while waiting (a server not up yet) is retried; after ``timeout`` seconds,
    TimeoutError naming ``what`` (and the last error)."""
    deadline = time.monotonic() + timeout
    error: Exception | None = None
    while True:
        try:
            value = check()
            if value:
                return value
        except (OSError, requests.RequestException, LookupError, ValueError) as exc:
            error = exc  # the server is not up yet
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"waited {timeout:.0f} s for {what}" + (f": {error}" if error else "")
            )
        time.sleep(0.05)


def start_logged(args: Sequence[str], log: Path, *, mode: str = "ab", **popen: Any):
    """``args`` started in a session of its own (its process group is stopped with it), stdout
    and stderr written to ``log`` (opened with ``mode``); the child keeps the file."""
    with open(log, mode) as out:
        return subprocess.Popen(
            list(args), stdout=out, stderr=subprocess.STDOUT, start_new_session=True, **popen
        )


def prometheus_args(binary: str, base: Path, data: Path, port: int) -> list[str]:
    """The command line of a Prometheus with ``base/prometheus.yml``, its TSDB in ``data`` (30
    days kept) and its web API on loopback ``port``."""
    return [
        binary,
        f"--config.file={base / 'prometheus.yml'}",
        f"--storage.tsdb.path={data}",
        f"--web.listen-address=127.0.0.1:{port}",
        "--storage.tsdb.retention.time=30d",
    ]


def stop_group(process: subprocess.Popen, timeout: float = 10) -> None:
    """Stop ``process`` and its process group: SIGCONT (should it be paused), SIGTERM, and
    SIGKILL once ``timeout`` seconds pass (slurmd ignores SIGTERM while it retries registering
    with a dead slurmctld)."""
    if process.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGCONT)
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=timeout)
