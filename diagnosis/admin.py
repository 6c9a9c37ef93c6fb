"""Django admin for every diagnosis model; the audit trail is read-only here as everywhere."""

from typing import Any

from django.contrib import admin
from django.http import HttpRequest
from rest_framework.authtoken.models import TokenProxy

from diagnosis.models import (
    ApiToken,
    AuditEntry,
    Cluster,
    ClusterCycle,
    DeliveryState,
    Finding,
    FindingEvent,
    Gpu,
    InboundAlertBatch,
    InboundClusterBatch,
    Incident,
    Job,
    Node,
    OwnerNotice,
    OwnerNoticePolicy,
    Queue,
    Recommendation,
    ReportSubscription,
    RuleOverride,
    SchedulerEvent,
    Snapshot,
    Tenant,
)
from diagnosis.roles import can_administer


class AdminRoleOnly:
    """A model an admin (the gpuobs role, docs/architecture.md#roles-and-security) alone may see and
    change here: a Django
    staff flag and model permissions are not enough (their settings name data sources)."""

    def has_module_permission(self, request: HttpRequest) -> bool:
        return can_administer(request.user) and super().has_module_permission(request)

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return can_administer(request.user) and super().has_view_permission(request, obj)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return can_administer(request.user) and super().has_add_permission(request)

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return can_administer(request.user) and super().has_change_permission(request, obj)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return can_administer(request.user) and super().has_delete_permission(request, obj)


class ReadOnly:
    """A model no one adds, changes or deletes here: its rows are written elsewhere (the audited
    workflow, the append-only audit trail)."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Cluster)
class ClusterAdmin(AdminRoleOnly, admin.ModelAdmin):
    list_display = [
        "name",
        "scheduler_kind",
        "metrics_kind",
        "enabled",
        "dry_run",
        "status",
        "last_cycle_at",
    ]
    list_filter = ["enabled", "dry_run", "scheduler_kind", "metrics_kind", "status"]
    search_fields = ["name"]
    readonly_fields = ["last_cycle_at", "status_changed_at", "status_detail", "created_at"]

    def get_readonly_fields(self, request: HttpRequest, obj: Cluster | None = None) -> list[str]:
        """The write switch (``dry_run``) and auto-rollback are an admin's (role) to change."""
        fields = list(super().get_readonly_fields(request, obj))
        if not can_administer(request.user):
            fields += ["dry_run", "auto_rollback"]
        return fields

    def save_model(self, request: HttpRequest, obj: Cluster, form: Any, change: bool) -> None:
        """A change of the write switch goes through the audited action."""
        wanted_dry_run = obj.dry_run
        switched = change and "dry_run" in form.changed_data
        if switched:
            obj.dry_run = not wanted_dry_run  # saved as it was: the action flips it, audited
        super().save_model(request, obj, form, change)
        if switched:
            # the workflow (and the core under it) when an admin flips the switch, not at the
            # admin's autodiscovery in every process's start-up (#35)
            from diagnosis.actions.workflow.review import set_cluster_writes  # noqa: PLC0415

            set_cluster_writes(obj, request.user, enabled=not wanted_dry_run)
            obj.refresh_from_db()


@admin.register(Node)
class NodeAdmin(admin.ModelAdmin):
    list_display = ["name", "cluster", "pool", "gpu_model", "gpu_count", "state"]
    list_filter = ["cluster", "state", "pool"]
    search_fields = ["name"]


@admin.register(Gpu)
class GpuAdmin(admin.ModelAdmin):
    list_display = ["node", "index", "uuid", "health"]
    list_filter = ["health", "node__cluster"]
    search_fields = ["node__name", "uuid"]
    list_select_related = ["node__cluster"]


@admin.register(Tenant)
class TenantAdmin(admin.ModelAdmin):
    list_display = ["name", "cluster", "manager_names"]
    list_filter = ["cluster"]
    search_fields = ["name"]
    # Tenants come from the clusters' queues each cycle; an admin assigns their managers here.
    fields = ["cluster", "name", "managers"]
    filter_horizontal = ["managers"]

    @admin.display(description="managers")
    def manager_names(self, tenant: Tenant) -> str:
        return ", ".join(sorted(u.get_username() for u in tenant.managers.all()))

    def get_queryset(self, request: HttpRequest):
        return super().get_queryset(request).prefetch_related("managers")


@admin.register(Queue)
class QueueAdmin(admin.ModelAdmin):
    list_display = ["name", "cluster", "tenant", "weight", "deserved_gpus", "capability_gpus"]
    list_filter = ["cluster"]
    search_fields = ["name"]


@admin.register(Job)
class JobAdmin(admin.ModelAdmin):
    list_display = ["external_id", "name", "cluster", "tenant", "state", "pods", "gpus_per_pod"]
    list_filter = ["cluster", "state", "kind"]
    search_fields = ["external_id", "name"]
    list_select_related = ["cluster", "tenant__cluster"]
    raw_id_fields = ["tenant", "queue"]


@admin.register(SchedulerEvent)
class SchedulerEventAdmin(admin.ModelAdmin):
    list_display = ["time", "cluster", "kind", "job_external_id", "node", "reason"]
    list_filter = ["cluster", "kind"]
    search_fields = ["job_external_id", "node", "reason"]


@admin.register(InboundAlertBatch)
class InboundAlertBatchAdmin(AdminRoleOnly, ReadOnly, admin.ModelAdmin):
    """Alertmanager's stored batches and what each alert did (docs/operations.md, "Inbound
    webhooks"); the receiver and its task write them."""

    list_display = ["received_at", "sender", "alerts", "state", "attempts", "processed_at"]
    list_filter = ["state"]


@admin.register(InboundClusterBatch)
class InboundClusterBatchAdmin(AdminRoleOnly, ReadOnly, admin.ModelAdmin):
    """Received scheduler-event and topology batches and what storing each did
    (docs/operations.md, "Inbound webhooks"); the receivers and their task write them."""

    list_display = ["received_at", "cluster", "kind", "node", "items", "state", "processed_at"]
    list_filter = ["state", "kind", "cluster"]


@admin.register(Snapshot)
class SnapshotAdmin(admin.ModelAdmin):
    list_display = ["cluster", "as_of", "format", "json_bytes", "stored_bytes"]
    list_filter = ["cluster"]
    exclude = ["document"]  # compressed bytes; export a snapshot to read it
    readonly_fields = ["cluster", "as_of", "format", "json_bytes", "stored_bytes", "created_at"]


class FindingEventInline(admin.TabularInline):
    model = FindingEvent
    extra = 0


@admin.register(Finding)
class FindingAdmin(admin.ModelAdmin):
    list_display = ["rule_id", "subject", "cluster", "severity", "state", "last_hit_at"]
    list_filter = ["cluster", "state", "severity", "rule_id"]
    search_fields = ["subject", "summary"]
    readonly_fields = ["fingerprint"]
    inlines = [FindingEventInline]


@admin.register(RuleOverride)
class RuleOverrideAdmin(AdminRoleOnly, admin.ModelAdmin):
    list_display = ["cluster", "rule_id", "threshold", "value", "updated_at"]
    list_filter = ["cluster", "rule_id"]


@admin.register(Recommendation)
class RecommendationAdmin(ReadOnly, admin.ModelAdmin):
    """Read-only: a recommendation moves only through the audited workflow (the pages, the API)."""

    list_display = ["kind", "target", "cluster", "state", "created_by", "approved_by", "created_at"]
    list_filter = ["cluster", "state", "kind"]
    search_fields = ["target"]
    raw_id_fields = ["motivating_findings"]


@admin.register(AuditEntry)
class AuditEntryAdmin(ReadOnly, admin.ModelAdmin):
    list_display = ["time", "actor", "action", "target", "cluster"]
    list_filter = ["action", "cluster"]
    search_fields = ["actor", "target"]


@admin.register(Incident)
class IncidentAdmin(admin.ModelAdmin):
    list_display = ["opened_at", "cluster", "node", "gpu_index", "xid_code", "state"]
    list_filter = ["cluster", "state", "xid_code"]
    search_fields = ["node", "summary", "fingerprint"]


@admin.register(ClusterCycle)
class ClusterCycleAdmin(admin.ModelAdmin):
    list_display = ["cluster", "as_of", "ok", "gpus", "allocation_utilization", "seconds"]
    list_filter = ["cluster", "ok"]
    readonly_fields = [f.name for f in ClusterCycle._meta.fields]


@admin.register(ReportSubscription)
class ReportSubscriptionAdmin(admin.ModelAdmin):
    list_display = ["user", "cluster", "frequency", "last_sent_at", "last_error"]
    list_filter = ["cluster", "frequency"]
    raw_id_fields = ["user"]


@admin.register(OwnerNoticePolicy)
class OwnerNoticePolicyAdmin(AdminRoleOnly, admin.ModelAdmin):
    """Notices to job owners per cluster (docs/integrations.md); off until an admin says."""

    list_display = ["cluster", "enabled", "channel", "grace_s", "email_domain"]
    list_filter = ["enabled", "channel"]


@admin.register(OwnerNotice)
class OwnerNoticeAdmin(admin.ModelAdmin):
    list_display = ["sent_at", "cluster", "rule_id", "job_external_id", "recipient", "channel"]
    list_filter = ["cluster", "rule_id", "channel"]
    search_fields = ["job_external_id", "recipient", "owner"]
    readonly_fields = [f.name for f in OwnerNotice._meta.fields]


@admin.register(DeliveryState)
class DeliveryStateAdmin(AdminRoleOnly, admin.ModelAdmin):
    list_display = ["cluster", "channel", "last_success_at", "consecutive_failures"]
    readonly_fields = [f.name for f in DeliveryState._meta.fields]


# DRF's plain tokens are not shown (their key is the secret); the hashed ones show no secret.
if admin.site.is_registered(TokenProxy):
    admin.site.unregister(TokenProxy)


@admin.register(ApiToken)
class ApiTokenAdmin(AdminRoleOnly, admin.ModelAdmin):
    """Hashed API tokens: made with ``manage.py api_token create`` (the secret is shown once),
    revoked here by deleting them."""

    list_display = ["name", "user", "prefix", "created_at", "expires_at", "last_used_at"]
    readonly_fields = ["user", "name", "prefix", "created_at", "last_used_at"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False
