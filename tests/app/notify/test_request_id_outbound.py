"""The request id goes out with gpuobs's own calls (docs/operations.md, "Logs"): a post to
Alertmanager made while serving a request or a task that has an id carries it as X-Request-ID."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from diagnosis.actions.notify.alertmanager import alertmanager_targets
from diagnosis.edge.notify.alertmanager import PostableAlert, post_alerts
from gpuobs.logs import request_id


@pytest.fixture
def receiver() -> Iterator[tuple[str, list[dict[str, str]]]]:
    """A loopback HTTP server answering 200 and keeping each request's headers."""
    seen: list[dict[str, str]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            seen.append(dict(self.headers))
            self.send_response(200)
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}", seen
    server.shutdown()
    server.server_close()


def test_an_alertmanager_post_carries_the_request_id(receiver, settings) -> None:
    url, seen = receiver
    settings.GPUOBS_ALERTMANAGER_URL = url
    alert = PostableAlert(labels={"alertname": "GpuobsTest"})

    token = request_id.set("req-h31-out")
    try:
        post_alerts(alertmanager_targets()[0], [alert])
    finally:
        request_id.reset(token)
    post_alerts(alertmanager_targets()[0], [alert])  # outside any request: no header

    assert seen[0]["X-Request-ID"] == "req-h31-out"
    assert "X-Request-ID" not in seen[1]
