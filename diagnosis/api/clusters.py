"""The clusters of the API: a list and detail, scoped to what the caller may read, and for the
admin role the clusters as code (docs/operations.md, "Clusters as code"):
``GET /api/v1/clusters/export/`` (the ``gpuobs.clusters/v1`` document) and
``POST /api/v1/clusters/apply/`` (that document; ``?dry_run=1`` only says what would change).

A cluster is named by its name everywhere in the API (``/api/v1/clusters/{cluster}/`` and every
path under it). The integer id the detail took before is still answered, deprecated: the same
body with ``Deprecation: true`` and a ``Link`` to the name's path (a name that is all digits
wins over an id; docs/cli.md "The schema").

Each cluster says how fresh its data is (issue #18): ``stale`` (the last good cycle, or its
snapshot, is older than two cycle intervals -- the overview's rule), ``data_age_s``, the last
good cycle, and the last attempt (failed, skipped or good) with its error. A poller never reads
``"status": "ok"`` for a cluster whose cycles stopped.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.db.models import OuterRef, QuerySet, Subquery
from django.http import Http404
from django.urls import reverse
from django.utils import timezone
from drf_spectacular.utils import (
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
    extend_schema_view,
)
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
from diagnosis.api.errors import ErrorSerializer
from diagnosis.api.responses import ClusterSizeSerializer
from diagnosis.api.schema import error
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


class ClusterProblemsSerializer(ErrorSerializer):
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


CLUSTER_NAME = OpenApiParameter(
    "cluster",
    str,
    OpenApiParameter.PATH,
    description="The cluster's name. An integer id is still answered here, deprecated "
    "(`Deprecation: true`, and a `Link` to the name's path).",
)
DEPRECATION = OpenApiResponse(
    ClusterFreshnessSerializer,
    description="The cluster. Asked for by its integer id (deprecated), the answer also carries "
    '`Deprecation: true` and `Link: <.../clusters/NAME/>; rel="alternate"`.',
)


@extend_schema_view(retrieve=extend_schema(parameters=[CLUSTER_NAME], responses=DEPRECATION))
class ClusterViewSet(viewsets.ReadOnlyModelViewSet):
    serializer_class = ClusterFreshnessSerializer
    lookup_field = "name"
    lookup_url_kwarg = "cluster"
    lookup_value_regex = r"[-a-zA-Z0-9_]+"
    deprecated_id = False  # this request named the cluster by its old integer id

    def get_queryset(self) -> QuerySet[Cluster]:
        return with_freshness(clusters_for_user(self.request.user)).order_by("name")

    def get_object(self) -> Cluster:
        """By name; the deprecated integer id when no cluster has that name."""
        key = self.kwargs["cluster"]
        clusters = self.get_queryset()
        cluster = clusters.filter(name=key).first()
        if cluster is None and key.isascii() and key.isdigit():
            cluster = clusters.filter(pk=int(key)).first()
            self.deprecated_id = cluster is not None
        if cluster is None:
            raise Http404("no such cluster")
        self.check_object_permissions(self.request, cluster)
        return cluster

    def retrieve(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        response = super().retrieve(request, *args, **kwargs)
        if self.deprecated_id:
            namespace = request.resolver_match.namespace if request.resolver_match else "api-v1"
            named = reverse(
                f"{namespace}:cluster-detail", kwargs={"cluster": response.data["name"]}
            )
            response["Deprecation"] = "true"
            response["Link"] = f'<{named}>; rel="alternate"'
        return response

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
        responses={
            200: ClusterApplySerializer,
            400: OpenApiResponse(
                ClusterProblemsSerializer, description="the document's problems, each by path"
            ),
        },
        parameters=[OpenApiParameter("dry_run", bool, description="say what would change only")],
        summary="Create or update the declared clusters",
    )
    @action(detail=False, methods=["post"])
    def apply(self, request: Request) -> Response:
        self._require_admin()
        try:
            specs = parse_documents([("body", request.data)])
        except ClusterSpecError as exc:
            body = {"detail": "the document is invalid", "problems": exc.problems}
            return Response(body, status=status.HTTP_400_BAD_REQUEST)
        dry_run = request.query_params.get("dry_run", "") in {"1", "true", "yes"}
        actor = request.user.get_username()
        changes = plan(specs) if dry_run else apply_cluster_specs(specs, actor=actor)
        return Response({"dry_run": dry_run, "changes": [c.as_json() for c in changes]})


class ClusterSizeView(APIView):
    """``GET /api/v1/clusters/{cluster}/size``: the drop in size the cluster's cycles hold back
    (``{"held": false}`` when none). ``POST``: an SRE or admin confirms the held size, so the
    next cycle of that size is judged (audited; 403 for another role, 409 when nothing is held;
    docs/operations.md, "A cluster that shrinks at once")."""

    @extend_schema(responses=ClusterSizeSerializer, operation_id="clusters_size_retrieve")
    def get(self, request: Request, cluster: str) -> Response:
        target = get_cluster_for_user(request.user, cluster)
        hold = target.size_hold or {}
        return Response({"cluster": target.name, "held": bool(hold), **hold})

    @extend_schema(
        request=None,
        responses={200: ClusterSizeSerializer, 409: error("no drop in size is held")},
        operation_id="clusters_size_confirm",
    )
    def post(self, request: Request, cluster: str) -> Response:
        target = get_cluster_for_user(request.user, cluster)
        try:
            hold = confirm_cluster_size(target, request.user)
        except WorkflowError as exc:
            return Response({"detail": str(exc)}, status=status.HTTP_409_CONFLICT)
        return Response({"cluster": target.name, "held": True, **hold})
