"""Login lockout and API throttles (issue #12, defect 5).

Logins go through django-axes: after ``GPUOBS_LOGIN_FAILURE_LIMIT`` failures for one user name
from one address the pair is locked out for ``GPUOBS_LOGIN_COOLOFF_MINUTES`` (a 429, even with
the right password), and every failure is logged (logger ``axes``) and kept in the database
(the admin's "Access attempts"). API clients are throttled by DRF (``GPUOBS_API_RATE_USER``,
``GPUOBS_API_RATE_ANON``); a throttled call is a 429 with ``Retry-After``. Machine senders
(Alertmanager, scheduler events) have a rate of their own per sender
(``GPUOBS_API_RATE_SENDER``), so one sender's burst is refused before it costs the web.
"""

from __future__ import annotations

from typing import Any

from axes.backends import AxesStandaloneBackend
from django.http import HttpRequest
from rest_framework.throttling import UserRateThrottle


class LoginThrottleBackend(AxesStandaloneBackend):
    """django-axes's check on every login through a request (the login form, the admin). A
    caller without a request (a management command, the test client's ``login``) cannot be
    attributed to an address and is left to the next backend, which checks the password."""

    def authenticate(
        self,
        request: HttpRequest | None,
        username: str | None = None,
        password: str | None = None,
        **kwargs: Any,
    ) -> None:
        if request is None:
            return None
        return super().authenticate(request, username, password, **kwargs)


class SenderRateThrottle(UserRateThrottle):
    """The receivers' throttle: each sending user or token has ``GPUOBS_API_RATE_SENDER``
    requests, apart from its rate on the rest of the API (Alertmanager retries a 429)."""

    scope = "sender"
