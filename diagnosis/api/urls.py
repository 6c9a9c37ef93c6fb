"""URLs of the machine API, included under /api/v1/ by gpuobs/urls.py."""

from django.urls import path

from diagnosis.api import recommendations, reports, views

app_name = "api-v1"

urlpatterns = [
    path(
        "clusters/<slug:cluster>/events",
        views.SchedulerEventsView.as_view(),
        name="cluster-events",
    ),
    path("alertmanager", views.AlertmanagerWebhookView.as_view(), name="alertmanager"),
    path(
        "clusters/<slug:cluster>/reports/fairness",
        reports.FairnessReportView.as_view(),
        name="fairness-report",
    ),
    path("clusters/<slug:cluster>/jobs", reports.JobListView.as_view(), name="jobs"),
    path("clusters/<slug:cluster>/jobs/<path:job_id>", reports.JobDetailView.as_view(), name="job"),
    path("clusters/<slug:cluster>/findings", reports.FindingListView.as_view(), name="findings"),
    path(
        "clusters/<slug:cluster>/writes",
        recommendations.ClusterWritesView.as_view(),
        name="cluster-writes",
    ),
]
