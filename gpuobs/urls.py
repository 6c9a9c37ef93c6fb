"""URLs of gpuobs. Public: /accounts/login/, /healthz, /static/; everything else needs a login."""

from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

from diagnosis.views import healthz
from gpuobs.api import router

urlpatterns = [
    path("accounts/login/", auth_views.LoginView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("healthz", healthz, name="healthz"),
    path("admin/", admin.site.urls),
    path("api/v1/", include("diagnosis.api.urls")),
    path("api/", include(router.urls)),
    path("", include("diagnosis.urls")),
]
