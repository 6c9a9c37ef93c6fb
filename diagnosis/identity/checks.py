"""A bad ``GPUOBS_ROLE_MAP`` stops ``manage.py check`` and start-up, naming the entry."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.checks import Error, register

from diagnosis.actions.people.roles import PeopleError
from diagnosis.identity.role_map import parse_role_map


@register()
def role_map_parses(app_configs: Any = None, **kwargs: Any) -> list[Error]:
    try:
        parse_role_map(settings.GPUOBS_ROLE_MAP)
    except PeopleError as exc:
        return [Error(str(exc), id="gpuobs.E031")]
    return []
