"""Single sign-on with OpenID Connect (docs/operations.md, "Single sign-on").

mozilla-django-oidc runs the authorization-code flow (state, nonce and PKCE kept in the session,
the ID token's RS256 signature checked against the provider's JWKS). What gpuobs adds:

- the provider's endpoints come from its discovery document
  (``GPUOBS_OIDC_ISSUER`` + ``/.well-known/openid-configuration``, read once per process), so a
  company sets one URL, not four;
- the ID token's ``iss`` must be that issuer and its ``aud`` must hold the client id (the
  library leaves both unchecked);
- the client secret is read from the ``GPUOBS_SECRET_*`` variable that
  ``GPUOBS_OIDC_CLIENT_SECRET_ENV`` names, never from a setting;
- users are matched and made just in time by the username claim
  (``GPUOBS_OIDC_USERNAME_CLAIM``), and at each login their roles are re-synced from the groups
  claim (``GPUOBS_OIDC_GROUPS_CLAIM``) through ``GPUOBS_ROLE_MAP``.
"""

from __future__ import annotations

import functools
import logging
from typing import Any

import requests
from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.decorators import login_not_required
from django.contrib.auth.models import AbstractUser
from django.core.exceptions import SuspiciousOperation
from django.http import Http404, HttpRequest, HttpResponse
from django.urls import path
from mozilla_django_oidc.auth import OIDCAuthenticationBackend
from mozilla_django_oidc.utils import import_from_settings
from mozilla_django_oidc.views import (
    OIDCAuthenticationCallbackView,
    OIDCAuthenticationRequestView,
)

from diagnosis.actions.people.roles import set_roles
from diagnosis.edge import secrets
from diagnosis.identity.role_map import grant_for_groups, parse_role_map

logger = logging.getLogger(__name__)

DISCOVERY_PATH = "/.well-known/openid-configuration"
# mozilla-django-oidc's setting for each endpoint -> its key in the discovery document
ENDPOINTS = {
    "OIDC_OP_AUTHORIZATION_ENDPOINT": "authorization_endpoint",
    "OIDC_OP_TOKEN_ENDPOINT": "token_endpoint",
    "OIDC_OP_USER_ENDPOINT": "userinfo_endpoint",
    "OIDC_OP_JWKS_ENDPOINT": "jwks_uri",
}


def enabled() -> bool:
    return bool(settings.GPUOBS_OIDC_ISSUER)


@functools.cache
def _discovery(issuer: str) -> dict[str, Any]:
    response = requests.get(issuer.rstrip("/") + DISCOVERY_PATH, timeout=settings.OIDC_TIMEOUT)
    response.raise_for_status()
    document = response.json()
    missing = [key for key in (*ENDPOINTS.values(), "issuer") if not document.get(key)]
    if missing:
        raise SuspiciousOperation(f"the OpenID provider's discovery lacks {', '.join(missing)}")
    return document


def provider() -> dict[str, Any]:
    """The discovery document of ``GPUOBS_OIDC_ISSUER`` (fetched once per process and issuer)."""
    return _discovery(settings.GPUOBS_OIDC_ISSUER)


def oidc_setting(attr: str, *default: Any) -> Any:
    """What mozilla-django-oidc asks its settings for: the endpoints from discovery, the client
    secret from its ``GPUOBS_SECRET_*`` variable, the rest from Django's settings."""
    if attr in ENDPOINTS:
        return provider()[ENDPOINTS[attr]] if enabled() else None
    if attr == "OIDC_RP_CLIENT_SECRET":
        name = settings.GPUOBS_OIDC_CLIENT_SECRET_ENV
        return secrets.read_env(name) if name else ""  # none: a public client (PKCE)
    return import_from_settings(attr, *default)


def _groups(claims: dict[str, Any]) -> list[str]:
    value = claims.get(settings.GPUOBS_OIDC_GROUPS_CLAIM) or []
    if isinstance(value, str):
        return [value]
    return [str(group) for group in value] if isinstance(value, list) else []


def may_sign_in_from_idp(user: AbstractUser) -> bool:
    """An IdP (or the auth proxy) may sign in as an account it made, or one made for it without
    a password (``users add`` without ``--password-stdin``); never as a local account with a
    password, such as the break-glass ``admin``: an IdP user who picks that name takes nothing
    over."""
    return user.is_active and not user.has_usable_password()


def sync_roles(user: AbstractUser, groups: list[str]) -> None:
    """``user``'s roles and tenants as ``GPUOBS_ROLE_MAP`` maps ``groups`` (those taken away
    there go here too)."""
    grant = grant_for_groups(parse_role_map(settings.GPUOBS_ROLE_MAP), groups)
    set_roles(user, grant)


class OIDCBackend(OIDCAuthenticationBackend):
    """mozilla-django-oidc's backend with discovery, issuer and audience checks, users by the
    username claim and roles from the groups claim. Listed in ``AUTHENTICATION_BACKENDS``
    always; it answers nothing while ``GPUOBS_OIDC_ISSUER`` is unset."""

    get_settings = staticmethod(oidc_setting)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # The endpoints are read when a login uses them (discovery), not whenever Django
        # instantiates its backends.
        self.UserModel = get_user_model()
        self.OIDC_RP_SIGN_ALGO = settings.OIDC_RP_SIGN_ALGO
        self.OIDC_RP_IDP_SIGN_KEY = None

    def authenticate(self, request: HttpRequest | None, **kwargs: Any) -> AbstractUser | None:
        if not enabled() or request is None or "code" not in request.GET:
            return None  # not the provider's callback (a password login, the proxy's header)
        self.OIDC_RP_CLIENT_ID = settings.OIDC_RP_CLIENT_ID
        self.OIDC_RP_CLIENT_SECRET = oidc_setting("OIDC_RP_CLIENT_SECRET")
        for attr in ENDPOINTS:
            setattr(self, attr, oidc_setting(attr))
        try:
            return super().authenticate(request, **kwargs)
        except SuspiciousOperation as exc:  # a bad token: the login fails, the page says so
            logger.warning("single sign-on refused: %s", exc)
            return None

    def get_payload_data(self, token: bytes | str, key: Any) -> dict[str, Any]:
        payload = super().get_payload_data(token, key)
        if payload.get("iss") != provider()["issuer"]:
            raise SuspiciousOperation("the ID token's issuer is not the configured provider")
        audience = payload.get("aud")
        audiences = audience if isinstance(audience, list) else [audience]
        if settings.OIDC_RP_CLIENT_ID not in audiences:
            raise SuspiciousOperation("the ID token is not for this client (aud)")
        return payload

    def verify_claims(self, claims: dict[str, Any]) -> bool:
        return bool(self._username(claims))

    def _username(self, claims: dict[str, Any]) -> str:
        value = claims.get(settings.GPUOBS_OIDC_USERNAME_CLAIM) or ""
        return str(value)[: get_user_model()._meta.get_field("username").max_length]

    def filter_users_by_claims(self, claims: dict[str, Any]):
        return self.UserModel.objects.filter(username=self._username(claims))

    def create_user(self, claims: dict[str, Any]) -> AbstractUser:
        user = self.UserModel.objects.create_user(
            self._username(claims), email=claims.get("email") or ""
        )  # no password: this person logs in through the IdP only
        logger.info("single sign-on: created user %s", user.get_username())
        return self.update_user(user, claims)

    def update_user(self, user: AbstractUser, claims: dict[str, Any]) -> AbstractUser:
        if not may_sign_in_from_idp(user):
            raise SuspiciousOperation(
                f"{user.get_username()} is a local account with a password (not the IdP's)"
            )
        sync_roles(user, _groups(claims))
        return user


class _Configured:
    """A 404 while single sign-on is not configured."""

    def dispatch(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if not enabled():
            raise Http404("single sign-on is not configured")
        return super().dispatch(request, *args, **kwargs)  # type: ignore[misc]


class LoginStart(_Configured, OIDCAuthenticationRequestView):
    get_settings = staticmethod(oidc_setting)


class LoginCallback(_Configured, OIDCAuthenticationCallbackView):
    get_settings = staticmethod(oidc_setting)


# mounted at /oidc/ (gpuobs/urls.py); the names are the library's own
urlpatterns = [
    path(
        "authenticate/",
        login_not_required(LoginStart.as_view()),
        name="oidc_authentication_init",
    ),
    path(
        "callback/",
        login_not_required(LoginCallback.as_view()),
        name="oidc_authentication_callback",
    ),
]
