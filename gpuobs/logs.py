"""gpuobs's logs: one format for Django, Celery and gunicorn, and a request id on every line
(docs/operations.md, "Logs").

- ``GPUOBS_LOG_FORMAT=json`` makes every line one JSON object (python-json-logger) with ``time``,
  ``level``, ``logger``, ``message``, ``request_id``, ``task_id`` and ``task_name`` (and
  ``exc_info``); gunicorn's access lines add ``method``, ``path``, ``status``, ``bytes``,
  ``duration_ms`` and ``remote``. ``text`` (the default) is one plain line with the same fields.
- The request id is the incoming ``X-Request-ID`` (letters, digits, ``._:-``, at most 128) or a
  new one; it is on every line logged while the request is served (Django's own ``django.request``
  line included), sent back as ``X-Request-ID``, and travels in the headers of every Celery task
  the request sends, so the worker's lines of that task carry it too (and the tasks that task
  sends).

Nothing here reads Django's settings at import: gunicorn's config (``gunicorn.conf.py``) imports
it before Django is set up.
"""

from __future__ import annotations

import contextvars
import logging
import os
import re
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from celery import current_task, signals
from django.core.signals import request_finished, request_started
from pythonjsonlogger.json import JsonFormatter

from diagnosis.edge.request_id import HEADER
from diagnosis.edge.request_id import current as request_id

TASK_HEADER = "gpuobs_request_id"
FORMATS = ("text", "json")
_VALID_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")


def log_format() -> str:
    value = os.environ.get("GPUOBS_LOG_FORMAT", "text").strip().lower() or "text"
    if value not in FORMATS:
        raise ValueError(f"GPUOBS_LOG_FORMAT must be text or json, not {value!r}")
    return value


def accepted_id(incoming: str | None) -> str:
    """The caller's request id when it is a sane one, else a new one."""
    return incoming if incoming and _VALID_ID.fullmatch(incoming) else uuid.uuid4().hex


# -- what every line carries ----------------------------------------------------------------------


class ContextFilter(logging.Filter):
    """Puts ``request_id``, ``task_id`` and ``task_name`` on every record (None when absent);
    for the text format also ``context``, the two that are set (``-`` for none)."""

    def __init__(self, text: bool = False) -> None:
        super().__init__()
        self.text = text

    def filter(self, record: logging.LogRecord) -> bool:
        task = current_task
        task_id = getattr(task.request, "id", None) if task else None
        record.request_id = getattr(record, "request_id", None) or request_id.get() or None
        record.task_id = task_id
        record.task_name = task.name if task_id else None
        if self.text:
            parts = [f"request={record.request_id}" if record.request_id else ""]
            parts.append(f"task={record.task_name}[{task_id}]" if task_id else "")
            record.context = " ".join(p for p in parts if p) or "-"
        return True


ACCESS_FIELDS = {"m": "method", "U": "path", "s": "status", "B": "bytes", "h": "remote"}


class GpuobsJsonFormatter(JsonFormatter):
    """One JSON object a line; gunicorn's access lines get their fields, not just the text."""

    def add_fields(
        self, log_data: dict[str, Any], record: logging.LogRecord, message_dict: dict[str, Any]
    ) -> None:
        super().add_fields(log_data, record, message_dict)
        atoms = record.args
        if record.name == "gunicorn.access" and isinstance(atoms, Mapping):
            for atom, name in ACCESS_FIELDS.items():
                if atom in atoms:
                    log_data[name] = atoms[atom]
            if "D" in atoms:
                log_data["duration_ms"] = round(int(atoms["D"]) / 1000, 3)
            log_data["request_id"] = atoms.get("{x-request-id}o") or log_data.get("request_id")


JSON_FIELDS = (
    "%(asctime)s %(levelname)s %(name)s %(message)s %(request_id)s %(task_id)s %(task_name)s"
)
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s [%(context)s]: %(message)s"


def formatters() -> dict[str, dict[str, Any]]:
    """The ``formatters`` of a dictConfig: ``gpuobs``, in the chosen format."""
    if log_format() == "json":
        return {
            "gpuobs": {
                "()": GpuobsJsonFormatter,
                "fmt": JSON_FIELDS,
                "rename_fields": {"asctime": "time", "levelname": "level", "name": "logger"},
            }
        }
    return {"gpuobs": {"format": TEXT_FORMAT}}


def logging_config(level: str) -> dict[str, Any]:
    """Django's ``LOGGING`` (and the Celery worker's and beat's, :func:`configure_celery`)."""
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "filters": {"context": {"()": ContextFilter, "text": log_format() == "text"}},
        "formatters": formatters(),
        "handlers": {
            "console": {
                "class": "logging.StreamHandler",
                "formatter": "gpuobs",
                "filters": ["context"],
            }
        },
        "root": {"handlers": ["console"], "level": level},
    }


def gunicorn_logconfig() -> dict[str, Any]:
    """gunicorn's ``logconfig_dict``: its error and access loggers through the same handler."""
    config = logging_config(os.environ.get("DJANGO_LOG_LEVEL", "INFO"))
    config["loggers"] = {
        name: {"handlers": ["console"], "level": "INFO", "propagate": False}
        for name in ("gunicorn.error", "gunicorn.access")
    }
    return config


# -- requests -------------------------------------------------------------------------------------


def start_request(sender: Any = None, environ: Mapping[str, Any] | None = None, **_: Any) -> None:
    """``request_started``: this request's id, before any middleware (and Django's own log line
    of a 4xx/5xx, written after the middleware, still has it)."""
    request_id.set(accepted_id((environ or {}).get("HTTP_X_REQUEST_ID")))


def end_request(sender: Any = None, **_: Any) -> None:
    request_id.set("")


request_started.connect(start_request, dispatch_uid="gpuobs-request-id")
request_finished.connect(end_request, dispatch_uid="gpuobs-request-id")


class RequestIdMiddleware:
    """Sends the request's id back as ``X-Request-ID`` (and keeps it on ``request.request_id``)."""

    def __init__(self, get_response: Callable[[Any], Any]) -> None:
        self.get_response = get_response

    def __call__(self, request: Any) -> Any:
        if not request_id.get():  # a caller that sent no request_started (an ASGI test, say)
            request_id.set(accepted_id(request.headers.get(HEADER)))
        request.request_id = request_id.get()
        response = self.get_response(request)
        response[HEADER] = request.request_id
        return response


# -- Celery ---------------------------------------------------------------------------------------

_task_tokens: dict[str, contextvars.Token[str]] = {}


@signals.before_task_publish.connect
def add_request_id_header(headers: dict[str, Any] | None = None, **_: Any) -> None:
    """A task sent while serving a request (or running a task that has one) carries its id."""
    current = request_id.get()
    if current and headers is not None:
        headers.setdefault(TASK_HEADER, current)


@signals.task_prerun.connect
def take_request_id(task_id: str = "", task: Any = None, **_: Any) -> None:
    request = getattr(task, "request", None)
    sent = getattr(request, TASK_HEADER, None) or (getattr(request, "headers", None) or {}).get(
        TASK_HEADER
    )
    if sent:
        _task_tokens[task_id] = request_id.set(accepted_id(sent))


@signals.task_postrun.connect
def drop_request_id(task_id: str = "", **_: Any) -> None:
    token = _task_tokens.pop(task_id, None)
    if token is not None:
        request_id.reset(token)


def configure_celery(**_: Any) -> None:
    """``setup_logging``: the worker and beat log through Django's ``LOGGING`` (the same format
    as the web), not Celery's own."""
    import logging.config  # noqa: PLC0415 -- only where Celery sets up logging

    from django.conf import settings  # noqa: PLC0415 -- Celery's signal: Django is configured

    logging.config.dictConfig(settings.LOGGING)
