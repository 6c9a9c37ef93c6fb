"""The API's one error body, and its exception handler (``REST_FRAMEWORK["EXCEPTION_HANDLER"]``).

Every answer of 400 and above is ``{"detail": "<one sentence>"}``; a 400 that names fields adds
``"errors": {"<path>": ["<message>", ...]}``, each bad field by its path (``events[1].time``),
however deep the serializer that refused it (docs/cli.md "Errors"). A conflict (409) may add
what the caller needs to retry (``harm``, ``jobs_to_evict``). A credential that failed also
counts against its client address (diagnosis/throttling.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rest_framework import exceptions, serializers
from rest_framework.response import Response
from rest_framework.views import exception_handler

from diagnosis.throttling import FailedCredentialThrottle, presents_credentials

INVALID = "invalid request"
NON_FIELD = "non_field_errors"


class ErrorSerializer(serializers.Serializer):
    """The error body of every answer of 400 and above."""

    detail = serializers.CharField(help_text="What went wrong, in one sentence.")
    errors = serializers.DictField(
        child=serializers.ListField(child=serializers.CharField()),
        required=False,
        help_text="400 only: each bad field, by its path (`events[1].time`), and its messages.",
    )


def field_errors(detail: Any, path: str = "") -> dict[str, list[str]]:
    """DRF's nested ``ValidationError.detail`` as one flat mapping of path to messages."""
    if isinstance(detail, Mapping):
        flat: dict[str, list[str]] = {}
        for key, value in detail.items():
            step = f"[{key}]" if isinstance(key, int) or str(key).isdigit() else str(key)
            joined = step if not path else f"{path}{step}" if step[0] == "[" else f"{path}.{step}"
            for name, messages in field_errors(value, joined).items():
                flat.setdefault(name, []).extend(messages)
        return flat
    if isinstance(detail, list | tuple):
        if all(not isinstance(item, Mapping | list | tuple) for item in detail):
            return {path or NON_FIELD: [str(item) for item in detail]}
        flat = {}
        for index, item in enumerate(detail):
            if item:
                flat.update(field_errors(item, f"{path}[{index}]"))
        return flat
    return {path or NON_FIELD: [str(detail)]}


def summary(flat: Mapping[str, list[str]]) -> str:
    """The ``detail`` of a 400: the bad fields named, or the message of a refusal of no field."""
    if set(flat) == {NON_FIELD}:
        return "; ".join(flat[NON_FIELD])
    return f"{INVALID}: " + ", ".join(flat)


def invalid(errors: Mapping[str, Any], detail: str = "") -> Response:
    """A 400 naming each bad field (``errors``: path to a message or messages)."""
    flat = field_errors(dict(errors))
    return Response({"detail": detail or summary(flat), "errors": flat}, status=400)


def paths_and_messages(lines: list[str]) -> dict[str, list[str]]:
    """``["alerts[0].status: expected ..."]`` (an edge parser's problems) by their paths."""
    errors: dict[str, list[str]] = {}
    for line in lines:
        path, sep, message = line.partition(": ")
        errors.setdefault(path if sep else NON_FIELD, []).append(message if sep else line)
    return errors


def api_exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    request = context.get("request")
    refused = isinstance(exc, exceptions.AuthenticationFailed | exceptions.NotAuthenticated)
    if request is not None and refused and presents_credentials(request):
        FailedCredentialThrottle().record(request)
    response = exception_handler(exc, context)
    if response is not None and isinstance(exc, exceptions.ValidationError):
        flat = field_errors(exc.detail)
        response.data = {"detail": summary(flat), "errors": flat}
    return response
