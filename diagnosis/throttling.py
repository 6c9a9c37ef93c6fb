"""Login lockout and API throttles (issue #12, defect 5; issue #28, item 5).

**Logins** go through django-axes: after ``GPUOBS_LOGIN_FAILURE_LIMIT`` failures for one user
name from one client address the pair is locked out for ``GPUOBS_LOGIN_COOLOFF_MINUTES`` (a 429,
even with the right password), and every failure is logged (logger ``axes``) and kept in the
database (the admin's "Access attempts"). The client address is :func:`client_address`: behind a
reverse proxy listed in ``GPUOBS_TRUSTED_PROXIES`` the address the proxy saw, so five wrong
passwords from one place lock that place out, not everyone behind the proxy. Past that many
failures of one user name from anywhere, each next try of the name waits a little longer (1 s,
2 s, 4 s ... at most a minute): guesses spread over many addresses slow down, and nobody can
lock a known user out (:func:`login_wait_s`; ``manage.py users unlock NAME`` clears both).

**API clients** are counted in the shared cache (``settings.CACHES["throttle"]``: Redis when
there is one, so every gunicorn worker counts into the same number; the process's memory in the
embedded mode), in fixed windows with an atomic increment. Before any credential is checked
(:class:`ThrottleBeforeAuthentication`, the first authentication class), a caller without
credentials counts against ``GPUOBS_API_RATE_ANON`` per client address, and a client address
whose credentials failed ``GPUOBS_API_RATE_FAILED`` times in the window is refused without
looking at the next one (counted by diagnosis/api/errors.py); an authenticated user counts
against ``GPUOBS_API_RATE_USER``. A throttled call is a 429 with ``Retry-After``.
docs/operations.md, "Logins and API clients" and "Behind a reverse proxy".
Machine senders (Alertmanager, scheduler events) have a rate of their own per sender
(``GPUOBS_API_RATE_SENDER``, counted the same way), so one sender's burst is refused before it
costs the web.
"""

from __future__ import annotations

import ipaddress
import logging
import time
from functools import cache
from typing import Any

from axes.backends import AxesStandaloneBackend
from axes.exceptions import AxesBackendPermissionDenied
from django.conf import settings
from django.contrib.auth.signals import user_logged_in, user_login_failed
from django.core.cache import caches
from django.core.exceptions import PermissionDenied
from django.dispatch import receiver
from django.http import HttpRequest
from rest_framework import exceptions
from rest_framework.authentication import BaseAuthentication
from rest_framework.settings import api_settings
from rest_framework.throttling import SimpleRateThrottle

log = logging.getLogger(__name__)

THROTTLE_CACHE = "throttle"


def cache_errors() -> tuple[type[Exception], ...]:
    """What a shared-cache call may raise; redis (whose package loads ``redis.asyncio``, 0.15 s)
    is imported only when one was raised: an ``except`` evaluates its types then (#35)."""
    from redis.exceptions import RedisError  # noqa: PLC0415 -- see above

    return (RedisError, OSError, ValueError)


class LoginThrottleBackend(AxesStandaloneBackend):
    """django-axes's check on every login through a request (the login form, the admin), and
    the user name's progressive delay (:func:`login_wait_s`). A caller without a request (a
    management command, the test client's ``login``) cannot be attributed to an address and is
    left to the next backend, which checks the password."""

    def authenticate(
        self,
        request: HttpRequest | None,
        username: str | None = None,
        password: str | None = None,
        **kwargs: Any,
    ) -> None:
        if request is None:
            return None
        wait = login_wait_s(username)
        if wait > 0:  # refused unchecked, and not counted as one more failure
            request.gpuobs_login_wait_s = wait  # type: ignore[attr-defined]
            raise PermissionDenied(f"wait {wait:.0f} s")
        try:
            return super().authenticate(request, username, password, **kwargs)
        except AxesBackendPermissionDenied:  # locked out: no password was checked either
            request.gpuobs_login_unchecked = True  # type: ignore[attr-defined]
            raise


# -- a user name's progressive delay ------------------------------------------------------------
# The lockout above is per user name AND address, so guesses spread over many addresses are not
# stopped by it. Past GPUOBS_LOGIN_FAILURE_LIMIT failures of one user name from anywhere, each
# next try of that name waits 1 s, then 2, 4 ... at most LOGIN_DELAY_MAX_S after the latest
# failure: guessing slows down without a hard lock anyone can set off for everyone. Counted in
# the shared cache, forgotten GPUOBS_LOGIN_COOLOFF_MINUTES after the latest failure or at the
# next good login; `manage.py users unlock NAME` clears it with the name's lockouts.

LOGIN_DELAY_MAX_S = 60.0


def _now() -> float:
    return time.time()


def _login_keys(username: str | None) -> tuple[str, str]:
    name = (username or "").strip().lower()[:150]
    return f"login-failures:{name}", f"login-last-failure:{name}"


def login_wait_s(username: str | None) -> float:
    """Seconds the next login try of ``username`` must still wait (0: none)."""
    count_key, last_key = _login_keys(username)
    try:
        stored = caches[THROTTLE_CACHE].get_many([count_key, last_key])
    except cache_errors() as error:
        log.warning("login delay not read (%s): %s", THROTTLE_CACHE, error)
        return 0.0
    over = int(stored.get(count_key) or 0) - settings.AXES_FAILURE_LIMIT
    if over <= 0:
        return 0.0
    delay = min(2.0 ** (over - 1), LOGIN_DELAY_MAX_S)
    return max(0.0, float(stored.get(last_key) or 0) + delay - _now())


def note_login_failure(username: str | None) -> None:
    """One more failed login of ``username`` (from any address)."""
    count_key, last_key = _login_keys(username)
    keep_s = int(settings.AXES_COOLOFF_TIME * 3600)
    store = caches[THROTTLE_CACHE]
    try:
        store.add(count_key, 0, keep_s)
        store.incr(count_key)
        store.touch(count_key, keep_s)
        store.set(last_key, _now(), keep_s)
    except cache_errors() as error:
        log.warning("login failure not counted (%s): %s", THROTTLE_CACHE, error)


def forget_login_failures(username: str | None) -> None:
    """``username`` logged in, or an admin unlocked it: no delay left."""
    try:
        caches[THROTTLE_CACHE].delete_many(list(_login_keys(username)))
    except cache_errors() as error:
        log.warning("login delay not cleared (%s): %s", THROTTLE_CACHE, error)


@receiver(user_login_failed)
def _count_failed_login(
    sender: Any, credentials: dict[str, Any], request: HttpRequest | None = None, **kwargs: Any
) -> None:
    if request is None or getattr(request, "gpuobs_login_wait_s", 0):
        return  # no address to blame, or a try refused by the delay itself
    if getattr(request, "gpuobs_login_unchecked", False):
        return  # refused by the lockout: no password was checked
    note_login_failure(credentials.get("username"))


@receiver(user_logged_in)
def _forget_on_login(sender: Any, request: HttpRequest | None, user: Any, **kwargs: Any) -> None:
    forget_login_failures(user.get_username())


# -- the client's address --------------------------------------------------------------------


@cache
def _trusted_proxies(
    spec: tuple[str, ...],
) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
    return tuple(ipaddress.ip_network(item, strict=False) for item in spec)


def _is_trusted(address: str) -> bool:
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    return any(
        ip in network for network in _trusted_proxies(tuple(settings.GPUOBS_TRUSTED_PROXIES))
    )


def client_address(request: Any) -> str | None:
    """The address of the client: ``REMOTE_ADDR``, unless that is a trusted proxy
    (``GPUOBS_TRUSTED_PROXIES``, addresses or networks): then the right-most address of
    ``X-Forwarded-For`` that is not itself a trusted proxy (what the nearest untrusted hop
    was seen as; the left part of the header is the client's to write, and not believed). A
    peer that is no trusted proxy cannot choose its address by sending the header."""
    meta = getattr(request, "META", {})
    remote = meta.get("REMOTE_ADDR") or None
    if remote is None or not _is_trusted(remote):
        return remote
    hops = [hop.strip() for hop in meta.get("HTTP_X_FORWARDED_FOR", "").split(",") if hop.strip()]
    for hop in reversed(hops):
        if not _is_trusted(hop):
            try:
                return str(ipaddress.ip_address(hop))
            except ValueError:
                return remote  # a proxy that forwards garbage: the proxy is the client
    return remote


# -- API throttles in the shared cache --------------------------------------------------------


class SharedRateThrottle(SimpleRateThrottle):
    """A DRF rate counted in the shared cache: one counter per key and fixed window
    (``cache.add`` then ``cache.incr``, atomic in Redis), so N workers allow the rate, not N
    times it. The rate is read when the throttle is made (settings overrides apply). If the
    cache cannot be reached, the call is let through and the failure logged: a broken Redis
    must not take the API down with it."""

    def __init__(self) -> None:
        self.cache = caches[THROTTLE_CACHE]
        self.wait_s = 0.0
        super().__init__()

    def get_rate(self) -> str | None:
        return api_settings.DEFAULT_THROTTLE_RATES.get(self.scope)

    def get_ident(self, request: Any) -> str:
        return client_address(request) or "unknown"

    def _window_key(self, key: str) -> str:
        now = self.timer()
        window = int(now // self.duration)
        self.wait_s = (window + 1) * self.duration - now
        return f"{key}:{window}"

    def count(self, key: str, *, add: bool = True) -> int:
        """The calls counted under ``key`` in this window, this one included when ``add``."""
        key = self._window_key(key)
        try:
            if not add:
                return int(self.cache.get(key) or 0)
            self.cache.add(key, 0, self.duration + 1)
            return int(self.cache.incr(key))
        except cache_errors() as error:
            log.warning("API throttle not counted (%s): %s", THROTTLE_CACHE, error)
            return 0

    def allow_request(self, request: Any, view: Any) -> bool:
        if self.rate is None:
            return True
        key = self.get_cache_key(request, view)
        return key is None or self.count(key) <= self.num_requests

    def wait(self) -> float:
        return self.wait_s


class AnonThrottle(SharedRateThrottle):
    """Callers without credentials, per client address (``GPUOBS_API_RATE_ANON``)."""

    scope = "anon"

    def get_cache_key(self, request: Any, view: Any) -> str:
        return self.cache_format % {"scope": self.scope, "ident": self.get_ident(request)}


class UserThrottle(SharedRateThrottle):
    """Each authenticated user or token, whatever the worker (``GPUOBS_API_RATE_USER``)."""

    scope = "user"

    def get_cache_key(self, request: Any, view: Any) -> str | None:
        user = getattr(request, "user", None)
        if user is None or not user.is_authenticated:
            return None  # counted before authentication (ThrottleBeforeAuthentication)
        return self.cache_format % {"scope": self.scope, "ident": user.pk}


class FailedCredentialThrottle(SharedRateThrottle):
    """Failed credentials per client address (``GPUOBS_API_RATE_FAILED``)."""

    scope = "failed_credentials"

    def get_cache_key(self, request: Any, view: Any) -> str:
        return self.cache_format % {"scope": self.scope, "ident": self.get_ident(request)}

    def exhausted(self, request: Any) -> bool:
        if self.rate is None:
            return False
        return self.count(self.get_cache_key(request, None), add=False) >= self.num_requests

    def record(self, request: Any) -> None:
        if self.rate is not None:
            self.count(self.get_cache_key(request, None))


def presents_credentials(request: Any) -> bool:
    return bool(request.META.get("HTTP_AUTHORIZATION"))


class ThrottleBeforeAuthentication(BaseAuthentication):
    """The first authentication class: it authenticates nobody, and throttles before any
    credential is looked at (DRF would check permissions, answering 401, before its throttles
    ever ran for an anonymous caller). A session user passes (counted as a user afterwards)."""

    def authenticate(self, request: Any) -> None:
        session_user = getattr(request._request, "user", None)
        if session_user is not None and session_user.is_authenticated:
            return None
        if presents_credentials(request):
            failed = FailedCredentialThrottle()
            if failed.exhausted(request):
                raise exceptions.Throttled(failed.wait())
            return None
        anonymous = AnonThrottle()
        if not anonymous.allow_request(request, None):
            raise exceptions.Throttled(anonymous.wait())
        return None

    def authenticate_header(self, request: Any) -> str:
        # DRF asks the first class: an anonymous caller gets 401 with `WWW-Authenticate: Token`
        return "Token"


class SenderRateThrottle(UserThrottle):
    """The receivers' throttle: each sending user or token has ``GPUOBS_API_RATE_SENDER``
    requests, apart from its rate on the rest of the API (Alertmanager retries a 429)."""

    scope = "sender"
