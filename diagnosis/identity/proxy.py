"""Trusted-header authentication behind an auth proxy (oauth2-proxy, Pomerium, an ingress with
external auth; docs/operations.md, "Single sign-on").

Off unless ``GPUOBS_AUTH_PROXY_USER_HEADER`` names a header (``X-Forwarded-User``). Then a
request carrying that header is honoured only from an address in
``GPUOBS_AUTH_PROXY_TRUSTED`` (the proxy's, the direct peer: never ``X-Forwarded-For``); from any
other address it is a 403 and logged. The groups header (``GPUOBS_AUTH_PROXY_GROUPS_HEADER``,
comma-separated) is mapped to roles by ``GPUOBS_ROLE_MAP`` when the person is first seen in a
session and whenever the header changes. With the setting off the header means nothing: a
request that sends one is as anonymous as without it.
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.contrib import auth
from django.contrib.auth.backends import RemoteUserBackend
from django.contrib.auth.models import AbstractUser
from django.http import HttpRequest, HttpResponse, JsonResponse

from diagnosis.identity.oidc import may_sign_in_from_idp, sync_roles

logger = logging.getLogger(__name__)

SESSION_GROUPS = "gpuobs_proxy_groups"


def meta_key(header: str) -> str:
    """``X-Forwarded-User`` -> ``HTTP_X_FORWARDED_USER`` (how WSGI names a request header)."""
    return "HTTP_" + header.upper().replace("-", "_")


def trusted_networks() -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    return [ipaddress.ip_network(item, strict=False) for item in settings.GPUOBS_AUTH_PROXY_TRUSTED]


def from_trusted_proxy(request: HttpRequest) -> bool:
    try:
        peer = ipaddress.ip_address(request.META.get("REMOTE_ADDR", ""))
    except ValueError:
        return False
    return any(peer in network for network in trusted_networks())


def _header_groups(request: HttpRequest) -> list[str]:
    raw = request.META.get(meta_key(settings.GPUOBS_AUTH_PROXY_GROUPS_HEADER), "")
    return sorted({group.strip() for group in raw.split(",") if group.strip()})


class ProxyHeaderBackend(RemoteUserBackend):
    """Django's remote-user backend, asked only by :class:`TrustedProxyMiddleware`: the user is
    made just in time, their roles set from the groups header."""

    def authenticate(  # type: ignore[override]
        self, request: HttpRequest | None, proxy_user: str = "", **kwargs: Any
    ) -> AbstractUser | None:
        return super().authenticate(request, remote_user=proxy_user) if proxy_user else None

    def configure_user(
        self, request: HttpRequest, user: AbstractUser, created: bool = True
    ) -> AbstractUser:
        if created:
            user.set_unusable_password()
            user.save(update_fields=["password"])
        if may_sign_in_from_idp(user):
            sync_roles(user, _header_groups(request))
        return user

    def user_can_authenticate(self, user: AbstractUser | None) -> bool:
        if user is not None and not may_sign_in_from_idp(user):
            logger.warning("refused %s from the proxy: a local account with a password", user)
            return False
        return super().user_can_authenticate(user)


class TrustedProxyMiddleware:
    """After ``AuthenticationMiddleware``: logs in the person the trusted proxy names."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        header = settings.GPUOBS_AUTH_PROXY_USER_HEADER
        username = request.META.get(meta_key(header), "").strip() if header else ""
        if username:
            if not from_trusted_proxy(request):
                logger.warning(
                    "refused %s from %s: not a trusted proxy address",
                    header,
                    request.META.get("REMOTE_ADDR", "?"),
                )
                return JsonResponse(
                    {"detail": f"{header} is accepted from the auth proxy only"}, status=403
                )
            self.login(request, username)
        return self.get_response(request)

    def login(self, request: HttpRequest, username: str) -> None:
        groups = _header_groups(request)
        user = request.user
        if (
            user.is_authenticated
            and user.get_username() == username
            and request.session.get(SESSION_GROUPS) == groups
        ):
            return
        person = auth.authenticate(request, proxy_user=username)
        if person is None:  # an inactive account
            auth.logout(request)
            return
        auth.login(request, person)
        request.session[SESSION_GROUPS] = groups
        request.user = person
