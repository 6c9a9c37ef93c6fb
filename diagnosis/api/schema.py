"""The API's OpenAPI schema (drf-spectacular), published at ``/api/v1/schema`` to logged-in
users and token clients (a fuzzer reads it: tests/app/security/test_security_fuzz.py)."""

from __future__ import annotations

from typing import Any

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.views import SpectacularAPIView
from rest_framework.permissions import IsAuthenticated


def versioned_only(endpoints: list[tuple[Any, ...]], **kwargs: Any) -> list[tuple[Any, ...]]:
    """One API, two mounts (gpuobs/urls.py): the schema describes the versioned one."""
    return [endpoint for endpoint in endpoints if endpoint[0].startswith("/api/v1/")]


class SchemaView(SpectacularAPIView):
    permission_classes = [IsAuthenticated]


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
