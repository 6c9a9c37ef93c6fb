"""A real Redis behind a real Sentinel (Debian's redis-server, ``redis-server --sentinel``), on
loopback ports: one master and one Sentinel monitoring it as ``mymaster`` (quorum 1), as a
company's Sentinel set-up looks to a client. Each test gets its own pair, stopped afterwards."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import redis

from tests.conftest import require_binary
from tests.support.processes import free_port, start_logged, stop_group, wait_until

MASTER_NAME = "mymaster"


@dataclass
class SentinelSetUp:
    master_port: int
    sentinel_port: int

    @property
    def url(self) -> str:
        """``REDIS_URL`` as a company sets it: the Sentinel, and the database (1)."""
        return f"sentinel://127.0.0.1:{self.sentinel_port}/1"

    def master(self) -> redis.Redis:
        """The master, directly (what the test looks at)."""
        return redis.Redis(port=self.master_port, db=1)


def _up(port: int, process: subprocess.Popen, log: Path) -> bool:
    if process.poll() is not None:
        raise RuntimeError(log.read_text(errors="replace"))
    try:
        return bool(redis.Redis(port=port, socket_timeout=1).ping())
    except redis.ConnectionError:
        return False


@contextmanager
def redis_behind_sentinel(directory: Path) -> Iterator[SentinelSetUp]:
    binary = require_binary("redis-server", "apt-get install redis-server")
    directory.mkdir(parents=True, exist_ok=True)
    master_port, sentinel_port = free_port(), free_port()
    master = start_logged(
        [binary, "--port", str(master_port), "--bind", "127.0.0.1", "--save", "",
         "--appendonly", "no", "--dir", str(directory)],
        directory / "master.log",
    )  # fmt: skip
    sentinel = None
    try:
        wait_until(lambda: _up(master_port, master, directory / "master.log"), "the Redis master")
        config = directory / "sentinel.conf"  # Sentinel rewrites its own config file
        config.write_text(
            f"port {sentinel_port}\nbind 127.0.0.1\ndir {directory}\n"
            f"sentinel monitor {MASTER_NAME} 127.0.0.1 {master_port} 1\n"
            f"sentinel down-after-milliseconds {MASTER_NAME} 5000\n"
        )
        sentinel = start_logged([binary, str(config), "--sentinel"], directory / "sentinel.log")
        wait_until(
            lambda: (
                _up(sentinel_port, sentinel, directory / "sentinel.log")
                and redis.Redis(port=sentinel_port).sentinel_get_master_addr_by_name(MASTER_NAME)
            ),
            "the Sentinel to know its master",
        )
        yield SentinelSetUp(master_port, sentinel_port)
    finally:
        for process in (sentinel, master):
            if process is not None:
                stop_group(process)
