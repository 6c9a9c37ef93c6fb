"""URLs of gpuobs. Public: /accounts/login/, /oidc/, /healthz, /livez, /readyz,
/i18n/setlang/, /time-zone/, /static/; /metrics needs a token or basic auth; everything else
needs a login."""

from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_not_required
from django.urls import include, path
from django.views.i18n import set_language

from diagnosis.api import urls as api_urls
from diagnosis.identity import oidc
from diagnosis.lazy_views import LazyView
from diagnosis.pages.accounts import LoginPage
from diagnosis.pages.health import healthz, livez, readyz
from diagnosis.pages.support.navigation import landing

# One API (diagnosis/api/urls.py), two prefixes: the versioned /api/v1/ and the short /api/.
# Each mount is its own URL namespace, so reverse("api-v1:...") names the versioned one.
API_MOUNTS = {"api/v1/": "api-v1", "api/": "api"}

urlpatterns = [
    path("accounts/login/", LoginPage.as_view(), name="login"),
    # single sign-on (OpenID Connect; 404 unless configured; docs/operations.md)
    path("oidc/", include(oidc.urlpatterns)),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    # after a login without ?next=: the page the user's role starts at (a manager: their report)
    path("accounts/landing/", landing, name="landing"),
    path("healthz", healthz, name="healthz"),
    # Kubernetes's liveness (no database) and readiness (database and broker) probes
    path("livez", livez, name="livez"),
    path("readyz", readyz, name="readyz"),
    # POST language=en|zh-hans: the language switch in the page header (docs/ui.md "Language")
    path("i18n/setlang/", login_not_required(set_language), name="set_language"),
    # POST time_zone=<IANA name>: the time zone list beside it (docs/ui.md "Clocks and time zones")
    path("time-zone/", LazyView("diagnosis.pages.accounts:set_time_zone"), name="set_time_zone"),
    # Prometheus exposition for a scrape job (token or basic auth; docs/integrations.md).
    path("metrics", LazyView("diagnosis.api.metrics:MetricsView"), name="metrics"),
    path("admin/", admin.site.urls),
    *(
        path(prefix, include((api_urls.urlpatterns, "api"), namespace=namespace))
        for prefix, namespace in API_MOUNTS.items()
    ),
    path("", include("diagnosis.urls")),
]
