"""The id of the web request or task being served, for the edge's outbound calls
(docs/operations.md, "Logs").

``gpuobs/logs.py`` sets it (a request's ``X-Request-ID``, a task's header); an integration's
client sends it on as ``X-Request-ID``, so the other side's logs (Prometheus behind a gateway,
Mimir, Alertmanager) can be joined with gpuobs's lines. Read when a client is built: a client's
worker threads do not inherit a context variable.
"""

from __future__ import annotations

import contextvars

HEADER = "X-Request-ID"

current: contextvars.ContextVar[str] = contextvars.ContextVar("gpuobs_request_id", default="")


def outbound_headers() -> dict[str, str]:
    """``{"X-Request-ID": id}`` while serving a request or task that has one, else nothing."""
    value = current.get()
    return {HEADER: value} if value else {}
