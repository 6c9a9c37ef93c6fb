"""Request hygiene and response headers every page and endpoint shares (issue #12, defect 8).

- A NUL (``%00``) in the path or the query string is a 400 before any view runs (PostgreSQL
  cannot compare a NUL, so it used to be a 500 wherever a filter reached the database).
- A JSON body nested deeper than :data:`MAX_JSON_DEPTH` or larger than ``GPUOBS_MAX_JSON_BYTES``
  is a 400 (413 for size) before it is parsed (Python's parser gives up at ~1,000 levels with a
  RecursionError, i.e. a 500, even for a caller with no access).
- An authenticated response is ``Cache-Control: no-store, private`` unless the view said
  otherwise: pages, CSV and PDF exports hold data a shared cache must not keep.
- An API error is JSON, whatever failed (:class:`ApiErrorMiddleware`).
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable

from django.conf import settings
from django.core.signals import got_request_exception
from django.db import DatabaseError
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.utils.cache import patch_cache_control

MAX_JSON_DEPTH = 64
_JSON_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.DOTALL)
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")


def json_depth(body: bytes) -> int:
    """The deepest nesting of arrays and objects in a JSON text (strings skipped)."""
    brackets = _JSON_STRING.sub(b"", body).translate(None, _NOT_BRACKETS)
    depth = deepest = 0
    for byte in brackets:
        depth += 1 if byte in b"[{" else -1
        deepest = max(deepest, depth)
    return deepest


def _refused(status: int, detail: str) -> JsonResponse:
    return JsonResponse({"detail": detail}, status=status)


class RequestHygieneMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        refused = self.check(request)
        response = refused if refused is not None else self.get_response(request)
        user = getattr(request, "user", None)
        authenticated = (user is not None and user.is_authenticated) or bool(
            request.headers.get("Authorization")
        )
        if authenticated and not response.has_header("Cache-Control"):
            patch_cache_control(response, no_store=True, private=True)
        return response

    def check(self, request: HttpRequest) -> HttpResponse | None:
        query = request.META.get("QUERY_STRING", "")
        if "\x00" in request.path or "%00" in query or "\x00" in query:
            return _refused(400, "a NUL (%00) is not allowed in a path or a query")
        if request.method in ("POST", "PUT", "PATCH") and "json" in (request.content_type or ""):
            limit = getattr(settings, "GPUOBS_MAX_JSON_BYTES", 2 * 1024 * 1024)
            length = request.META.get("CONTENT_LENGTH") or "0"
            if length.isdigit() and int(length) > limit:
                return _refused(413, f"a JSON body may be at most {limit} bytes")
            body = request.body
            if len(body) > limit:
                return _refused(413, f"a JSON body may be at most {limit} bytes")
            if json_depth(body) > MAX_JSON_DEPTH:
                return _refused(400, f"JSON nested deeper than {MAX_JSON_DEPTH} levels")
        return None


API_PREFIX = "/api/"


def _remember_exception(
    sender: object, request: HttpRequest | None = None, **kwargs: object
) -> None:
    """``got_request_exception``: keep the exception on its request (ApiErrorMiddleware)."""
    if request is not None:
        request.gpuobs_exception = sys.exc_info()[1]  # type: ignore[attr-defined]


got_request_exception.connect(_remember_exception, dispatch_uid="gpuobs-api-errors")


class ApiErrorMiddleware:
    """The API answers JSON in every state (issue #29): an error Django turned into its HTML
    500 page (a view's, or a middleware's before any view: the session or the user looked up in
    a database that is away) is answered ``{"detail": ...}`` instead; a database error is a 503
    with ``Retry-After`` (the database is away or refused the statement: try again), anything
    else a 500. Outermost but for the security middleware, so it sees every inner answer."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if not request.path.startswith(API_PREFIX) or response.status_code < 500:
            return response
        if "json" in response.get("Content-Type", ""):
            return response
        error = getattr(request, "gpuobs_exception", None)
        if isinstance(error, DatabaseError):
            answer = JsonResponse(
                {"detail": "the database is unavailable; try again shortly"}, status=503
            )
            answer["Retry-After"] = "10"
            return answer
        return JsonResponse({"detail": "internal error"}, status=response.status_code)
