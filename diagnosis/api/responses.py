"""The bodies of the API's answers that no model serializer describes, typed for the OpenAPI
schema (docs/cli.md "The schema"): the views build plain dicts, these say what is in them."""

from __future__ import annotations

from rest_framework import serializers

from diagnosis.api.errors import ErrorSerializer
from diagnosis.api.serializers import IncidentSerializer, RecommendationDetailSerializer
from diagnosis.models.inbound import InboundState

NUMBER = {"allow_null": True, "help_text": "null: unknown (no data)"}


def _hours() -> serializers.DictField:
    return serializers.DictField(child=serializers.FloatField(allow_null=True))


class ClusterSizeSerializer(serializers.Serializer):
    cluster = serializers.CharField()
    held = serializers.BooleanField(help_text="whether a drop in size is held back")
    size = serializers.DictField(
        child=serializers.IntegerField(), required=False, help_text="the held size, per count"
    )
    cycles = serializers.IntegerField(required=False, help_text="cycles of that size so far")
    since = serializers.DateTimeField(required=False)
    falls = serializers.ListField(
        child=serializers.CharField(), required=False, help_text="what fell, in words"
    )
    confirmed = serializers.DictField(child=serializers.IntegerField(), required=False)
    confirmed_by = serializers.CharField(required=False)


class ClusterWritesSerializer(serializers.Serializer):
    cluster = serializers.CharField()
    enabled = serializers.BooleanField(help_text="approved changes are written to the scheduler")


class IncidentListSerializer(serializers.Serializer):
    count = serializers.IntegerField()
    results = IncidentSerializer(many=True)


class OutcomeSerializer(serializers.Serializer):
    """What a workflow step did (diagnosis/actions/workflow/outcome.py)."""

    kind = serializers.ChoiceField(
        ["sent", "accepted", "refused", "applied", "failed", "not-applied", "done"]
    )
    message = serializers.CharField()


class RecommendationStepSerializer(RecommendationDetailSerializer):
    outcome = OutcomeSerializer(read_only=True)

    class Meta(RecommendationDetailSerializer.Meta):
        fields = [*RecommendationDetailSerializer.Meta.fields, "outcome"]
        read_only_fields = fields


class StepConflictSerializer(ErrorSerializer):
    """A 409 of a workflow step; approving a change predicted to harm names the harm."""

    harm = serializers.ListField(child=serializers.CharField(), required=False)
    confirm = serializers.CharField(
        required=False, help_text="the body field that confirms it: `confirm_harm`"
    )


class EvictedJobSerializer(serializers.Serializer):
    id = serializers.CharField()
    tenant = serializers.CharField(allow_null=True)
    queue = serializers.CharField(allow_null=True)
    state = serializers.CharField()
    gang = serializers.BooleanField()
    gpus_on_node = serializers.ListField(child=serializers.IntegerField())
    job_gpus = serializers.IntegerField()
    on_failing_gpu = serializers.BooleanField()


class IncidentConflictSerializer(ErrorSerializer):
    """A 409 of an incident action; a drain whose jobs changed gives the fresh list."""

    jobs_to_evict = EvictedJobSerializer(many=True, required=False)


INBOUND_STATES = InboundState.values


class EventsReceivedSerializer(serializers.Serializer):
    """A scheduler-events post, answered 202 before a worker stores it."""

    batch = serializers.IntegerField(help_text="GET .../inbound/{batch} says how storing went")
    received = serializers.IntegerField()
    state = serializers.ChoiceField(INBOUND_STATES)


class InboundResultSerializer(serializers.Serializer):
    """What storing a received batch did: events stored and duplicates skipped; a topology
    created, replaced or superseded by a newer upload, with what it holds."""

    stored = serializers.IntegerField(required=False)
    duplicates = serializers.IntegerField(required=False)
    topology = serializers.ChoiceField(["created", "replaced", "superseded"], required=False)
    gpus = serializers.IntegerField(required=False)
    nvlink_domains = serializers.ListField(
        child=serializers.ListField(child=serializers.IntegerField()), required=False
    )
    numa = serializers.ListField(
        child=serializers.IntegerField(allow_null=True), allow_null=True, required=False
    )


class InboundBatchSerializer(serializers.Serializer):
    """A received events or topology batch and what became of it."""

    batch = serializers.IntegerField()
    cluster = serializers.CharField()
    kind = serializers.ChoiceField(["events", "topology"])
    node = serializers.CharField(allow_null=True, help_text="the topology's node")
    items = serializers.IntegerField()
    state = serializers.ChoiceField(INBOUND_STATES)
    received_at = serializers.DateTimeField()
    processed_at = serializers.DateTimeField(allow_null=True)
    attempts = serializers.IntegerField()
    result = InboundResultSerializer()
    error = serializers.CharField(allow_null=True)


class AlertOutcomeSerializer(serializers.Serializer):
    fingerprint = serializers.CharField()
    alertname = serializers.CharField()
    outcome = serializers.ChoiceField(["queued", "ignored", "rejected"])
    item = serializers.IntegerField(required=False, help_text="its place in the stored batch")
    errors = serializers.ListField(child=serializers.CharField(), required=False)


class AlertBatchReceivedSerializer(serializers.Serializer):
    batch = serializers.IntegerField(allow_null=True, help_text="the stored batch; null: none")
    alerts = AlertOutcomeSerializer(many=True)


class TopologyStoredSerializer(serializers.Serializer):
    """A node's topology upload as parsed, answered 202 before a worker stores it."""

    cluster = serializers.CharField()
    node = serializers.CharField()
    gpus = serializers.IntegerField()
    nvlink_domains = serializers.ListField(
        child=serializers.ListField(child=serializers.IntegerField())
    )
    numa = serializers.ListField(
        child=serializers.IntegerField(allow_null=True), allow_null=True, help_text="per GPU"
    )
    batch = serializers.IntegerField(help_text="GET .../inbound/{batch} says how storing went")
    state = serializers.ChoiceField(INBOUND_STATES)


class WaitStatsSerializer(serializers.Serializer):
    jobs = serializers.IntegerField()
    jobs_started = serializers.IntegerField()
    jobs_waiting = serializers.IntegerField()
    p50_s = serializers.FloatField(**NUMBER)
    p95_s = serializers.FloatField(**NUMBER)


class ReportScopeSerializer(serializers.Serializer):
    tenant_scoped = serializers.BooleanField()
    tenants = serializers.ListField(child=serializers.CharField(), allow_null=True)


class TenantRowSerializer(serializers.Serializer):
    """One tenant's line (docs/fairness.md "The maths")."""

    tenant = serializers.CharField()
    entitlement = serializers.FloatField(**NUMBER)
    fair_share = serializers.FloatField(**NUMBER)
    usage = serializers.FloatField(**NUMBER)
    ratio = serializers.FloatField(**NUMBER)
    demand = serializers.FloatField(**NUMBER)
    demand_share = serializers.FloatField(**NUMBER)
    allocated_gpu_hours = serializers.FloatField(**NUMBER)
    fair_gpu_hours = serializers.FloatField(**NUMBER)
    jobs_started = serializers.IntegerField()
    jobs_waiting = serializers.IntegerField()
    wait_p50_s = serializers.FloatField(**NUMBER)
    wait_p95_s = serializers.FloatField(**NUMBER)
    waits = serializers.DictField(child=WaitStatsSerializer(), help_text="per job kind")
    starvation_findings = serializers.IntegerField()
    starving_job_hours = serializers.FloatField(**NUMBER)
    preemptions = serializers.IntegerField()
    util = serializers.FloatField(**NUMBER)
    mfu = serializers.FloatField(**NUMBER)
    mfu_weighted_gpu_hours = serializers.FloatField(**NUMBER)
    held_idle_gpu_hours = serializers.FloatField(**NUMBER)
    gpu_hours = _hours()
    dominant_share = serializers.FloatField(**NUMBER)
    dominant_resource = serializers.CharField(allow_null=True)


class ProductiveRowSerializer(serializers.Serializer):
    tenant = serializers.CharField()
    allocated_ratio = serializers.FloatField(**NUMBER)
    useful_gpu_hours = serializers.FloatField(**NUMBER)
    wasted_gpu_hours = _hours()
    productive_share = serializers.FloatField(**NUMBER)
    productive_ratio = serializers.FloatField(**NUMBER)
    mfu_weighted_ratio = serializers.FloatField(**NUMBER)
    productively_starved = serializers.BooleanField()


class ProductiveSerializer(serializers.Serializer):
    allocated_jain_index = serializers.FloatField(**NUMBER)
    jain_index = serializers.FloatField(**NUMBER)
    cluster_mfu = serializers.FloatField(**NUMBER)
    verdict = serializers.CharField()
    headline = serializers.CharField()
    productively_starved = serializers.ListField(child=serializers.CharField())
    tenants = ProductiveRowSerializer(many=True)


class TreeNodeSerializer(serializers.Serializer):
    name = serializers.CharField()
    kind = serializers.CharField()
    parent = serializers.CharField(allow_null=True)
    depth = serializers.IntegerField()
    weight = serializers.FloatField(**NUMBER)
    tenant = serializers.CharField(allow_null=True)
    demand_gpus = serializers.FloatField(**NUMBER)
    fair_gpus = serializers.FloatField(**NUMBER)
    held_gpus = serializers.FloatField(**NUMBER)
    ratio = serializers.FloatField(**NUMBER)


class TreeSerializer(serializers.Serializer):
    as_of = serializers.DateTimeField(allow_null=True)
    nodes = TreeNodeSerializer(many=True)


# The fairness report document (docs/fairness.md "API"); built from a dict because one of its
# fields is called "from".
FairnessReportSerializer = type(
    "FairnessReportSerializer",
    (serializers.Serializer,),
    {
        "__doc__": "The fairness report of a cluster over a period.",
        "__module__": __name__,
        "format": serializers.CharField(),
        "cluster": serializers.CharField(),
        "from": serializers.DateTimeField(),
        "to": serializers.DateTimeField(),
        "preset": serializers.CharField(allow_null=True),
        "generated_at": serializers.DateTimeField(),
        "scope": ReportScopeSerializer(),
        "cycles": serializers.IntegerField(),
        "covered_s": serializers.FloatField(**NUMBER),
        "capacity_gpu_hours": serializers.FloatField(**NUMBER),
        "usable_gpu_hours": serializers.FloatField(**NUMBER),
        "entitlement_basis": serializers.CharField(help_text="deserved, weight, mixed or empty"),
        "jain_index": serializers.FloatField(**NUMBER),
        "waits": serializers.DictField(child=WaitStatsSerializer(), help_text="all, then per kind"),
        "tenants": TenantRowSerializer(many=True),
        "productive": ProductiveSerializer(),
        "tree": TreeSerializer(),
    },
)


class PricingSerializer(serializers.Serializer):
    """A cluster's one price per GPU-hour (docs/fairness.md "Cost")."""

    priced = serializers.BooleanField()
    currency = serializers.CharField(allow_null=True, help_text="null: not priced")
    price_per_gpu_hour = serializers.CharField(
        allow_null=True, help_text="exact decimal text; null: not priced"
    )
    reason = serializers.CharField(allow_null=True, help_text="why not priced; null: priced")
    gpu_models = serializers.ListField(child=serializers.CharField())
    unpriced_models = serializers.ListField(child=serializers.CharField())


class FleetWasteSerializer(serializers.Serializer):
    """A cluster's top waste bucket of its last good hour."""

    bucket = serializers.CharField()
    gpu_hours = serializers.FloatField()
    share = serializers.FloatField(**NUMBER)
    cost = serializers.CharField(allow_null=True, help_text="two decimals; null: not priced")


class FleetClusterSerializer(serializers.Serializer):
    cluster = serializers.CharField()
    gpus = serializers.IntegerField(**NUMBER)
    allocated_gpus = serializers.IntegerField(**NUMBER)
    allocation_utilization = serializers.FloatField(**NUMBER)
    activity_utilization = serializers.FloatField(**NUMBER)
    as_of = serializers.DateTimeField(allow_null=True, help_text="null: no good cycle yet")
    stale = serializers.BooleanField()
    has_data = serializers.BooleanField()
    open_incidents = serializers.IntegerField()
    open_findings = serializers.IntegerField()
    top_waste = FleetWasteSerializer(allow_null=True, help_text="null: no waste measured")
    pricing = PricingSerializer()


class FleetSerializer(serializers.Serializer):
    """Every cluster the caller may read, with the fleet's totals."""

    format = serializers.CharField()
    gpus = serializers.IntegerField()
    allocation_utilization = serializers.FloatField(**NUMBER)
    activity_utilization = serializers.FloatField(**NUMBER)
    stale_clusters = serializers.IntegerField()
    open_incidents = serializers.IntegerField()
    top_waste_cost = serializers.CharField(
        allow_null=True, help_text="null: no waste, or a cluster with waste is not priced"
    )
    clusters = FleetClusterSerializer(many=True)


class FleetTenantPartSerializer(serializers.Serializer):
    """One cluster's part of a fleet tenant."""

    cluster = serializers.CharField()
    allocated_gpu_hours = serializers.FloatField(**NUMBER)
    fair_gpu_hours = serializers.FloatField(**NUMBER)
    demand_gpu_hours = serializers.FloatField(**NUMBER)
    wasted_gpu_hours = serializers.FloatField(**NUMBER)
    ratio = serializers.FloatField(**NUMBER)
    cost = serializers.CharField(allow_null=True, help_text="two decimals; null: not priced")
    wasted_cost = serializers.CharField(allow_null=True)


class FleetTenantSerializer(serializers.Serializer):
    """One tenant name across the clusters, with each cluster's part."""

    tenant = serializers.CharField()
    clusters = serializers.ListField(child=serializers.CharField())
    allocated_gpu_hours = serializers.FloatField(**NUMBER)
    fair_gpu_hours = serializers.FloatField(**NUMBER)
    demand_gpu_hours = serializers.FloatField(**NUMBER)
    wasted_gpu_hours = serializers.FloatField(**NUMBER)
    ratio = serializers.FloatField(**NUMBER)
    cost = serializers.CharField(allow_null=True, help_text="two decimals; null: not priced")
    wasted_cost = serializers.CharField(allow_null=True)
    parts = FleetTenantPartSerializer(many=True)


class FleetScopeSerializer(serializers.Serializer):
    tenant_scoped = serializers.BooleanField()


# The fleet's tenant report (docs/fairness.md "The fleet"); built from a dict because one of its
# fields is called "from".
FleetTenantReportSerializer = type(
    "FleetTenantReportSerializer",
    (serializers.Serializer,),
    {
        "__doc__": "The cross-cluster tenant report over a period.",
        "__module__": __name__,
        "format": serializers.CharField(),
        "from": serializers.DateTimeField(),
        "to": serializers.DateTimeField(),
        "preset": serializers.CharField(allow_null=True),
        "generated_at": serializers.DateTimeField(),
        "scope": FleetScopeSerializer(),
        "clusters": serializers.ListField(child=serializers.CharField(), help_text="read, by name"),
        "pricing": serializers.DictField(child=PricingSerializer(), help_text="per cluster"),
        "cost": serializers.CharField(allow_null=True, help_text="null: some part not priced"),
        "tenants": FleetTenantSerializer(many=True),
    },
)
