"""The autopilot API (docs/autopilot.md "API"). Thin: access-checked reads, the actions of
``diagnosis.actions.autopilot`` for every write.

- ``GET /api/v1/autopilot/policies``, ``POST`` (``{"name", ...terms}``: an SRE; it awaits another's
  approval);
- ``GET|PUT /api/v1/autopilot/policies/{id}`` (the detail adds its approvals and decisions; a
  ``PUT`` is a new version awaiting approval again);
- ``POST /api/v1/autopilot/policies/{id}/approve`` (no body), ``.../reject`` and ``.../retire``
  (``{"reason"}``, optional): each action is its own path and operation (:data:`ACTIONS`);
  another word there is no path (404);
- ``GET /api/v1/autopilot/policies/{id}/replay[?days=7]``: what it would have done;
- ``GET /api/v1/autopilot/decisions[?policy=&cluster=&outcome=]``;
- ``GET|POST /api/v1/autopilot/switch`` (``{"stopped": true, "reason"}``: admins).

403 by role, 404 for what the caller may not read, 409 by state, 400 naming a bad field.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from drf_spectacular.utils import (
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
    extend_schema_field,
    extend_schema_view,
)
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from diagnosis import roles
from diagnosis.access import clusters_for_user, get_policy_for_user, policies_for_user
from diagnosis.actions.autopilot import policies as actions
from diagnosis.actions.autopilot.preview import replay_preview
from diagnosis.actions.workflow.base import WorkflowDenied, WorkflowError
from diagnosis.api.errors import ErrorSerializer, invalid
from diagnosis.models import (
    AuditEntry,
    AutopilotDecision,
    AutopilotOutcome,
    PolicyKind,
    PolicyMode,
    PolicyState,
    RemediationPolicy,
)
from diagnosis.roles import can_read, is_tenant_scoped

DECISIONS_SHOWN = 200


class PolicyTermsSerializer(serializers.Serializer):
    """A policy's terms as written; the types here, the meaning (codes of the drain class,
    budgets in range) in the core's check, both answered 400 naming the field."""

    kind = serializers.ChoiceField(choices=PolicyKind.choices)
    condition = serializers.DictField(required=False, default=dict)
    clusters = serializers.ListField(
        child=serializers.SlugField(max_length=64), required=False, default=list, max_length=100
    )
    pools = serializers.ListField(
        child=serializers.CharField(max_length=253), required=False, default=list, max_length=100
    )
    per_pool_per_hour = serializers.IntegerField(min_value=0, max_value=1000, default=1)
    pool_out_share = serializers.FloatField(min_value=0, max_value=1, default=0.1)
    per_hour = serializers.IntegerField(min_value=0, max_value=1000, default=2)
    quiet_start_minute = serializers.IntegerField(
        min_value=0, max_value=1439, required=False, allow_null=True, default=None
    )
    quiet_end_minute = serializers.IntegerField(
        min_value=0, max_value=1439, required=False, allow_null=True, default=None
    )
    mode = serializers.ChoiceField(choices=PolicyMode.choices, default=PolicyMode.DRY_RUN)

    def terms(self) -> actions.PolicyTerms:
        data = dict(self.validated_data)
        data.pop("name", None)
        return actions.PolicyTerms(
            **{**data, "clusters": tuple(data["clusters"]), "pools": tuple(data["pools"])}
        )


class NewPolicySerializer(PolicyTermsSerializer):
    name = serializers.SlugField(max_length=64)


class PolicySerializer(serializers.ModelSerializer):
    clusters = serializers.SlugRelatedField(many=True, read_only=True, slug_field="name")
    written_by = serializers.SlugRelatedField(read_only=True, slug_field="username")
    approved_by = serializers.SlugRelatedField(read_only=True, slug_field="username")

    class Meta:
        model = RemediationPolicy
        fields = [
            "id",
            "name",
            "kind",
            "condition",
            "clusters",
            "pools",
            "per_pool_per_hour",
            "pool_out_share",
            "per_hour",
            "quiet_start_minute",
            "quiet_end_minute",
            "mode",
            "mode_reason",
            "state",
            "version",
            "written_by",
            "approved_by",
            "approved_at",
            "created_at",
            "updated_at",
        ]
        read_only_fields = fields


class DecisionSerializer(serializers.ModelSerializer):
    policy = serializers.SlugRelatedField(read_only=True, slug_field="name")
    cluster = serializers.SlugRelatedField(read_only=True, slug_field="name")

    class Meta:
        model = AutopilotDecision
        fields = [
            "id",
            "policy",
            "policy_version",
            "cluster",
            "recommendation",
            "as_of",
            "time",
            "outcome",
            "guard",
            "reason",
            "kind",
            "target",
            "pool",
            "written_by",
            "approved_by",
        ]
        read_only_fields = fields


class PolicyApprovalSerializer(serializers.Serializer):
    """One step of a policy's audit trail."""

    time = serializers.DateTimeField()
    actor = serializers.CharField()
    action = serializers.CharField(help_text="policy-write, policy-approve, policy-reject, ...")
    after = serializers.JSONField(allow_null=True, help_text="the terms or state after it")


class PolicyDetailSerializer(PolicySerializer):
    approvals = extend_schema_field(PolicyApprovalSerializer(many=True))(
        serializers.SerializerMethodField()
    )
    decisions = extend_schema_field(DecisionSerializer(many=True))(
        serializers.SerializerMethodField()
    )

    class Meta(PolicySerializer.Meta):
        fields = [*PolicySerializer.Meta.fields, "approvals", "decisions"]
        read_only_fields = fields

    def get_approvals(self, policy: RemediationPolicy) -> list[dict[str, Any]]:
        """Who wrote, approved, rejected, retired or demoted each version (the audit trail)."""
        return [
            {"time": e.time, "actor": e.actor, "action": e.action, "after": e.after}
            for e in policy_trail(policy)
        ]

    def get_decisions(self, policy: RemediationPolicy) -> list[dict[str, Any]]:
        rows = policy.decisions.select_related("policy", "cluster")[:DECISIONS_SHOWN]
        return DecisionSerializer(rows, many=True).data


class DecisionFilter(serializers.Serializer):
    policy = serializers.IntegerField(required=False)
    cluster = serializers.SlugField(required=False)
    outcome = serializers.ChoiceField(choices=AutopilotOutcome.choices, required=False)


class SwitchSerializer(serializers.Serializer):
    stopped = serializers.BooleanField()
    reason = serializers.CharField(required=False, allow_blank=True, max_length=500, default="")


class PolicyCloseSerializer(serializers.Serializer):
    """The body of a rejection or a retirement."""

    reason = serializers.CharField(required=False, allow_blank=True, max_length=500, default="")


class ReplayRowSerializer(serializers.Serializer):
    """One thing the replayed policy would have applied or held back."""

    as_of = serializers.DateTimeField(help_text="the stored cycle's snapshot time")
    cluster = serializers.CharField()
    recommendation = serializers.IntegerField()
    kind = serializers.CharField()
    target = serializers.CharField()
    pool = serializers.CharField(allow_null=True)
    outcome = serializers.CharField(help_text="would-apply or held")
    guard = serializers.CharField(help_text="the guard that held it back; empty: none")
    reason = serializers.CharField()


class PolicyReplaySerializer(serializers.Serializer):
    """What a policy's current terms would have done over the stored history."""

    policy = serializers.CharField()
    days = serializers.IntegerField()
    cycles_with_candidates = serializers.IntegerField()
    would_apply = ReplayRowSerializer(many=True)
    held = ReplayRowSerializer(many=True, help_text="the last reason of each held back")
    held_by_guard = serializers.DictField(
        child=serializers.IntegerField(), help_text="how many each guard held back"
    )


def policy_trail(policy: RemediationPolicy) -> list[AuditEntry]:
    return list(AuditEntry.objects.filter(target=f"policy:{policy.name}").order_by("time", "id"))


def _invalid(exc: actions.PolicyInvalid) -> Response:
    fields: dict[str, list[str]] = {}
    for error in exc.errors:
        name = error.split(":", 1)[0].split(".", 1)[0].replace("quiet window", "quiet_window")
        fields.setdefault(name, []).append(error)
    return invalid(fields)


def _conflict(exc: WorkflowError) -> Response:
    return Response({"detail": str(exc)}, status=status.HTTP_409_CONFLICT)


CONFLICT = OpenApiResponse(ErrorSerializer, description="The policy's state does not allow it.")


class PolicyListView(APIView):
    @extend_schema(responses=PolicySerializer(many=True))
    def get(self, request: Request) -> Response:
        rows = policies_for_user(request.user).prefetch_related("clusters")
        rows = rows.select_related("written_by", "approved_by")
        return Response(PolicySerializer(rows, many=True).data)

    @extend_schema(request=NewPolicySerializer, responses={201: PolicyDetailSerializer})
    def post(self, request: Request) -> Response:
        if not roles.can_write_policy(request.user):
            raise WorkflowDenied("writing a remediation policy needs the sre role")
        body = NewPolicySerializer(data=request.data)
        body.is_valid(raise_exception=True)
        try:
            policy = actions.create_policy(request.user, body.validated_data["name"], body.terms())
        except actions.PolicyInvalid as exc:
            return _invalid(exc)
        return Response(PolicyDetailSerializer(policy).data, status=status.HTTP_201_CREATED)


class PolicyDetailView(APIView):
    @extend_schema(responses=PolicyDetailSerializer)
    def get(self, request: Request, policy_id: int) -> Response:
        return Response(PolicyDetailSerializer(get_policy_for_user(request.user, policy_id)).data)

    @extend_schema(
        request=PolicyTermsSerializer, responses={200: PolicyDetailSerializer, 409: CONFLICT}
    )
    def put(self, request: Request, policy_id: int) -> Response:
        policy = get_policy_for_user(request.user, policy_id)
        if not roles.can_write_policy(request.user):
            raise WorkflowDenied("editing a remediation policy needs the sre role")
        body = PolicyTermsSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        try:
            policy = actions.edit_policy(policy, request.user, body.terms())
        except actions.PolicyInvalid as exc:
            return _invalid(exc)
        except WorkflowError as exc:
            return _conflict(exc)
        return Response(PolicyDetailSerializer(policy).data)


# Each action on a policy: the serializer of its body (None: it takes none), and the call that does
# it, given the policy, the caller and the body's reason.
_Do = Callable[[RemediationPolicy, Any, str], RemediationPolicy]
ACTIONS: dict[str, tuple[type[serializers.Serializer] | None, _Do, str]] = {
    "approve": (
        None,
        lambda policy, user, _: actions.approve_policy(policy, user),
        "Approve the policy's proposed version (an SRE other than its writer)",
    ),
    "reject": (
        PolicyCloseSerializer,
        lambda policy, user, reason: actions.close_policy(
            policy, user, state=PolicyState.REJECTED, reason=reason
        ),
        "Reject the policy's proposed version",
    ),
    "retire": (
        PolicyCloseSerializer,
        lambda policy, user, reason: actions.close_policy(
            policy, user, state=PolicyState.RETIRED, reason=reason
        ),
        "Retire the policy",
    ),
}


class PolicyActionView(APIView):
    """One of :data:`ACTIONS` (``policy_action``): each has its view below, and its path."""

    policy_action = ""

    def post(self, request: Request, policy_id: int) -> Response:
        policy = get_policy_for_user(request.user, policy_id)
        form_class, do, _ = ACTIONS[self.policy_action]
        reason = ""
        if form_class is not None:
            body = form_class(data=request.data)
            body.is_valid(raise_exception=True)
            reason = body.validated_data["reason"]
        try:
            policy = do(policy, request.user, reason)
        except WorkflowError as exc:
            return _conflict(exc)
        return Response(PolicyDetailSerializer(policy).data)


def _action_view(name: str) -> type[PolicyActionView]:
    """The view of one action: its own path, body and operation in the schema."""
    body, _, summary = ACTIONS[name]
    view = type(
        f"Policy{name.capitalize()}View",
        (PolicyActionView,),
        {"policy_action": name, "__module__": __name__, "__doc__": f"``POST .../{name}``."},
    )
    schema = extend_schema(
        request=body,
        responses={200: PolicyDetailSerializer, 409: CONFLICT},
        operation_id=f"autopilot_policy_{name}",
        summary=summary,
    )
    return extend_schema_view(post=schema)(view)


PolicyApproveView = _action_view("approve")
PolicyRejectView = _action_view("reject")
PolicyRetireView = _action_view("retire")


class PolicyReplayView(APIView):
    """What the policy's current terms would have done over the stored history (``days``,
    1 to 14, default 7) -- enforce or not, approved or not."""

    @extend_schema(
        parameters=[OpenApiParameter("days", int, description="1 to 14, default 7")],
        responses=PolicyReplaySerializer,
    )
    def get(self, request: Request, policy_id: int) -> Response:
        policy = get_policy_for_user(request.user, policy_id)
        days = serializers.IntegerField(min_value=1, max_value=14)
        try:
            wanted = days.run_validation(request.query_params.get("days", "7"))
        except serializers.ValidationError as exc:
            return invalid({"days": exc.detail})
        terms = actions.terms_of(policy)
        return Response(
            {"policy": policy.name, **replay_preview(terms, days=wanted, policy_id=policy.pk)}
        )


class DecisionListView(APIView):
    @extend_schema(parameters=[DecisionFilter], responses=DecisionSerializer(many=True))
    def get(self, request: Request) -> Response:
        query = DecisionFilter(data=request.query_params)
        query.is_valid(raise_exception=True)
        wanted = query.validated_data
        rows = AutopilotDecision.objects.filter(
            policy__in=policies_for_user(request.user),
            cluster__in=clusters_for_user(request.user),
        )
        if "policy" in wanted:
            rows = rows.filter(policy_id=wanted["policy"])
        if "cluster" in wanted:
            rows = rows.filter(cluster__name=wanted["cluster"])
        if "outcome" in wanted:
            rows = rows.filter(outcome=wanted["outcome"])
        rows = rows.select_related("policy", "cluster")[:DECISIONS_SHOWN]
        return Response(DecisionSerializer(rows, many=True).data)


class SwitchView(APIView):
    """The kill switch: ``stopped`` holds every policy back from the next cycle on."""

    @extend_schema(responses=SwitchSerializer)
    def get(self, request: Request) -> Response:
        if not can_read(request.user) or is_tenant_scoped(request.user):
            raise WorkflowDenied("reading the autopilot needs a role that reads whole clusters")
        switch = actions.kill_switch()
        return Response({"stopped": switch.stopped, "reason": switch.reason})

    @extend_schema(request=SwitchSerializer, responses=SwitchSerializer)
    def post(self, request: Request) -> Response:
        if not roles.can_stop_autopilot(request.user):
            raise WorkflowDenied("only an admin may stop or restart the autopilot")
        body = SwitchSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        switch = actions.set_kill_switch(
            request.user,
            stopped=body.validated_data["stopped"],
            reason=body.validated_data["reason"],
        )
        return Response({"stopped": switch.stopped, "reason": switch.reason})
