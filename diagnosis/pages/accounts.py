"""Logging in (docs/ui.md, "Logging in"): the password form unless ``GPUOBS_LOCAL_LOGIN=0``,
and a single sign-on button when OpenID Connect is configured (diagnosis/identity/oidc.py);
the reader's time zone, chosen in the page header (docs/ui.md "Clocks and time zones")."""

from __future__ import annotations

import math
from typing import Any

from django.conf import settings
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_not_required
from django.contrib.auth.forms import AuthenticationForm
from django.http import (
    HttpRequest,
    HttpResponse,
    HttpResponseBadRequest,
    HttpResponseNotAllowed,
    HttpResponseRedirect,
)
from django.utils.http import url_has_allowed_host_and_scheme
from django.utils.translation import gettext
from django.views.decorators.http import require_POST

from diagnosis.identity import oidc
from diagnosis.pages.support import time_zone


class LoginPage(auth_views.LoginView):
    def post(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if not settings.GPUOBS_LOCAL_LOGIN:  # password logins are off: single sign-on only
            return HttpResponseNotAllowed(["GET"])
        return super().post(request, *args, **kwargs)

    def form_invalid(self, form: AuthenticationForm) -> HttpResponse:
        wait = getattr(self.request, "gpuobs_login_wait_s", 0)
        if not wait:
            return super().form_invalid(form)
        # the name's progressive delay (diagnosis/throttling.py): said as such, never checked
        seconds = math.ceil(wait)
        message = gettext(
            "Too many failed logins for this user name: try again in %(seconds)s s."
        ) % {"seconds": seconds}
        context = self.get_context_data(form=form, login_wait_message=message)
        response = self.render_to_response(context, status=429)
        response["Retry-After"] = str(seconds)
        return response

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        return super().get_context_data(
            local_login=settings.GPUOBS_LOCAL_LOGIN,
            sso=oidc.enabled(),
            sso_name=settings.GPUOBS_OIDC_PROVIDER_NAME,
            sso_failed=self.request.GET.get("sso") == "failed",
            **kwargs,
        )


@login_not_required
@require_POST
def set_time_zone(request: HttpRequest) -> HttpResponse:
    """The header's time zone list (POST ``time_zone``, ``next``): kept in a cookie for this
    browser, then back to the page it was sent from; a name that is no IANA zone is a 400."""
    name = request.POST.get("time_zone") or ""
    if time_zone.zone_named(name) is None:
        return HttpResponseBadRequest(gettext("Unknown time zone."), content_type="text/plain")
    target = request.POST.get("next") or "/"
    if not url_has_allowed_host_and_scheme(
        target, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        target = "/"
    response = HttpResponseRedirect(target)
    response.set_cookie(
        time_zone.COOKIE,
        name,
        max_age=time_zone.COOKIE_AGE_S,
        samesite="Lax",
        secure=request.is_secure(),
        httponly=True,
    )
    return response
