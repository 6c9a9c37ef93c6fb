"""A bad ``GPUOBS_ROLE_MAP``, or a client secret variable that is not set, stops ``manage.py
check`` and start-up, naming what is wrong."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.checks import Error, register

from diagnosis.actions.people.roles import PeopleError
from diagnosis.edge import secrets
from diagnosis.identity.role_map import parse_role_map


@register()
def role_map_parses(app_configs: Any = None, **kwargs: Any) -> list[Error]:
    try:
        parse_role_map(settings.GPUOBS_ROLE_MAP)
    except PeopleError as exc:
        return [Error(str(exc), id="gpuobs.E031")]
    return []


@register()
def oidc_client_secret_is_set(app_configs: Any = None, **kwargs: Any) -> list[Error]:
    name = settings.GPUOBS_OIDC_CLIENT_SECRET_ENV
    if not settings.GPUOBS_OIDC_ISSUER or not name:
        return []
    try:
        secrets.read_env(name)
    except secrets.SecretError as exc:
        return [Error(f"GPUOBS_OIDC_CLIENT_SECRET_ENV: {exc}", id="gpuobs.E032")]
    return []
