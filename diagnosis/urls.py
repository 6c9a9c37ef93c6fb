"""Pages of gpuobs; each needs a login (LoginRequiredMiddleware). See docs/ui.md."""

from django.urls import path
from django.views.generic import RedirectView

from diagnosis.pages import clusters as views
from diagnosis.pages import incidents as incident_views
from diagnosis.pages import recommendations as recommendation_views
from diagnosis.pages import reports as report_views

app_name = "diagnosis"

urlpatterns = [
    path("", views.cluster_list, name="cluster_list"),
    path("clusters/", RedirectView.as_view(pattern_name="diagnosis:cluster_list")),
    path("clusters/<slug:name>/", views.cluster_overview, name="cluster"),
    path("clusters/<slug:name>/findings/", views.finding_list, name="findings"),
    path("clusters/<slug:name>/findings/<int:finding_id>/", views.finding_detail, name="finding"),
    path("clusters/<slug:name>/incidents/", incident_views.incident_list, name="incidents"),
    path(
        "clusters/<slug:name>/incidents/<int:incident_id>/",
        incident_views.incident_detail,
        name="incident",
    ),
    path(
        "clusters/<slug:name>/incidents/<int:incident_id>/drain/",
        incident_views.incident_drain,
        name="incident_drain",
    ),
    path(
        "clusters/<slug:name>/incidents/<int:incident_id>/<slug:action>/",
        incident_views.incident_action,
        name="incident_action",
    ),
    path(
        "clusters/<slug:name>/recommendations/",
        recommendation_views.recommendation_list,
        name="recommendations",
    ),
    path(
        "clusters/<slug:name>/recommendations/<int:recommendation_id>/",
        recommendation_views.recommendation_detail,
        name="recommendation",
    ),
    path(
        "clusters/<slug:name>/recommendations/<int:recommendation_id>/<slug:action>/",
        recommendation_views.recommendation_action,
        name="recommendation_action",
    ),
    path("clusters/<slug:name>/fairness/", report_views.fairness_report, name="fairness"),
    path(
        "clusters/<slug:name>/fairness.csv", report_views.fairness_report_csv, name="fairness_csv"
    ),
    path(
        "clusters/<slug:name>/fairness.pdf", report_views.fairness_report_pdf, name="fairness_pdf"
    ),
    path(
        "clusters/<slug:name>/fairness/subscription/",
        report_views.fairness_subscription,
        name="fairness_subscription",
    ),
    path("clusters/<slug:name>/tenants/<path:tenant>/", report_views.tenant_detail, name="tenant"),
    path("clusters/<slug:name>/jobs/<path:job_id>/", report_views.job_detail, name="job"),
    path(
        "clusters/<slug:name>/writes/",
        recommendation_views.cluster_writes,
        name="cluster_writes",
    ),
]
