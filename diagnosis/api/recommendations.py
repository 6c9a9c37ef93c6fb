"""The recommendations API (DRF) and the cluster write switch. Thin: access-checked reads
(``diagnosis.access``), the workflow's actions (``diagnosis.workflow``) for every change.

- ``GET /api/recommendations/[?cluster=&state=&kind=&awaiting=me]`` and
  ``GET /api/recommendations/{id}/`` (the detail adds the audit trail); ``awaiting=me``: the
  requested changes the caller may approve (the approver queue);
- ``POST /api/recommendations/{id}/request|approve|reject|dry-run|apply|rollback/``
  (``reject`` takes ``{"reason": "..."}``; ``approve`` of a change predicted to harm takes
  ``{"confirm_harm": true}``, else 409 naming the ``harm``; ``rollback`` answers 201 with the
  new recommendation that undoes the change); every answer carries the step's ``outcome``;
- ``GET|POST /api/v1/clusters/{cluster}/writes`` (``{"enabled": true}``: admins only).

A request the person's role does not allow answers 403; one the recommendation's state does not
allow (approving what is applied, applying a lapsed approval) answers 409 with the reason.
Session (with CSRF) or token authentication, as for every endpoint.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

from django.db.models import QuerySet
from django.utils import timezone
from drf_spectacular.utils import OpenApiResponse, extend_schema, extend_schema_view
from rest_framework import serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from diagnosis.access import (
    get_cluster_for_user,
    get_recommendation_for_user,
    recommendations_for_user,
)
from diagnosis.actions.workflow.base import ApplyNotSent, HarmNotConfirmed, WorkflowError
from diagnosis.actions.workflow.outcome import outcome_of
from diagnosis.api.responses import (
    ClusterWritesSerializer,
    RecommendationStepSerializer,
    StepConflictSerializer,
)
from diagnosis.api.schema import error
from diagnosis.api.serializers import (
    ApproveSerializer,
    RecommendationDetailSerializer,
    RecommendationFilter,
    RecommendationSerializer,
    RejectSerializer,
    WriteSwitchSerializer,
)
from diagnosis.models import Recommendation


def workflow(module: str, name: str) -> Any:
    """An action of ``diagnosis.actions.workflow.<module>``, imported at the first request that
    needs one: the workflow (the core's replays, pandas) is not loaded with the URLconf (#35)."""
    from diagnosis.actions.workflow import apply, review  # noqa: PLC0415 -- see above

    return getattr({"apply": apply, "review": review}[module], name)


# The answers of a workflow step beside its 200 (201 for a rollback: the new recommendation).
STEP_ERRORS = {
    409: OpenApiResponse(
        StepConflictSerializer,
        description="The recommendation's state does not allow this step (the reason is "
        "`detail`); or its estimate predicts `harm`, to approve with `confirm_harm`.",
    ),
    503: error("The task broker refused the apply: nothing is left applying; retry."),
}


def step(body: type[serializers.Serializer] | None = None, *, code: int = 200) -> Any:
    """The schema of a workflow step: its body, its answer and its errors."""
    return extend_schema(
        request=body, responses={code: RecommendationStepSerializer, **STEP_ERRORS}
    )


@extend_schema_view(list=extend_schema(parameters=[RecommendationFilter]))
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
            if wanted.get("awaiting") == "me":
                queryset = workflow("review", "awaiting_approval_by")(user, queryset)
        return (
            queryset.select_related("cluster", "requested_by", "approved_by", "applied_by")
            .prefetch_related("motivating_findings")
            .order_by("-created_at", "-id")
        )

    def action_name(self) -> str:
        """The workflow step of this request, as the pages name it (``dry-run``, ``re-check``)."""
        return {"request_change": "request", "dry_run": "dry-run", "recheck": "re-check"}.get(
            self.action, self.action
        )

    def get_object(self) -> Recommendation:
        return get_recommendation_for_user(self.request.user, None, int(self.kwargs["pk"]))

    def _act(
        self,
        request: Request,
        pk: str,
        do: Callable[..., Recommendation],
        *args: Any,
        created: bool = False,
    ) -> Response:
        """``do(recommendation, request.user, *args)``: the workflow's answer as the detail with
        its ``outcome`` (``{"kind": sent|accepted|refused|applied|failed|not-applied|done,
        "message"}``: what happened, :mod:`diagnosis.actions.workflow.outcome`), or 409 (the
        state does not allow it) or 503 (the broker refused the task)."""
        rec = get_recommendation_for_user(request.user, None, int(pk))
        since = timezone.now()
        try:
            result = do(rec, request.user, *args)
        except HarmNotConfirmed as exc:
            return Response(
                {"detail": str(exc), "harm": exc.harm, "confirm": "confirm_harm"},
                status=status.HTTP_409_CONFLICT,
            )
        except WorkflowError as exc:
            return Response({"detail": str(exc)}, status=status.HTTP_409_CONFLICT)
        except ApplyNotSent as exc:  # the broker refused the task: nothing is left applying
            return Response({"detail": str(exc)}, status=status.HTTP_503_SERVICE_UNAVAILABLE)
        result.refresh_from_db()
        return Response(
            {
                **RecommendationDetailSerializer(result).data,
                "outcome": outcome_of(self.action_name(), result, since).as_dict(),
            },
            status=status.HTTP_201_CREATED if created else status.HTTP_200_OK,
        )

    @step()
    @action(detail=True, methods=["post"], url_path="request")
    def request_change(self, request: Request, pk: str) -> Response:
        return self._act(request, pk, workflow("review", "request_recommendation"))

    @step(ApproveSerializer)
    @action(detail=True, methods=["post"])
    def approve(self, request: Request, pk: str) -> Response:
        """Approve; a change predicted to harm needs ``{"confirm_harm": true}`` (else 409 with
        the ``harm`` named)."""
        body = ApproveSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        confirm = body.validated_data.get("confirm_harm", False)
        return self._act(
            request, pk, partial(workflow("review", "approve_recommendation"), confirm_harm=confirm)
        )

    @step(RejectSerializer)
    @action(detail=True, methods=["post"])
    def reject(self, request: Request, pk: str) -> Response:
        body = RejectSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        reason = body.validated_data.get("reason", "")
        return self._act(request, pk, workflow("review", "reject_recommendation"), reason)

    @step()
    @action(detail=True, methods=["post"], url_path="dry-run")
    def dry_run(self, request: Request, pk: str) -> Response:
        return self._act(request, pk, workflow("review", "request_dry_run"))

    @step()
    @action(detail=True, methods=["post"])
    def apply(self, request: Request, pk: str) -> Response:
        return self._act(request, pk, workflow("review", "request_apply"))

    @step()
    @action(detail=True, methods=["post"], url_path="re-check")
    def recheck(self, request: Request, pk: str) -> Response:
        """Send a stuck apply again (409 while it is still in progress)."""
        return self._act(request, pk, workflow("apply", "recheck_apply"))

    @step(code=201)
    @action(detail=True, methods=["post"])
    def rollback(self, request: Request, pk: str) -> Response:
        return self._act(request, pk, workflow("review", "request_rollback"), created=True)


class ClusterWritesView(APIView):
    """``GET /api/v1/clusters/{cluster}/writes``: whether approved changes are written to the
    cluster's scheduler; ``POST {"enabled": true|false}`` turns writing on or off (admins only;
    audited). Off (dry-run only) by default."""

    @extend_schema(responses=ClusterWritesSerializer, operation_id="clusters_writes_retrieve")
    def get(self, request: Request, cluster: str) -> Response:
        target = get_cluster_for_user(request.user, cluster)
        return Response({"cluster": target.name, "enabled": not target.dry_run})

    @extend_schema(
        request=WriteSwitchSerializer,
        responses=ClusterWritesSerializer,
        operation_id="clusters_writes_set",
    )
    def post(self, request: Request, cluster: str) -> Response:
        target = get_cluster_for_user(request.user, cluster)
        body = WriteSwitchSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        changed = workflow("review", "set_cluster_writes")(
            target, request.user, enabled=body.validated_data["enabled"]
        )
        return Response({"cluster": changed.name, "enabled": not changed.dry_run})
