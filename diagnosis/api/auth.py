"""Authentication and permissions of the machine API.

Tokens are DRF's (``rest_framework.authtoken``). Alertmanager and most webhook senders can only
send ``Authorization: Bearer <token>``, so the same tokens are accepted with either keyword.

Senders are scoped: the machine endpoints (topology uploads, scheduler events, Alertmanager)
accept a hashed API token that names the clusters and the kind it may write
(:class:`~diagnosis.choices.SenderKind`; ``manage.py api_token create --user U --cluster C --kind
K``); the staff flag and the model permissions grant nothing there. Give each machine its own user
and a token per cluster (docs/integrations.md#senders-are-scoped).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.utils import timezone
from rest_framework import exceptions
from rest_framework.authentication import SessionAuthentication, TokenAuthentication
from rest_framework.permissions import BasePermission

from diagnosis.choices import SenderKind
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


def sender_permission(kind: str) -> type[BasePermission]:
    """A permission class: a hashed API token naming ``kind`` (which clusters it names, the view
    asks :func:`diagnosis.access.get_cluster_for_sender`)."""

    class SenderPermission(BasePermission):
        message = (
            f"needs an API token scoped to {kind} (manage.py api_token create --cluster C "
            f"--kind {kind})"
        )

        def has_permission(self, request: Any, view: Any) -> bool:
            token = request.auth
            return bool(
                request.user
                and request.user.is_authenticated
                and isinstance(token, ApiToken)
                and token.may_send(kind)
            )

    SenderPermission.__name__ = f"Sends{kind.title()}"
    return SenderPermission


CanUploadTopology = sender_permission(SenderKind.TOPOLOGY)
CanRecordSchedulerEvents = sender_permission(SenderKind.EVENTS)
CanReportIncidents = sender_permission(SenderKind.ALERTS)
