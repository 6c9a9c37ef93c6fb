"""Request bodies of the machine API, parsed at the boundary with errors that name each field."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from diagnosis.access import evidence_for_user, subject_for_user, text_for_user
from diagnosis.choices import (
    RecommendationKind,
    RecommendationState,
    SchedulerEventKind,
)
from diagnosis.core.numbers import finite_number
from diagnosis.models import AuditEntry, Cluster, Finding, Incident, Job, Recommendation
from diagnosis.reports.pricing import pricings

MAX_EVENTS_PER_BATCH = 5000


class SchedulerEventSerializer(serializers.Serializer):
    """One event in the snapshot's normalized shape (docs/snapshot.md, ``events[]``).

    ``id`` is the scheduler's own event id: an event posted twice with one id is stored once.
    Without it, an event is keyed by its content (time, kind, job, node, reason, message).
    """

    time = serializers.DateTimeField()
    kind = serializers.ChoiceField(choices=SchedulerEventKind.choices)
    job = serializers.CharField(max_length=255, required=False, allow_blank=True, allow_null=True)
    node = serializers.CharField(max_length=253, required=False, allow_blank=True, allow_null=True)
    reason = serializers.CharField(
        max_length=255, required=False, allow_blank=True, allow_null=True
    )
    message = serializers.CharField(
        max_length=10_000, required=False, allow_blank=True, allow_null=True
    )
    id = serializers.CharField(max_length=200, required=False, allow_blank=False)

    def to_internal_value(self, data: Any) -> dict[str, Any]:
        """Also refuse unknown fields (a typo must not pass silently) and times without a zone;
        every problem of the event is reported at once."""
        extra: dict[str, list[str]] = {}
        if isinstance(data, dict):
            extra = {key: ["unknown field"] for key in data if key not in self.fields}
            raw = data.get("time")
            if isinstance(raw, str) and not _has_zone(raw):
                extra["time"] = ["needs a time zone (e.g. 2026-11-29T08:00:00Z)"]
        try:
            value = super().to_internal_value(data)
        except serializers.ValidationError as exc:
            if extra and isinstance(exc.detail, dict):
                raise serializers.ValidationError({**extra, **exc.detail}) from None
            raise
        if extra:
            raise serializers.ValidationError(extra)
        return value


def _has_zone(text: str) -> bool:
    tail = text.strip()[10:]
    return tail.endswith(("Z", "z")) or "+" in tail or "-" in tail


class EventBatchSerializer(serializers.Serializer):
    events = serializers.ListField(
        child=SchedulerEventSerializer(),
        allow_empty=False,
        max_length=MAX_EVENTS_PER_BATCH,
    )

    def normalized(self) -> list[dict[str, Any]]:
        """The events as ``record_scheduler_events`` takes them."""
        events = []
        for event in self.validated_data["events"]:
            row = {key: event.get(key) for key in ("time", "kind", "job", "node", "reason")}
            row["message"] = event.get("message")
            if event.get("id"):
                row["dedup_key"] = f"api:{event['id']}"
            events.append(row)
        return events


class ClusterSerializer(serializers.ModelSerializer):
    """A cluster as the API shows it; data-source configs stay out (they are admin-only)."""

    class Meta:
        model = Cluster
        fields = [
            "id",
            "name",
            "scheduler_kind",
            "metrics_kind",
            "enabled",
            "dry_run",
            "status",
            "status_message",
            "last_cycle_at",
        ]
        read_only_fields = fields


class AuditEntrySerializer(serializers.ModelSerializer):
    class Meta:
        model = AuditEntry
        fields = ["id", "time", "actor", "action", "target", "before", "after"]
        read_only_fields = fields


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
    money_at_stake = serializers.SerializerMethodField(
        help_text="the GPU-hours the impact estimate puts at stake and, on a priced cluster, "
        "their cost (docs/accounting.md, Cost); null without a stake"
    )
    stage = serializers.CharField(
        read_only=True, help_text="The state as the badge shows it: `requested` when asked for."
    )

    class Meta:
        model = Recommendation
        fields = [
            "id",
            "cluster",
            "kind",
            "target",
            "change",
            "state",
            "stage",
            "status_message",
            "summary",
            "verdict",
            "preselect",
            "harm",
            "impact",
            "motivating_findings",
            "money_at_stake",
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

    def get_money_at_stake(self, rec: Recommendation) -> dict[str, Any] | None:
        hours = finite_number((rec.impact or {}).get("stake_gpu_h"))
        if hours is None or hours <= 0:
            return None
        prices = self.context.setdefault("pricing_by_cluster", {})  # one read per cluster
        if rec.cluster_id not in prices:
            prices[rec.cluster_id] = pricings([rec.cluster])[rec.cluster_id]
        cost = prices[rec.cluster_id].cost(hours)
        return {
            "gpu_hours": hours,
            "cost": cost.as_text() if cost else None,
            "currency": cost.currency if cost else None,
        }

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


class ApproveSerializer(serializers.Serializer):
    confirm_harm = serializers.BooleanField(
        required=False,
        default=False,
        help_text="Approve although the impact estimate predicts harm (the harm is audited).",
    )


class RecommendationFilter(serializers.Serializer):
    """The list's query string, parsed at the boundary (a bad value names its parameter)."""

    cluster = serializers.SlugField(required=False)
    state = serializers.ChoiceField(choices=RecommendationState.choices, required=False)
    kind = serializers.ChoiceField(choices=RecommendationKind.choices, required=False)
    awaiting = serializers.ChoiceField(
        choices=[("me", "the requested changes the caller may approve")], required=False
    )


class WriteSwitchSerializer(serializers.Serializer):
    enabled = serializers.BooleanField()


class JobSerializer(serializers.ModelSerializer):
    id = serializers.CharField(source="external_id")
    tenant = serializers.CharField(source="tenant.name", default=None)
    queue = serializers.CharField(source="queue.name", default=None)
    gpus = serializers.IntegerField()

    class Meta:
        model = Job
        fields = [
            "id",
            "name",
            "tenant",
            "queue",
            "pool",
            "kind",
            "priority",
            "state",
            "submitted_at",
            "started_at",
            "ended_at",
            "unlisted_since",
            "pods",
            "gpus_per_pod",
            "gpus",
            "gang",
            "min_member",
            "preemptions",
        ]
        read_only_fields = fields


class FindingSerializer(serializers.ModelSerializer):
    tenant = serializers.CharField(source="tenant.name", default=None)

    class Meta:
        model = Finding
        fields = [
            "id",
            "rule_id",
            "subject",
            "tenant",
            "state",
            "severity",
            "summary",
            "evidence",
            "first_seen",
            "last_seen",
            "last_hit_at",
            "firing_since",
            "resolved_at",
        ]
        read_only_fields = fields

    def to_representation(self, instance: Finding) -> dict[str, Any]:
        """Subject, summary and evidence as the caller may read them (a manager: their tenants'
        jobs only)."""
        data = super().to_representation(instance)
        request = self.context.get("request")
        if request is not None:
            user, cluster_id = request.user, instance.cluster_id
            data["subject"] = subject_for_user(user, cluster_id, data["subject"])
            data["summary"] = text_for_user(user, cluster_id, data["summary"])
            data["evidence"] = evidence_for_user(user, cluster_id, data["evidence"])
        return data


def _username(user: Any) -> str | None:
    return user.get_username() if user is not None else None


class IncidentSerializer(serializers.ModelSerializer):
    """An incident with its jobs and tenants hit (a manager's: only their tenants' jobs, given
    as ``context["tenants"]``), its drain and, with ``context["history"]``, its timeline."""

    cluster = serializers.SlugRelatedField(slug_field="name", read_only=True)
    acknowledged_by = serializers.SlugRelatedField(
        slug_field="username", read_only=True, allow_null=True
    )
    resolved_by = serializers.SlugRelatedField(
        slug_field="username", read_only=True, allow_null=True
    )
    jobs = serializers.SerializerMethodField()
    tenants = serializers.SerializerMethodField()
    xid = serializers.SerializerMethodField()
    drain = serializers.SerializerMethodField()
    history = serializers.SerializerMethodField()

    class Meta:
        model = Incident
        fields = [
            "id",
            "cluster",
            "node",
            "gpu_index",
            "xid_code",
            "state",
            "source",
            "summary",
            "opened_at",
            "acknowledged_by",
            "acknowledged_at",
            "resolved_by",
            "resolved_at",
            "healthy_since",
            "finding",
            "xid",
            "jobs",
            "tenants",
            "drain",
            "history",
        ]

    def _scoped(self, jobs: Any) -> list[dict[str, Any]]:
        tenants = self.context.get("tenants")
        rows = [j for j in jobs or () if isinstance(j, dict)]
        return rows if tenants is None else [j for j in rows if j.get("tenant") in tenants]

    def get_jobs(self, incident: Incident) -> list[dict[str, Any]]:
        return self._scoped((incident.details or {}).get("jobs"))

    def get_tenants(self, incident: Incident) -> list[str]:
        return sorted({j["tenant"] for j in self.get_jobs(incident) if j.get("tenant")})

    def get_xid(self, incident: Incident) -> Any:
        return (incident.details or {}).get("xid")

    def get_drain(self, incident: Incident) -> dict[str, Any] | None:
        drain = (incident.details or {}).get("drain")
        if not drain or incident.drain_id is None:
            return None
        jobs = self._scoped(drain.get("jobs"))
        return {
            "recommendation": incident.drain_id,
            "state": incident.drain.state,
            "node": drain.get("node"),
            "by": drain.get("by"),
            "jobs": jobs,
        }

    def _text(self, incident: Incident, text: str) -> str:
        user = self.context.get("user")
        return text if user is None else text_for_user(user, incident.cluster_id, text)

    def to_representation(self, instance: Incident) -> dict[str, Any]:
        """The summary as the caller may read it (``context["user"]``, a manager: no other
        tenant's job or tenant in it), like every timeline entry."""
        data = super().to_representation(instance)
        data["summary"] = self._text(instance, data["summary"])
        return data

    def get_history(self, incident: Incident) -> list[dict[str, Any]] | None:
        if not self.context.get("history"):
            return None
        return [
            {
                "time": e.time,
                "actor": e.actor,
                "kind": e.kind,
                "state_before": e.state_before,
                "state_after": e.state_after,
                "text": self._text(incident, e.text),
            }
            for e in incident.history.all()
        ]


class IncidentNoteSerializer(serializers.Serializer):
    text = serializers.CharField(max_length=4000, trim_whitespace=True)


class IncidentResolveSerializer(serializers.Serializer):
    note = serializers.CharField(max_length=2000, required=False, allow_blank=True, default="")


class IncidentDrainSerializer(serializers.Serializer):
    expected_jobs = serializers.ListField(
        child=serializers.CharField(max_length=255), required=False, allow_null=True, default=None
    )


class JobForecastSerializer(serializers.Serializer):
    """A pending job's start-time forecast (docs/forecasts.md), as ``forecast_text.forecast_view``
    makes it for the reader: texts and named jobs through their tenant scope."""

    job = serializers.CharField(help_text="The scheduler's id of the job.")
    as_of = serializers.DateTimeField(help_text="Snapshot time the forecast was made from.")
    start_at = serializers.DateTimeField(
        allow_null=True, help_text="Median start over the seeds; null: later than the horizon."
    )
    low_at = serializers.DateTimeField(allow_null=True, help_text="Earliest seed's start.")
    high_at = serializers.DateTimeField(
        allow_null=True, help_text="Latest seed's start; null: a seed did not start it."
    )
    predicted_wait_s = serializers.FloatField(
        allow_null=True, help_text="Seconds from submission to the median start."
    )
    horizon_s = serializers.FloatField()
    seeds = serializers.IntegerField()
    started_in = serializers.IntegerField(help_text="Seeds in which it started.")
    cause = serializers.ChoiceField(
        choices=[
            "partial-gang",
            "quota",
            "too-big",
            "fragmentation",
            "partial-gangs",
            "capacity",
            "order",
        ],
        help_text="The blocking cause (docs/forecasts.md, Blocking causes).",
    )
    figures = serializers.DictField(help_text="The cause's figures (GPUs, queue, pool...).")
    cause_text = serializers.CharField()
    unblock_text = serializers.CharField(help_text="What would make it start sooner.")
    finding = serializers.IntegerField(allow_null=True, help_text="The linked finding's id.")
    finding_url = serializers.CharField(allow_null=True)
    recommendation = serializers.IntegerField(
        allow_null=True, help_text="The open recommendation of that finding."
    )
    recommendation_url = serializers.CharField(allow_null=True)
