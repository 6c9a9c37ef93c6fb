"""The recommendations API (DRF) and the cluster write switch. Thin: access-checked reads
(``diagnosis.access``), the workflow's actions (``diagnosis.workflow``) for every change.

- ``GET /api/recommendations/[?cluster=&state=&kind=]`` and ``GET /api/recommendations/{id}/``
  (the detail adds the audit trail);
- ``POST /api/recommendations/{id}/request|approve|reject|dry-run|apply|rollback/``
  (``reject`` takes ``{"reason": "..."}``; ``rollback`` answers 201 with the new
  recommendation that undoes the change);
- ``GET|POST /api/v1/clusters/{cluster}/writes`` (``{"enabled": true}``: admins only).

A request the person's role does not allow answers 403; one the recommendation's state does not
allow (approving what is applied, applying a lapsed approval) answers 409 with the reason.
Session (with CSRF) or token authentication, as for every endpoint.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.db.models import QuerySet
from rest_framework import serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from diagnosis import workflow
from diagnosis.access import (
    get_cluster_for_user,
    get_recommendation_for_user,
    recommendations_for_user,
)
from diagnosis.choices import RecommendationKind, RecommendationState
from diagnosis.models import AuditEntry, Recommendation


class AuditEntrySerializer(serializers.ModelSerializer):
    class Meta:
        model = AuditEntry
        fields = ["id", "time", "actor", "action", "target", "before", "after"]
        read_only_fields = fields


def _username(user: Any) -> str | None:
    return user.get_username() if user is not None else None


class RecommendationSerializer(serializers.ModelSerializer):
    cluster = serializers.SlugRelatedField(slug_field="name", read_only=True)
    summary = serializers.SerializerMethodField()
    verdict = serializers.SerializerMethodField()
    preselect = serializers.SerializerMethodField()
    harm = serializers.SerializerMethodField()
    requested_by = serializers.SerializerMethodField()
    approved_by = serializers.SerializerMethodField()
    applied_by = serializers.SerializerMethodField()
    motivating_findings = serializers.SerializerMethodField()

    class Meta:
        model = Recommendation
        fields = [
            "id",
            "cluster",
            "kind",
            "target",
            "change",
            "state",
            "status_message",
            "summary",
            "verdict",
            "preselect",
            "harm",
            "impact",
            "motivating_findings",
            "requested_by",
            "requested_at",
            "approved_by",
            "approved_at",
            "expires_at",
            "applied_by",
            "applied_at",
            "dry_run_result",
            "apply_result",
            "verification",
            "rollback_of",
            "created_at",
            "updated_at",
        ]
        read_only_fields = fields

    def get_summary(self, rec: Recommendation) -> str:
        return str(rec.impact.get("summary") or "")

    def get_verdict(self, rec: Recommendation) -> str:
        return str(rec.impact.get("verdict") or "not simulated")

    def get_preselect(self, rec: Recommendation) -> bool:
        return bool(rec.impact.get("preselect"))

    def get_harm(self, rec: Recommendation) -> list[str]:
        return list(rec.impact.get("harm") or [])

    def get_requested_by(self, rec: Recommendation) -> str | None:
        return _username(rec.requested_by)

    def get_approved_by(self, rec: Recommendation) -> str | None:
        return _username(rec.approved_by)

    def get_applied_by(self, rec: Recommendation) -> str | None:
        return _username(rec.applied_by)

    def get_motivating_findings(self, rec: Recommendation) -> list[dict[str, Any]]:
        return [
            {"id": f.pk, "rule": f.rule_id, "subject": f.subject, "state": f.state}
            for f in rec.motivating_findings.all()
        ]


class RecommendationDetailSerializer(RecommendationSerializer):
    audit = serializers.SerializerMethodField()

    class Meta(RecommendationSerializer.Meta):
        fields = [*RecommendationSerializer.Meta.fields, "audit"]
        read_only_fields = fields

    def get_audit(self, rec: Recommendation) -> list[dict[str, Any]]:
        entries = AuditEntry.objects.filter(recommendation=rec).order_by("time", "id")
        return AuditEntrySerializer(entries, many=True).data


class RejectSerializer(serializers.Serializer):
    reason = serializers.CharField(max_length=2000, required=False, allow_blank=True)


class RecommendationFilter(serializers.Serializer):
    """The list's query string, parsed at the boundary (a bad value names its parameter)."""

    cluster = serializers.SlugField(required=False)
    state = serializers.ChoiceField(choices=RecommendationState.choices, required=False)
    kind = serializers.ChoiceField(choices=RecommendationKind.choices, required=False)


class RecommendationViewSet(viewsets.ReadOnlyModelViewSet):
    """Recommendations of the clusters the caller may read, and the workflow's actions."""

    lookup_value_regex = r"\d+"

    def get_serializer_class(self) -> type[serializers.Serializer]:
        if self.action == "list":
            return RecommendationSerializer
        return RecommendationDetailSerializer

    def get_queryset(self) -> QuerySet[Recommendation]:
        user = self.request.user
        queryset = recommendations_for_user(user)
        if self.action == "list":
            query = RecommendationFilter(data=self.request.query_params)
            query.is_valid(raise_exception=True)
            wanted = query.validated_data
            if "cluster" in wanted:
                queryset = recommendations_for_user(
                    user, get_cluster_for_user(user, wanted["cluster"])
                )
            if "state" in wanted:
                queryset = queryset.filter(state=wanted["state"])
            if "kind" in wanted:
                queryset = queryset.filter(kind=wanted["kind"])
        return (
            queryset.select_related("cluster", "requested_by", "approved_by", "applied_by")
            .prefetch_related("motivating_findings")
            .order_by("-created_at", "-id")
        )

    def get_object(self) -> Recommendation:
        return get_recommendation_for_user(self.request.user, None, int(self.kwargs["pk"]))

    def _act(
        self,
        request: Request,
        pk: str,
        do: Callable[[Recommendation], Recommendation],
        *,
        created: bool = False,
    ) -> Response:
        rec = get_recommendation_for_user(request.user, None, int(pk))
        try:
            result = do(rec)
        except workflow.WorkflowError as exc:
            return Response({"detail": str(exc)}, status=status.HTTP_409_CONFLICT)
        result.refresh_from_db()
        return Response(
            RecommendationDetailSerializer(result).data,
            status=status.HTTP_201_CREATED if created else status.HTTP_200_OK,
        )

    @action(detail=True, methods=["post"], url_path="request")
    def request_change(self, request: Request, pk: str) -> Response:
        return self._act(request, pk, lambda r: workflow.request_recommendation(r, request.user))

    @action(detail=True, methods=["post"])
    def approve(self, request: Request, pk: str) -> Response:
        return self._act(request, pk, lambda r: workflow.approve_recommendation(r, request.user))

    @action(detail=True, methods=["post"])
    def reject(self, request: Request, pk: str) -> Response:
        body = RejectSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        reason = body.validated_data.get("reason", "")
        return self._act(
            request, pk, lambda r: workflow.reject_recommendation(r, request.user, reason)
        )

    @action(detail=True, methods=["post"], url_path="dry-run")
    def dry_run(self, request: Request, pk: str) -> Response:
        return self._act(request, pk, lambda r: workflow.request_dry_run(r, request.user))

    @action(detail=True, methods=["post"])
    def apply(self, request: Request, pk: str) -> Response:
        return self._act(request, pk, lambda r: workflow.request_apply(r, request.user))

    @action(detail=True, methods=["post"])
    def rollback(self, request: Request, pk: str) -> Response:
        return self._act(
            request, pk, lambda r: workflow.request_rollback(r, request.user), created=True
        )


class WriteSwitchSerializer(serializers.Serializer):
    enabled = serializers.BooleanField()


class ClusterWritesView(APIView):
    """``GET /api/v1/clusters/{cluster}/writes``: whether approved changes are written to the
    cluster's scheduler; ``POST {"enabled": true|false}`` turns writing on or off (admins only;
    audited). Off (dry-run only) by default."""

    def get(self, request: Request, cluster: str) -> Response:
        target = get_cluster_for_user(request.user, cluster)
        return Response({"cluster": target.name, "enabled": not target.dry_run})

    def post(self, request: Request, cluster: str) -> Response:
        target = get_cluster_for_user(request.user, cluster)
        body = WriteSwitchSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        changed = workflow.set_cluster_writes(
            target, request.user, enabled=body.validated_data["enabled"]
        )
        return Response({"cluster": changed.name, "enabled": not changed.dry_run})
