"""What gpuobs keeps: inventory, snapshots, findings and their history, recommendations and their
audit trail, incidents, rollups (docs/architecture.md#layers, "Django around it"). One module per
topic; every model is importable from ``diagnosis.models``, as Django expects.

Only the named functions in :mod:`diagnosis.actions` write these models; views, the API and
tasks read them or call an action.
"""

from diagnosis.models.autopilot import (
    AutopilotDecision,
    AutopilotOutcome,
    AutopilotSwitch,
    PolicyKind,
    PolicyMode,
    PolicyState,
    RemediationPolicy,
)
from diagnosis.models.cycles import ClusterCycle, Snapshot, SnapshotDocumentError
from diagnosis.models.findings import Finding, FindingEvent, RuleClock, RuleOverride
from diagnosis.models.forecasts import JobForecast
from diagnosis.models.impact import ReplayOutcome
from diagnosis.models.inbound import (
    InboundAlertBatch,
    InboundClusterBatch,
    InboundKind,
    InboundState,
)
from diagnosis.models.incidents import Incident, IncidentEvent
from diagnosis.models.inventory import (
    Cluster,
    Gpu,
    Job,
    Node,
    Queue,
    SchedulerEvent,
    Tenant,
)
from diagnosis.models.notifications import (
    DeliveryState,
    NotifyChannel,
    OwnerNotice,
    OwnerNoticePolicy,
)
from diagnosis.models.recommendations import (
    AuditEntry,
    AuditEntryImmutableError,
    AuditEntryQuerySet,
    Recommendation,
)
from diagnosis.models.rollups import (
    AccountingSlice,
    PoolRollup,
    PoolRollupHour,
    RollupFigures,
    TenantRollup,
    TenantRollupHour,
)
from diagnosis.models.subscriptions import ReportFrequency, ReportSubscription
from diagnosis.models.tokens import ApiToken
from diagnosis.models.topology import NodeTopology

__all__ = [
    "AccountingSlice",
    "ApiToken",
    "AuditEntry",
    "AuditEntryImmutableError",
    "AuditEntryQuerySet",
    "AutopilotDecision",
    "AutopilotOutcome",
    "AutopilotSwitch",
    "Cluster",
    "ClusterCycle",
    "DeliveryState",
    "Finding",
    "FindingEvent",
    "Gpu",
    "InboundAlertBatch",
    "InboundClusterBatch",
    "InboundKind",
    "InboundState",
    "Incident",
    "IncidentEvent",
    "Job",
    "JobForecast",
    "Node",
    "NodeTopology",
    "NotifyChannel",
    "OwnerNotice",
    "OwnerNoticePolicy",
    "PolicyKind",
    "PolicyMode",
    "PolicyState",
    "PoolRollup",
    "PoolRollupHour",
    "Queue",
    "Recommendation",
    "RemediationPolicy",
    "ReplayOutcome",
    "ReportFrequency",
    "ReportSubscription",
    "RollupFigures",
    "RuleClock",
    "RuleOverride",
    "SchedulerEvent",
    "Snapshot",
    "SnapshotDocumentError",
    "Tenant",
    "TenantRollup",
    "TenantRollupHour",
]
