"""A real Alertmanager for the outbound tests (Debian's prometheus-alertmanager, 0.25), on a
loopback port, routing every alert to a webhook that records what it gets: stopped and started
again on the same port and storage (its notification log survives a restart, its alerts do not,
as in production)."""

from __future__ import annotations

import json
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import requests
import yaml

from tests.conftest import require_binary
from tests.support.processes import free_port, start_logged, stop_group, wait_until

PACKAGE = "prometheus-alertmanager"


class Webhook:
    """A loopback HTTP server keeping every notification body Alertmanager posts."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []
        received = self.bodies

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                received.append(json.loads(self.rfile.read(length)))
                self.send_response(200)
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def alerts(self, status: str | None = None) -> list[dict[str, Any]]:
        found = [a for body in list(self.bodies) for a in body["alerts"]]
        return [a for a in found if status is None or a["status"] == status]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


CAPTURE_GROUP_BY = ["alertname", "cluster", "rule", "subject"]  # what gpuobs posts


@dataclass
class AlertmanagerServer:
    """An Alertmanager whose one route sends every alert, grouped by ``group_by`` and at once,
    to ``receiver`` (a receiver of alertmanager.yml, with its ``webhook_configs``); ``webhook``,
    the :class:`Webhook` behind it when there is one."""

    base: Path
    receiver: dict[str, Any]
    group_by: list[str] = field(default_factory=lambda: list(CAPTURE_GROUP_BY))
    webhook: Webhook | None = None
    port: int = field(default_factory=free_port)
    process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        binary = require_binary(
            "prometheus-alertmanager", "apt-get install prometheus-alertmanager"
        )
        config = {
            "route": {
                "receiver": self.receiver["name"],
                "group_by": self.group_by,
                "group_wait": "0s",
                "group_interval": "1s",
                "repeat_interval": "1h",
            },
            "receivers": [self.receiver],
        }
        self.base.mkdir(parents=True, exist_ok=True)
        (self.base / "alertmanager.yml").write_text(yaml.safe_dump(config), encoding="utf-8")
        self.process = start_logged(
            [
                binary,
                f"--config.file={self.base / 'alertmanager.yml'}",
                f"--storage.path={self.base / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--cluster.listen-address=",
            ],
            self.base / "alertmanager.log",
        )
        wait_until(self._ready, what="Alertmanager to be ready")

    def _ready(self) -> bool:
        if self.process is None or self.process.poll() is not None:
            raise RuntimeError((self.base / "alertmanager.log").read_text(errors="replace"))
        return requests.get(f"{self.url}/-/ready", timeout=1).status_code == 200

    def stop(self) -> None:
        if self.process is not None:
            stop_group(self.process)

    def alerts(self) -> list[dict[str, Any]]:
        """``GET /api/v2/alerts``: the alerts Alertmanager holds as active."""
        response = requests.get(f"{self.url}/api/v2/alerts", timeout=5)
        response.raise_for_status()
        return response.json()


@contextmanager
def started_alertmanager(directory: Path) -> Iterator[AlertmanagerServer]:
    """An Alertmanager running in ``directory`` whose receiver posts to a fresh
    :class:`Webhook`; both stopped on the way out."""
    webhook = Webhook()
    receiver = {"name": "capture", "webhook_configs": [{"url": webhook.url, "send_resolved": True}]}
    server = AlertmanagerServer(directory, receiver, webhook=webhook)
    try:
        server.start()
        yield server
    finally:
        server.stop()
        webhook.close()
