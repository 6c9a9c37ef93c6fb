"""Request hygiene and response headers every page and endpoint shares (issue #12, defect 8).

- A NUL (``%00``) in the path or the query string is a 400 before any view runs (PostgreSQL
  cannot compare a NUL, so it used to be a 500 wherever a filter reached the database).
- A JSON body nested deeper than :data:`MAX_JSON_DEPTH` or larger than ``GPUOBS_MAX_JSON_BYTES``
  is a 400 (413 for size) before it is parsed (Python's parser gives up at ~1,000 levels with a
  RecursionError, i.e. a 500, even for a caller with no access).
- An authenticated response is ``Cache-Control: no-store, private`` unless the view said
  otherwise: pages, CSV and PDF exports hold data a shared cache must not keep.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from django.conf import settings
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
