"""Authentication and permissions of the machine API.

Tokens are DRF's (``rest_framework.authtoken``). Alertmanager and most webhook senders can only
send ``Authorization: Bearer <token>``, so the same tokens are accepted with either keyword.

Roles stay minimal: a sender needs the one model permission its endpoint writes with (events:
``diagnosis.add_schedulerevent``; Alertmanager: ``diagnosis.add_incident``), or staff. Give a
machine its own user with just that permission and a token.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.utils import timezone
from rest_framework import exceptions
from rest_framework.authentication import SessionAuthentication, TokenAuthentication
from rest_framework.permissions import BasePermission

from diagnosis.models import ApiToken
from diagnosis.models.tokens import token_digest
from diagnosis.throttling import ThrottleBeforeAuthentication


class BearerTokenAuthentication(TokenAuthentication):
    keyword = "Bearer"


class HashedTokenAuthentication(TokenAuthentication):
    """``Token <key>`` or ``Bearer <key>`` checked against the hashed tokens
    (:class:`diagnosis.models.ApiToken`): an expired token is refused, a used one records when.
    A key that is no hashed token falls through to DRF's plain tokens of existing clients."""

    keywords = ("Token", "Bearer")

    def authenticate(self, request: Any) -> tuple[Any, Any] | None:
        header = request.META.get("HTTP_AUTHORIZATION", "").split()
        if len(header) != 2 or header[0] not in self.keywords:
            return None
        row = ApiToken.objects.select_related("user").filter(digest=token_digest(header[1])).first()
        if row is None:
            return None
        if row.expired:
            raise exceptions.AuthenticationFailed("token expired")
        if not row.user.is_active:
            raise exceptions.AuthenticationFailed("user inactive or deleted")
        now = timezone.now()
        if row.last_used_at is None or now - row.last_used_at > LAST_USED_GRANULARITY:
            ApiToken.objects.filter(pk=row.pk).update(last_used_at=now)
        return row.user, row


LAST_USED_GRANULARITY = timedelta(minutes=1)  # at most one write a minute per token

AUTHENTICATION = [
    ThrottleBeforeAuthentication,  # authenticates nobody: throttles before any credential
    HashedTokenAuthentication,
    TokenAuthentication,
    BearerTokenAuthentication,
    SessionAuthentication,
]


def permission_or_staff(permission: str) -> type[BasePermission]:
    """A permission class: an authenticated user with ``permission``, or staff."""

    class PermissionOrStaff(BasePermission):
        message = f"needs the {permission} permission (or staff)"

        def has_permission(self, request: Any, view: Any) -> bool:
            user = request.user
            return bool(
                user and user.is_authenticated and (user.is_staff or user.has_perm(permission))
            )

    PermissionOrStaff.__name__ = f"Has_{permission.replace('.', '_')}_OrStaff"
    return PermissionOrStaff


CanRecordSchedulerEvents = permission_or_staff("diagnosis.add_schedulerevent")
CanReportIncidents = permission_or_staff("diagnosis.add_incident")
