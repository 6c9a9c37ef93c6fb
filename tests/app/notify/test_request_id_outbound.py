"""The request id goes out with gpuobs's own calls (docs/operations.md, "Logs"): a post to
Alertmanager made while serving a request or a task that has an id carries it as X-Request-ID;
end to end, the id a web request came with travels in the task it enqueues to a real Celery
worker, and that worker's post to Alertmanager carries it. (Prometheus queries carry it too:
tests/edge/test_prometheus_backends.py.)"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from django.test import Client

from diagnosis.actions.notify.alertmanager import alertmanager_targets
from diagnosis.edge.notify.alertmanager import PostableAlert, post_alerts
from diagnosis.models import ApiToken
from gpuobs.logs import request_id
from tests.support.celery_worker import celery_worker_process
from tests.support.processes import wait_until
from tests.support.records import make_recommendation

AS_ROOT = "ignore:You're running the worker with superuser privileges"


@pytest.fixture
def receiver() -> Iterator[tuple[str, list[dict[str, str]]]]:
    """A loopback HTTP server answering 200 and keeping each request's headers."""
    seen: list[dict[str, str]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            seen.append({"path": self.path, **self.headers})
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


@pytest.mark.celery_worker
@pytest.mark.django_db(transaction=True)
@pytest.mark.lab("lab-rid-out")
def test_the_request_id_goes_from_the_request_through_the_task_to_alertmanager(
    receiver, settings, lab, carol, redis_url, tmp_path
) -> None:
    url, seen = receiver
    settings.GPUOBS_ALERTMANAGER_URL = url  # a request for approval notifies at once
    rec = make_recommendation(lab, "queue-weight", "queue:team-b", {"from": 1, "to": 3})
    _row, token = ApiToken.issue(carol, "request-id-test")
    worker_env = {"GPUOBS_ALERTMANAGER_URL": url, "PYTHONWARNINGS": AS_ROOT}

    with celery_worker_process("celery", redis_url, tmp_path, env=worker_env, quiet=True):
        answer = Client().post(
            f"/api/v1/recommendations/{rec.pk}/request/",
            headers={"Authorization": f"Token {token}", "X-Request-ID": "req-31i-e2e"},
        )
        assert answer.status_code == 200, answer.content
        posted = wait_until(
            lambda: [h for h in seen if h["path"] == "/api/v2/alerts"],
            "the worker's post to Alertmanager",
            timeout=60,
        )

    assert answer.headers["X-Request-ID"] == "req-31i-e2e"
    assert posted[0]["X-Request-ID"] == "req-31i-e2e"
