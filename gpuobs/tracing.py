"""OpenTelemetry traces, optional and off by default (docs/operations.md, "Traces").

With ``GPUOBS_OTLP_ENDPOINT`` set (an OTLP/HTTP collector's base URL, ``http://otel-collector:4318``)
the web process (gpuobs/wsgi.py) and the Celery worker (gpuobs/celery.py) export spans to
``<endpoint>/v1/traces``: one per request served (Django), per task run and sent (Celery) and per
outbound HTTP call (requests: Prometheus, Alertmanager, slurmrestd, YARN), joined into one trace
by the W3C ``traceparent`` header the instrumentations carry across, and each request's span with
the gpuobs request id (``gpuobs.request_id``) that its log lines carry. The exporter's other
settings are the SDK's own environment variables (``OTEL_SERVICE_NAME``,
``OTEL_EXPORTER_OTLP_HEADERS``, ``OTEL_TRACES_SAMPLER``, ...).

Unset, gpuobs imports nothing of OpenTelemetry (its imports are inside :func:`configure`, each
marked PLC0415): no cost when off. The packages are optional (``requirements-tracing.txt``; the
image's ``--build-arg TRACING=1``), since redis-py imports the SDK's metrics module by itself
wherever the SDK is installed; an endpoint set without them stops the process at its start.
"""

from __future__ import annotations

import os
import threading
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from gpuobs.logs import request_id

_lock = threading.Lock()
_provider: Any = None


def enabled() -> bool:
    return bool(settings.GPUOBS_OTLP_ENDPOINT)


def _tag_request(span: Any, request: Any) -> None:
    current = request_id.get()
    if current and span.is_recording():
        span.set_attribute("gpuobs.request_id", current)


def configure(process: str) -> bool:
    """Start exporting this process's spans (``process``: ``web`` or ``worker``, a resource
    attribute) when an endpoint is set; True when tracing is on. Called once per process,
    before the WSGI handler loads its middleware; later calls do nothing. A forked child (a
    Celery prefork worker) inherits it: the SDK restarts its export thread after a fork."""
    global _provider
    if not enabled():
        return False
    with _lock:
        if _provider is not None:
            return True
        try:
            from opentelemetry import trace  # noqa: PLC0415
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import (  # noqa: PLC0415
                OTLPSpanExporter,
            )
            from opentelemetry.instrumentation.celery import CeleryInstrumentor  # noqa: PLC0415
            from opentelemetry.instrumentation.django import DjangoInstrumentor  # noqa: PLC0415
            from opentelemetry.instrumentation.requests import (  # noqa: PLC0415
                RequestsInstrumentor,
            )
            from opentelemetry.sdk.resources import Resource  # noqa: PLC0415
            from opentelemetry.sdk.trace import TracerProvider  # noqa: PLC0415
            from opentelemetry.sdk.trace.export import BatchSpanProcessor  # noqa: PLC0415
        except ImportError as exc:
            raise ImproperlyConfigured(
                f"GPUOBS_OTLP_ENDPOINT is set but OpenTelemetry is not installed ({exc.name}): "
                "pip install -r requirements-tracing.txt (the image: --build-arg TRACING=1)"
            ) from None

        endpoint = settings.GPUOBS_OTLP_ENDPOINT.rstrip("/") + "/v1/traces"
        name = os.environ.get("OTEL_SERVICE_NAME") or "gpuobs"
        resource = Resource.create({"service.name": name, "gpuobs.process": process})
        provider = TracerProvider(resource=resource)
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint)))
        trace.set_tracer_provider(provider)
        DjangoInstrumentor().instrument(tracer_provider=provider, request_hook=_tag_request)
        CeleryInstrumentor().instrument(tracer_provider=provider)
        # the exporter's own posts are requests too: never traced (a span for every export)
        RequestsInstrumentor().instrument(tracer_provider=provider, excluded_urls=endpoint)
        _provider = provider
    return True


def flush(timeout_ms: int = 10_000) -> bool:
    """Export the spans still buffered (at a process's end, and in tests); True when none was
    left behind."""
    return _provider.force_flush(timeout_ms) if _provider is not None else True
