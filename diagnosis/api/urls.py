"""URLs of the machine API, included under /api/v1/ by gpuobs/urls.py."""

from django.urls import path

from diagnosis.api import recommendations, views

app_name = "api-v1"

urlpatterns = [
    path(
        "clusters/<slug:cluster>/events",
        views.SchedulerEventsView.as_view(),
        name="cluster-events",
    ),
    path("alertmanager", views.AlertmanagerWebhookView.as_view(), name="alertmanager"),
    path(
        "clusters/<slug:cluster>/writes",
        recommendations.ClusterWritesView.as_view(),
        name="cluster-writes",
    ),
]
