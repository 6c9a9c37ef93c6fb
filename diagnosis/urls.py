"""Pages of gpuobs; each needs a login (LoginRequiredMiddleware). See docs/ui.md. Each view is
named by its path and imported on its first request (diagnosis/lazy_views.py)."""

from django.urls import include, path
from django.views.generic import RedirectView

from diagnosis.lazy_views import LazyView

app_name = "diagnosis"


def page(target: str) -> LazyView:
    """The view ``"module:name"`` of ``diagnosis/pages/``, imported on its first request."""
    return LazyView(f"diagnosis.pages.{target}")


# The pages of one cluster, under clusters/<name>/.
cluster_pages = [
    path("", page("clusters:cluster_overview"), name="cluster"),
    path("live/", page("live:live_status"), name="live"),
    path("findings/", page("findings:finding_list"), name="findings"),
    path("findings/<int:finding_id>/", page("findings:finding_detail"), name="finding"),
    path("incidents/", page("incidents:incident_list"), name="incidents"),
    path("incidents/<int:incident_id>/", page("incidents:incident_detail"), name="incident"),
    path(
        "incidents/<int:incident_id>/drain/",
        page("incidents:incident_drain"),
        name="incident_drain",
    ),
    path(
        "incidents/<int:incident_id>/<slug:action>/",
        page("incidents:incident_action"),
        name="incident_action",
    ),
    path("recommendations/", page("recommendations:recommendation_list"), name="recommendations"),
    path(
        "recommendations/<int:recommendation_id>/",
        page("recommendations:recommendation_detail"),
        name="recommendation",
    ),
    path(
        "recommendations/<int:recommendation_id>/<slug:action>/",
        page("recommendations:recommendation_action"),
        name="recommendation_action",
    ),
    path("fairness/", page("reports:fairness_report"), name="fairness"),
    path("fairness.csv", page("reports:fairness_report_csv"), name="fairness_csv"),
    path("fairness.pdf", page("reports:fairness_report_pdf"), name="fairness_pdf"),
    path(
        "fairness/subscription/",
        page("reports:fairness_subscription"),
        name="fairness_subscription",
    ),
    path("tenants/<path:tenant>/", page("reports:tenant_detail"), name="tenant"),
    # issue 19: nodes and GPUs, queues, jobs (docs/ui.md)
    path("nodes/", page("inventory:node_list"), name="nodes"),
    path("nodes/<str:node>/", page("inventory:node_detail"), name="node"),
    path("nodes/<str:node>/gpus/<int:index>/", page("inventory:gpu_detail"), name="gpu"),
    path("gpus/<str:uuid>/", page("inventory:gpu_by_uuid"), name="gpu_uuid"),
    path("overlay/", page("overlay:gpu_overlay"), name="gpu_overlay"),  # issue #32
    path("queues/", page("queues:queue_list"), name="queues"),
    path("queues/<str:queue>/", page("queues:queue_detail"), name="queue"),
    path("jobs/", page("jobs:job_list"), name="jobs"),
    path("jobs/<path:job_id>/", page("jobs:job_detail"), name="job"),
    path("writes/", page("recommendations:cluster_writes"), name="cluster_writes"),
    path("confirm-size/", page("cluster_size:confirm_size"), name="cluster_confirm_size"),
]

urlpatterns = [
    path("", page("clusters:cluster_list"), name="cluster_list"),
    path("live/", page("live:fleet_live_status"), name="fleet_live"),
    path("people/", page("people:people"), name="people"),  # the admin role's (docs/ui.md)
    # the autopilot's remediation policies (docs/autopilot.md)
    path("autopilot/", page("autopilot:autopilot_list"), name="autopilot"),
    path("autopilot/new/", page("autopilot:policy_new"), name="autopilot-new"),
    path("autopilot/switch/", page("autopilot:autopilot_switch"), name="autopilot-switch"),
    path("autopilot/<int:policy_id>/", page("autopilot:policy_detail"), name="autopilot-policy"),
    path("autopilot/<int:policy_id>/edit/", page("autopilot:policy_edit"), name="autopilot-edit"),
    path(
        "autopilot/<int:policy_id>/<slug:action>/",
        page("autopilot:policy_action"),
        name="autopilot-action",
    ),
    path("fleet/", page("fleet:fleet_page"), name="fleet"),  # every cluster (docs/ui.md)
    path("clusters/", RedirectView.as_view(pattern_name="diagnosis:cluster_list")),
    path("clusters/<slug:name>/", include(cluster_pages)),
]
