"""The API's exception handler (``REST_FRAMEWORK["EXCEPTION_HANDLER"]``): DRF's, and a
credential that failed also counts against its client address (diagnosis/throttling.py)."""

from __future__ import annotations

from typing import Any

from rest_framework import exceptions
from rest_framework.response import Response
from rest_framework.views import exception_handler

from diagnosis.throttling import FailedCredentialThrottle, presents_credentials


def api_exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    request = context.get("request")
    refused = isinstance(exc, exceptions.AuthenticationFailed | exceptions.NotAuthenticated)
    if request is not None and refused and presents_credentials(request):
        FailedCredentialThrottle().record(request)
    return exception_handler(exc, context)
