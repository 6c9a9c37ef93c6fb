"""Pages of gpuobs; each needs a login (LoginRequiredMiddleware). See docs/ui.md."""

from django.urls import include, path
from django.views.generic import RedirectView

from diagnosis.pages import clusters as views
from diagnosis.pages import findings as finding_views
from diagnosis.pages import incidents as incident_views
from diagnosis.pages import inventory as inventory_views
from diagnosis.pages import jobs as job_views
from diagnosis.pages import live as live_views
from diagnosis.pages import people as people_views
from diagnosis.pages import queues as queue_views
from diagnosis.pages import recommendations as recommendation_views
from diagnosis.pages import reports as report_views

app_name = "diagnosis"

# The pages of one cluster, under clusters/<name>/.
cluster_pages = [
    path("", views.cluster_overview, name="cluster"),
    path("live/", live_views.live_status, name="live"),
    path("findings/", finding_views.finding_list, name="findings"),
    path("findings/<int:finding_id>/", finding_views.finding_detail, name="finding"),
    path("incidents/", incident_views.incident_list, name="incidents"),
    path("incidents/<int:incident_id>/", incident_views.incident_detail, name="incident"),
    path(
        "incidents/<int:incident_id>/drain/", incident_views.incident_drain, name="incident_drain"
    ),
    path(
        "incidents/<int:incident_id>/<slug:action>/",
        incident_views.incident_action,
        name="incident_action",
    ),
    path("recommendations/", recommendation_views.recommendation_list, name="recommendations"),
    path(
        "recommendations/<int:recommendation_id>/",
        recommendation_views.recommendation_detail,
        name="recommendation",
    ),
    path(
        "recommendations/<int:recommendation_id>/<slug:action>/",
        recommendation_views.recommendation_action,
        name="recommendation_action",
    ),
    path("fairness/", report_views.fairness_report, name="fairness"),
    path("fairness.csv", report_views.fairness_report_csv, name="fairness_csv"),
    path("fairness.pdf", report_views.fairness_report_pdf, name="fairness_pdf"),
    path(
        "fairness/subscription/", report_views.fairness_subscription, name="fairness_subscription"
    ),
    path("tenants/<path:tenant>/", report_views.tenant_detail, name="tenant"),
    # issue 19: nodes and GPUs, queues, jobs (docs/ui.md)
    path("nodes/", inventory_views.node_list, name="nodes"),
    path("nodes/<str:node>/", inventory_views.node_detail, name="node"),
    path("nodes/<str:node>/gpus/<int:index>/", inventory_views.gpu_detail, name="gpu"),
    path("gpus/<str:uuid>/", inventory_views.gpu_by_uuid, name="gpu_uuid"),
    path("queues/", queue_views.queue_list, name="queues"),
    path("queues/<str:queue>/", queue_views.queue_detail, name="queue"),
    path("jobs/", job_views.job_list, name="jobs"),
    path("jobs/<path:job_id>/", job_views.job_detail, name="job"),
    path("writes/", recommendation_views.cluster_writes, name="cluster_writes"),
    path("confirm-size/", views.confirm_size, name="cluster_confirm_size"),
]

urlpatterns = [
    path("", views.cluster_list, name="cluster_list"),
    path("people/", people_views.people, name="people"),  # the admin role's (docs/ui.md)
    path("clusters/", RedirectView.as_view(pattern_name="diagnosis:cluster_list")),
    path("clusters/<slug:name>/", include(cluster_pages)),
]
