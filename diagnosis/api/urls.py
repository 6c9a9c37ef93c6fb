"""The machine API, declared once: the router's resources and the cluster-scoped endpoints.

``gpuobs/urls.py`` mounts this one URLconf under both ``/api/v1/`` (the versioned prefix
scripts should use) and ``/api/``.
"""

from django.urls import include, path
from rest_framework.routers import DefaultRouter

from diagnosis.api import clusters, recommendations
from diagnosis.lazy_views import LazyView


def endpoint(target: str) -> LazyView:
    """The view ``"module:Class"`` of ``diagnosis/api/``, imported (and ``as_view()``) on its first
    request: importing this URLconf loads no endpoint module (diagnosis/lazy_views.py)."""
    return LazyView(f"diagnosis.api.{target}")


# Each action on an incident is its own path (diagnosis/api/incidents.py, ACTIONS).
INCIDENT_ACTIONS = ("acknowledge", "resolve", "note", "drain")
# Each action on an autopilot policy is its own path (diagnosis/api/autopilot.py, ACTIONS).
POLICY_ACTIONS = ("approve", "reject", "retire")

router = DefaultRouter()
router.register("clusters", clusters.ClusterViewSet, basename="cluster")
router.register("recommendations", recommendations.RecommendationViewSet, basename="recommendation")

# The endpoints of one cluster, under clusters/<cluster>/.
cluster_endpoints = [
    path("events", endpoint("receivers:SchedulerEventsView"), name="cluster-events"),
    path("nodes/<str:node>/topology", endpoint("topology:NodeTopologyView"), name="node-topology"),
    path("inbound/<int:batch_id>", endpoint("receivers:InboundBatchView"), name="inbound-batch"),
    path("incidents", endpoint("incidents:IncidentListView"), name="incidents"),
    path("incidents/<int:incident_id>", endpoint("incidents:IncidentDetailView"), name="incident"),
    *(
        path(
            f"incidents/<int:incident_id>/{action}",
            endpoint(f"incidents:Incident{action.capitalize()}View"),
            name=f"incident-{action}",
        )
        for action in INCIDENT_ACTIONS
    ),
    path("reports/fairness", endpoint("reports:FairnessReportView"), name="fairness-report"),
    path("jobs", endpoint("reports:JobListView"), name="jobs"),
    path("forecasts", endpoint("forecasts:ForecastListView"), name="forecasts"),
    path(
        "jobs/<path:job_id>/forecast",
        endpoint("forecasts:JobForecastView"),
        name="job-forecast",
    ),
    path("jobs/<path:job_id>", endpoint("reports:JobDetailView"), name="job"),
    path("findings", endpoint("reports:FindingListView"), name="findings"),
    path("findings/<int:finding_id>", endpoint("reports:FindingDetailView"), name="finding"),
    path("writes", endpoint("recommendations:ClusterWritesView"), name="cluster-writes"),
    path("size", endpoint("clusters:ClusterSizeView"), name="cluster-size"),
]

# The autopilot's remediation policies (docs/autopilot.md).
autopilot_endpoints = [
    path("policies", endpoint("autopilot:PolicyListView"), name="autopilot-policies"),
    path(
        "policies/<int:policy_id>", endpoint("autopilot:PolicyDetailView"), name="autopilot-policy"
    ),
    path(
        "policies/<int:policy_id>/replay",
        endpoint("autopilot:PolicyReplayView"),
        name="autopilot-replay",
    ),
    *(
        path(
            f"policies/<int:policy_id>/{action}",
            endpoint(f"autopilot:Policy{action.capitalize()}View"),
            name=f"autopilot-policy-{action}",
        )
        for action in POLICY_ACTIONS
    ),
    path("decisions", endpoint("autopilot:DecisionListView"), name="autopilot-decisions"),
    path("switch", endpoint("autopilot:SwitchView"), name="autopilot-switch"),
]

urlpatterns = [
    path("clusters/<slug:cluster>/", include(cluster_endpoints)),
    path("autopilot/", include(autopilot_endpoints)),
    path("alertmanager", endpoint("receivers:AlertmanagerWebhookView"), name="alertmanager"),
    path("annotations", endpoint("annotations:AnnotationsView"), name="annotations"),
    path("schema", endpoint("schema_view:SchemaView"), name="schema"),
    path("fleet", endpoint("fleet:FleetView"), name="fleet"),
    path("fleet/tenants", endpoint("fleet:FleetTenantsView"), name="fleet-tenants"),
    *router.urls,
]
