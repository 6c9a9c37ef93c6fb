"""OpenTelemetry traces (docs/operations.md, "Traces"), in fresh interpreters started the way
the web process starts (``gpuobs.wsgi``) and with the Celery app: with ``GPUOBS_OTLP_ENDPOINT``
set, a served request, a task run and an outbound call reach a loopback OTLP/HTTP collector
(tests/support/otlp_collector.py) as spans, the request's span with its request id and the
outbound call carrying ``traceparent``; unset, gpuobs imports no tracing module of it (redis-py
imports the SDK's *metrics* module by itself when the SDK is installed: not gpuobs's doing, and
why the packages are optional, requirements-tracing.txt)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator

import pytest

from tests.conftest import REPO_ROOT
from tests.support.otlp_collector import OtlpCollector

SPAN_KIND_SERVER, SPAN_KIND_CLIENT, SPAN_KIND_CONSUMER = 2, 3, 5

PROCESS = """
import json, os, sys
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gpuobs.settings")
TRACING_MODULES = ("opentelemetry.sdk.trace", "opentelemetry.instrumentation",
                   "opentelemetry.exporter")
import gpuobs.wsgi  # the web process's start: tracing configured before the middleware loads
from django.test import Client
import requests
from gpuobs.celery import app
from gpuobs import tracing

app.conf.task_always_eager = True

@app.task(name="tests.tracing.probe")
def probe():
    return 1

answer = Client(HTTP_HOST="localhost").get("/livez", headers={"X-Request-ID": "req-31i-trace"})
requests.get(os.environ["PROBE_URL"] + "/outbound", timeout=5)
probe.delay().get()
flushed = tracing.flush()
print(json.dumps({"status": answer.status_code, "flushed": flushed,
                  "otel": sorted(m for m in sys.modules if m.startswith(TRACING_MODULES))}))
"""


@pytest.fixture
def collector() -> Iterator[OtlpCollector]:
    server = OtlpCollector().start()
    yield server
    server.close()


def run_process(**env: str) -> dict:
    environment = {k: v for k, v in os.environ.items() if k != "GPUOBS_OTLP_ENDPOINT"}
    result = subprocess.run(
        [sys.executable, "-c", PROCESS],
        cwd=REPO_ROOT,
        env={**environment, **env},
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_spans_of_a_request_a_task_and_an_outbound_call_reach_the_collector(collector) -> None:
    ran = run_process(
        GPUOBS_OTLP_ENDPOINT=collector.url, PROBE_URL=collector.url, OTEL_SERVICE_NAME=""
    )

    assert (ran["status"], ran["flushed"]) == (200, True)
    by_kind = {}
    for span in collector.spans:
        by_kind.setdefault(span.kind, []).append(span)
    (served,) = by_kind[SPAN_KIND_SERVER]
    assert served.name == "GET livez"
    assert served.attributes["gpuobs.request_id"] == "req-31i-trace"
    assert served.resource["service.name"] == "gpuobs"
    assert served.resource["gpuobs.process"] == "web"
    (outbound,) = by_kind[SPAN_KIND_CLIENT]
    assert outbound.name == "GET"
    (probe_call,) = collector.other_requests
    assert probe_call["traceparent"].split("-")[1] == outbound.trace_id
    assert [s.name for s in by_kind[SPAN_KIND_CONSUMER]] == ["run/tests.tracing.probe"]


def test_without_an_endpoint_no_tracing_module_is_imported(collector) -> None:
    ran = run_process(PROBE_URL=collector.url)

    assert ran["status"] == 200
    assert ran["otel"] == []
    assert collector.spans == []
    assert "traceparent" not in collector.other_requests[0]
