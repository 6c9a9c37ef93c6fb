"""The machine API, declared once: the router's resources and the cluster-scoped endpoints.

``gpuobs/urls.py`` mounts this one URLconf under both ``/api/v1/`` (the versioned prefix
scripts should use) and ``/api/``.
"""

from django.urls import include, path
from rest_framework.routers import DefaultRouter

from diagnosis.api import (
    annotations,
    clusters,
    incidents,
    receivers,
    recommendations,
    reports,
    schema,
    topology,
)

router = DefaultRouter()
router.register("clusters", clusters.ClusterViewSet, basename="cluster")
router.register("recommendations", recommendations.RecommendationViewSet, basename="recommendation")

# The endpoints of one cluster, under clusters/<cluster>/.
cluster_endpoints = [
    path("events", receivers.SchedulerEventsView.as_view(), name="cluster-events"),
    path("nodes/<str:node>/topology", topology.NodeTopologyView.as_view(), name="node-topology"),
    path("incidents", incidents.IncidentListView.as_view(), name="incidents"),
    path("incidents/<int:incident_id>", incidents.IncidentDetailView.as_view(), name="incident"),
    path(
        "incidents/<int:incident_id>/<slug:action>",
        incidents.IncidentActionView.as_view(),
        name="incident-action",
    ),
    path("reports/fairness", reports.FairnessReportView.as_view(), name="fairness-report"),
    path("jobs", reports.JobListView.as_view(), name="jobs"),
    path("jobs/<path:job_id>", reports.JobDetailView.as_view(), name="job"),
    path("findings", reports.FindingListView.as_view(), name="findings"),
    path("writes", recommendations.ClusterWritesView.as_view(), name="cluster-writes"),
    path("size", clusters.ClusterSizeView.as_view(), name="cluster-size"),
]

urlpatterns = [
    path("clusters/<slug:cluster>/", include(cluster_endpoints)),
    path("alertmanager", receivers.AlertmanagerWebhookView.as_view(), name="alertmanager"),
    path("annotations", annotations.AnnotationsView.as_view(), name="annotations"),
    path("schema", schema.SchemaView.as_view(), name="schema"),
    *router.urls,
]
