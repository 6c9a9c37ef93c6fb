"""The fixed vocabularies of gpuobs (docs/snapshot.md, docs/rules.md and docs/recommendations.md),
as Django choices.

Values are the words of the snapshot format and of the API; labels are what pages show.
"""

from typing import Any

from django.db import models

from diagnosis.core.plugins import Registry
from diagnosis.edge.schedulers.registry import ADAPTERS
from diagnosis.edge.sources.registry import SOURCES


def _registry_choices(name: str, registry: Registry[Any]) -> type[models.TextChoices]:
    """Choices whose values and labels are a plugin registry's ids and labels, in its order
    (member names: the ids in capitals, ``SchedulerKind.SIM``)."""
    members = [(pid.upper().replace("-", "_"), (pid, label)) for pid, label in registry.choices()]
    return models.TextChoices(name, members)  # type: ignore[return-value]


# The scheduler adapters and metric sources, from their registries (diagnosis/edge/*/registry.py).
SchedulerKind = _registry_choices("SchedulerKind", ADAPTERS)
MetricsKind = _registry_choices("MetricsKind", SOURCES)


class DataSourceStatus(models.TextChoices):
    """Health of a cluster's scheduler and metrics sources, as of its last cycle."""

    UNKNOWN = "unknown", "Unknown"
    OK = "ok", "OK"
    DEGRADED = "degraded", "Degraded"
    ERROR = "error", "Error"


class SenderKind(models.TextChoices):
    """What a machine token may write to the clusters it names (docs/integrations.md)."""

    TOPOLOGY = "topology", "Topology uploads"
    EVENTS = "events", "Scheduler events"
    ALERTS = "alerts", "Alertmanager alerts"


class NodeState(models.TextChoices):
    READY = "ready", "Ready"
    CORDONED = "cordoned", "Cordoned"
    DRAINED = "drained", "Drained"
    DOWN = "down", "Down"


class GpuHealth(models.TextChoices):
    OK = "ok", "OK"
    UNHEALTHY = "unhealthy", "Unhealthy"


class JobState(models.TextChoices):
    PENDING = "pending", "Pending"
    RUNNING = "running", "Running"
    COMPLETED = "completed", "Completed"
    FAILED = "failed", "Failed"
    PREEMPTED = "preempted", "Preempted"


class SchedulerEventKind(models.TextChoices):
    SUBMITTED = "submitted", "Submitted"
    SCHEDULED = "scheduled", "Scheduled"
    FAILED_SCHEDULING = "failed_scheduling", "Failed scheduling"
    STARTED = "started", "Started"
    PREEMPTED = "preempted", "Preempted"
    EVICTED = "evicted", "Evicted"
    COMPLETED = "completed", "Completed"
    FAILED = "failed", "Failed"
    NODE_CORDONED = "node_cordoned", "Node cordoned"
    NODE_DRAINED = "node_drained", "Node drained"
    XID = "xid", "Xid error"


class FindingState(models.TextChoices):
    PENDING = "pending", "Pending"
    FIRING = "firing", "Firing"
    RESOLVED = "resolved", "Resolved"


class Severity(models.TextChoices):
    INFO = "info", "Info"
    WARNING = "warning", "Warning"
    CRITICAL = "critical", "Critical"


class RecommendationKind(models.TextChoices):
    PLACEMENT_POLICY = "placement-policy", "Placement policy"
    QUEUE_WEIGHT = "queue-weight", "Queue weight"
    DRAIN_NODE = "drain-node", "Drain node"
    GANG_RELEASE = "gang-release", "Gang release"
    ADVISORY = "advisory", "Advisory"


class RecommendationState(models.TextChoices):
    PROPOSED = "proposed", "Proposed"
    APPROVED = "approved", "Approved"
    APPLYING = "applying", "Applying"
    APPLIED = "applied", "Applied"
    VERIFIED = "verified", "Verified"
    REGRESSED = "regressed", "Regressed"
    ROLLED_BACK = "rolled-back", "Rolled back"
    FAILED = "failed", "Failed"
    REJECTED = "rejected", "Rejected"
    EXPIRED = "expired", "Expired"
    SUPERSEDED = "superseded", "Superseded"


class IncidentState(models.TextChoices):
    OPEN = "open", "Open"
    ACKNOWLEDGED = "acknowledged", "Acknowledged"
    MITIGATING = "mitigating", "Mitigating"  # a drain requested or applied for it
    RESOLVED = "resolved", "Resolved"
