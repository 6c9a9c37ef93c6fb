"""``GET /api/v1/schema``: the OpenAPI schema (diagnosis/api/schema.py), to logged-in users and
token clients. Apart from the schema's module, which drf-spectacular's view itself imports (the
schema class is a setting)."""

from __future__ import annotations

from drf_spectacular.views import SpectacularAPIView
from rest_framework.permissions import IsAuthenticated


class SchemaView(SpectacularAPIView):
    permission_classes = [IsAuthenticated]
