"""Authentication and permissions of the machine API.

Tokens are DRF's (``rest_framework.authtoken``). Alertmanager and most webhook senders can only
send ``Authorization: Bearer <token>``, so the same tokens are accepted with either keyword.

Roles stay minimal: a sender needs the one model permission its endpoint writes with (events:
``diagnosis.add_schedulerevent``; Alertmanager: ``diagnosis.add_incident``), or staff. Give a
machine its own user with just that permission and a token.
"""

from __future__ import annotations

from typing import Any

from rest_framework.authentication import SessionAuthentication, TokenAuthentication
from rest_framework.permissions import BasePermission


class BearerTokenAuthentication(TokenAuthentication):
    keyword = "Bearer"


AUTHENTICATION = [TokenAuthentication, BearerTokenAuthentication, SessionAuthentication]


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
