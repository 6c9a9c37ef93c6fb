"""The API's OpenAPI schema (drf-spectacular), published at ``/api/v1/schema`` to logged-in
users and token clients (a fuzzer reads it: tests/app/security/test_security_fuzz.py; a
generated client and the ``gpuobs`` command line use it: docs/cli.md).

Every operation declares the errors it can answer, each with the one error body
(:class:`diagnosis.api.errors.ErrorSerializer`): :class:`ApiSchema` adds those a view does not
declare itself (tests/app/api/test_schema.py walks the schema for them).
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.openapi import AutoSchema
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse

from diagnosis.api.errors import ErrorSerializer

# The errors any operation may answer, and why (the middleware's 503, the throttles' 429).
EVERY_OPERATION = {
    "401": "No credentials, or credentials that are wrong or expired.",
    "403": "The caller's role does not allow this (or a session's write lacks its CSRF token).",
    "429": "Too many requests: wait for the `Retry-After` header's seconds.",
    "503": "The database (or the task broker) is unavailable: retry after `Retry-After`.",
}
BAD_INPUT = "A parameter or the body is invalid: `errors` names each bad field by its path."
NOT_FOUND = "No such object, or none the caller may see (hidden is 404, never an empty answer)."


def versioned_only(endpoints: list[tuple[Any, ...]], **kwargs: Any) -> list[tuple[Any, ...]]:
    """One API, two mounts (gpuobs/urls.py): the schema describes the versioned one."""
    return [endpoint for endpoint in endpoints if endpoint[0].startswith("/api/v1/")]


def error(description: str) -> OpenApiResponse:
    """An error answer of the API, with its one body (for ``extend_schema(responses=...)``)."""
    return OpenApiResponse(ErrorSerializer, description=description)


class ApiSchema(AutoSchema):
    """drf-spectacular's schema of a view, and the errors the view does not declare: 400 where
    it takes a body or query parameters, 404 where its path names an object or it is a
    paginated list (a page past the end), and :data:`EVERY_OPERATION`'s everywhere."""

    def _get_response_bodies(self, direction: Any = "response") -> dict[str, Any]:
        responses = super()._get_response_bodies(direction)
        for code, why in self._errors().items():
            if code not in responses:
                responses[code] = self._get_response_for_code(error(why), code, None, direction)
        return responses

    def _errors(self) -> dict[str, str]:
        errors: dict[str, str] = {}
        if self._takes_body() or self._takes_query():
            errors["400"] = BAD_INPUT
        if "{" in self.path or (self._is_list_view() and self._get_paginator() is not None):
            errors["404"] = NOT_FOUND
        return {**errors, **EVERY_OPERATION}

    def _takes_body(self) -> bool:
        return self.method in ("POST", "PUT", "PATCH") and self.get_request_serializer() is not None

    def _takes_query(self) -> bool:
        return any(
            not isinstance(parameter, OpenApiParameter) or parameter.location == "query"
            for parameter in self.get_override_parameters()
        )


class BearerTokenScheme(OpenApiAuthenticationExtension):
    """``Authorization: Bearer <token>`` (Alertmanager's credentials), beside DRF's ``Token``."""

    target_class = "diagnosis.api.auth.BearerTokenAuthentication"
    name = "bearerAuth"

    def get_security_definition(self, auto_schema: Any) -> dict[str, str]:
        return {"type": "http", "scheme": "bearer"}


class HashedTokenScheme(OpenApiAuthenticationExtension):
    """``Authorization: Token <key>`` (or ``Bearer <key>``) checked against the hashed tokens;
    named apart from DRF's own ``tokenAuth``, which still serves the legacy plain tokens."""

    target_class = "diagnosis.api.auth.HashedTokenAuthentication"
    name = "hashedTokenAuth"

    def get_security_definition(self, auto_schema: Any) -> dict[str, str]:
        return {
            "type": "apiKey",
            "in": "header",
            "name": "Authorization",
            "description": "Token <key> or Bearer <key> (manage.py api_token)",
        }
