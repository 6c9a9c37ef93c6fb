"""The clusters of the API: a list and detail, scoped to what the caller may read, and for the
admin role the clusters as code (docs/operations.md, "Clusters as code"):
``GET /api/v1/clusters/export/`` (the ``gpuobs.clusters/v1`` document) and
``POST /api/v1/clusters/apply/`` (that document; ``?dry_run=1`` only says what would change).

Each cluster says how fresh its data is (issue #18): ``stale`` (the last good cycle, or its
snapshot, is older than two cycle intervals -- the overview's rule), ``data_age_s``, the last
good cycle, and the last attempt (failed, skipped or good) with its error. A poller never reads
``"status": "ok"`` for a cluster whose cycles stopped.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.db.models import OuterRef, QuerySet, Subquery
from django.utils import timezone
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_view
from rest_framework import serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import PermissionDenied
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from diagnosis.access import (
    clusters_for_user,
    get_cluster_for_user,
)
from diagnosis.actions.records.cluster_size import confirm_cluster_size
from diagnosis.actions.records.cluster_specs import (
    KIND,
    ClusterSpecError,
    apply_cluster_specs,
    export_document,
    parse_documents,
    plan,
)
from diagnosis.actions.workflow.base import WorkflowError
from diagnosis.api.serializers import ClusterSerializer
from diagnosis.models import Cluster, ClusterCycle
from diagnosis.roles import can_administer

if TYPE_CHECKING:
    from diagnosis.pages.clusters import Freshness

SKIPPED_PREFIX = "skipped:"  # a skipped cycle's error is its reason (no host, no remote text)


class ClusterFreshnessSerializer(ClusterSerializer):
    stale = serializers.SerializerMethodField()
    data_age_s = serializers.SerializerMethodField()
    last_good_cycle_at = serializers.DateTimeField(read_only=True, allow_null=True)
    last_attempt_at = serializers.DateTimeField(read_only=True, allow_null=True)
    last_attempt_ok = serializers.BooleanField(read_only=True, allow_null=True)
    last_attempt_error = serializers.SerializerMethodField()

    class Meta(ClusterSerializer.Meta):
        fields = [
            *ClusterSerializer.Meta.fields,
            "stale",
            "data_age_s",
            "last_good_cycle_at",
            "last_attempt_at",
            "last_attempt_ok",
            "last_attempt_error",
        ]
        read_only_fields = fields

    def _freshness(self, cluster: Cluster) -> Freshness:
        # the overview page's module (pandas, plotly) on the first request, not in the URLconf
        from diagnosis.pages.clusters import Freshness  # noqa: PLC0415 -- start-up (#35)

        return Freshness(
            now=timezone.now(),
            interval_s=settings.GPUOBS_CYCLE_SECONDS,
            last_cycle_at=cluster.last_attempt_at,
            good_cycle_at=cluster.last_good_cycle_at,
            as_of=cluster.last_good_as_of,
        )

    def get_stale(self, cluster: Cluster) -> bool:
        return self._freshness(cluster).stale

    def get_data_age_s(self, cluster: Cluster) -> float | None:
        age = self._freshness(cluster).age_s
        return None if age is None else round(age, 1)

    def get_last_attempt_error(self, cluster: Cluster) -> str:
        """A reader's text: a skipped cycle's reason, else the cluster's status message (which
        integration failed and how; the full error stays for admins)."""
        if cluster.last_attempt_ok in (None, True):
            return ""
        error: Any = cluster.last_attempt_error or ""
        return error if error.startswith(SKIPPED_PREFIX) else cluster.status_message


class IntegrationSpecSerializer(serializers.Serializer):
    kind = serializers.CharField(help_text="the scheduler's or metrics source's kind")
    config = serializers.DictField(
        required=False, help_text="its declared settings; secrets as references only"
    )


class ClusterSpecSerializer(serializers.Serializer):
    name = serializers.SlugField(max_length=63)
    scheduler = IntegrationSpecSerializer()
    metrics = IntegrationSpecSerializer()
    enabled = serializers.BooleanField(default=True)
    dry_run = serializers.BooleanField(default=True)
    auto_rollback = serializers.BooleanField(default=False)
    gpu_hour_prices = serializers.DictField(
        required=False, help_text='price per GPU-hour per GPU model ("*": any other), as text'
    )


class ClusterDocumentSerializer(serializers.Serializer):
    """A ``gpuobs.clusters/v1`` document (docs/operations.md, "Clusters as code")."""

    kind = serializers.CharField(help_text=f"always {KIND}")
    clusters = ClusterSpecSerializer(many=True)


class ClusterChangeSerializer(serializers.Serializer):
    name = serializers.CharField()
    outcome = serializers.CharField(help_text="created, updated or unchanged")
    fields = serializers.DictField(help_text="each changed field's before and after")


class ClusterApplySerializer(serializers.Serializer):
    dry_run = serializers.BooleanField()
    changes = ClusterChangeSerializer(many=True)


class ClusterProblemsSerializer(serializers.Serializer):
    problems = serializers.ListField(child=serializers.CharField())


def with_freshness(clusters: QuerySet[Cluster]) -> QuerySet[Cluster]:
    """Each cluster with its latest attempt and latest good cycle, by when they ran (a cycle
    stamped in the future by a skewed clock is never preferred)."""
    latest = ClusterCycle.objects.filter(cluster=OuterRef("pk")).order_by("-ran_at", "-id")
    good = latest.filter(ok=True)
    return clusters.annotate(
        last_attempt_at=Subquery(latest.values("ran_at")[:1]),
        last_attempt_ok=Subquery(latest.values("ok")[:1]),
        last_attempt_error=Subquery(latest.values("error")[:1]),
        last_good_cycle_at=Subquery(good.values("ran_at")[:1]),
        last_good_as_of=Subquery(good.values("as_of")[:1]),
    )


@extend_schema_view(
    retrieve=extend_schema(parameters=[OpenApiParameter("id", int, OpenApiParameter.PATH)])
)
class ClusterViewSet(viewsets.ReadOnlyModelViewSet):
    serializer_class = ClusterFreshnessSerializer
    lookup_field = "pk"

    def get_queryset(self) -> QuerySet[Cluster]:
        return with_freshness(clusters_for_user(self.request.user)).order_by("name")

    def _require_admin(self) -> None:
        if not can_administer(self.request.user):
            raise PermissionDenied("clusters as code are the admin role's")

    @extend_schema(responses=ClusterDocumentSerializer, summary="Every cluster, as code")
    @action(detail=False, methods=["get"], pagination_class=None)
    def export(self, request: Request) -> Response:
        self._require_admin()
        return Response(export_document())

    @extend_schema(
        request=ClusterDocumentSerializer,
        responses={200: ClusterApplySerializer, 400: ClusterProblemsSerializer},
        parameters=[OpenApiParameter("dry_run", bool, description="say what would change only")],
        summary="Create or update the declared clusters",
    )
    @action(detail=False, methods=["post"])
    def apply(self, request: Request) -> Response:
        self._require_admin()
        try:
            specs = parse_documents([("body", request.data)])
        except ClusterSpecError as exc:
            return Response({"problems": exc.problems}, status=status.HTTP_400_BAD_REQUEST)
        dry_run = request.query_params.get("dry_run", "") in {"1", "true", "yes"}
        actor = request.user.get_username()
        changes = plan(specs) if dry_run else apply_cluster_specs(specs, actor=actor)
        return Response({"dry_run": dry_run, "changes": [c.as_json() for c in changes]})


class ClusterSizeView(APIView):
    """``GET /api/v1/clusters/{cluster}/size``: the drop in size the cluster's cycles hold back
    (``{"held": false}`` when none). ``POST``: an SRE or admin confirms the held size, so the
    next cycle of that size is judged (audited; 403 for another role, 409 when nothing is held;
    docs/operations.md, "A cluster that shrinks at once")."""

    @extend_schema(responses=OpenApiTypes.OBJECT)
    def get(self, request: Request, cluster: str) -> Response:
        target = get_cluster_for_user(request.user, cluster)
        hold = target.size_hold or {}
        return Response({"cluster": target.name, "held": bool(hold), **hold})

    @extend_schema(request=None, responses=OpenApiTypes.OBJECT)
    def post(self, request: Request, cluster: str) -> Response:
        target = get_cluster_for_user(request.user, cluster)
        try:
            hold = confirm_cluster_size(target, request.user)
        except WorkflowError as exc:
            return Response({"detail": str(exc)}, status=status.HTTP_409_CONFLICT)
        return Response({"cluster": target.name, "held": True, **hold})
