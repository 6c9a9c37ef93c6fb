"""docs/architecture.md#one-cycle, step 5 "notify": firing findings and open incidents to
Alertmanager.

gpuobs pages nobody itself. After each cycle (:func:`notify_after_cycle`, enqueued on commit, so
the cycle never waits on it) :func:`deliver_to_alertmanager` sends Alertmanager's v2 API

- every firing finding whose severity reaches its rule's threshold
  (``GPUOBS_ALERTMANAGER_MIN_SEVERITY``, per rule ``GPUOBS_ALERTMANAGER_RULE_SEVERITY``) as
  ``alertname="GpuobsFinding"``;
- every open or acknowledged incident as ``alertname="GpuobsIncident"``;
- every requested change awaiting approval as ``alertname="GpuobsApprovalRequested"``, with the
  people who may approve it (label ``approvers``, comma-separated user names: route on it);
  sent at once when the change is requested, resolved once it is approved, rejected or gone;

each with ``endsAt`` a few cycles ahead (Alertmanager's resend model, as Prometheus does it: an
alert that stops being re-sent resolves by itself), and every finding or incident resolved since
the last successful delivery (less a margin) with ``endsAt`` at its resolution. So a cycle whose
delivery failed loses nothing: the next success sends what is still firing and everything that
resolved meanwhile. Retries with backoff are the edge client's
(:mod:`diagnosis.edge.notify.alertmanager`); each send's outcome is kept in :class:`DeliveryState`
(``/metrics`` counts it, the cluster page shows it).

``GPUOBS_ALERTMANAGER_URL`` may name several Alertmanagers (comma-separated: the members of an
HA cluster); each gets every alert, in parallel (``post_to_each`` of the edge client).
A send counts as delivered when at least one member took every batch (the members share the
notification log, so one page goes out); a member that did not is named in ``last_error`` and
gets the firing alerts again with the next cycle, as Prometheus does it.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.urls import reverse
from django.utils import timezone

from diagnosis.actions.enqueue import NOTIFY, notify_on_commit, send_task
from diagnosis.actions.notify.autopilot import autopilot_alerts
from diagnosis.actions.workflow.review import eligible_approvers
from diagnosis.choices import FindingState, IncidentState, RecommendationState, Severity
from diagnosis.core.rules.registry import all_rules
from diagnosis.edge import secrets
from diagnosis.edge.notify.alertmanager import (
    AlertmanagerTarget,
    PostableAlert,
    post_to_each,
)
from diagnosis.models import (
    Cluster,
    DeliveryState,
    Finding,
    FindingEvent,
    Incident,
    NotifyChannel,
    OwnerNoticePolicy,
    Recommendation,
)
from gpuobs import logs as gpuobs_logs

logger = logging.getLogger(__name__)

SEVERITY_ORDER = {Severity.INFO: 0, Severity.WARNING: 1, Severity.CRITICAL: 2}
# A resolution is re-sent for this long after the last successful delivery (Prometheus re-sends
# resolved alerts for 15 minutes): a lost answer to a successful post cannot lose it either.
RESOLVED_RESEND = timedelta(minutes=15)
# A firing alert is valid for this many cycles; re-sent every cycle, it resolves by itself if
# gpuobs stops sending (Prometheus: 4 x the resend delay).
VALID_CYCLES = 4
BATCH = 500
OPEN_INCIDENT_STATES = (IncidentState.OPEN, IncidentState.ACKNOWLEDGED, IncidentState.MITIGATING)


class NotifyConfigError(ValueError):
    """The Alertmanager settings are wrong (names the setting)."""


def alertmanager_urls() -> list[str]:
    """The Alertmanagers to send to (``GPUOBS_ALERTMANAGER_URL``, comma- or space-separated)."""
    return [url for url in re.split(r"[,\s]+", settings.GPUOBS_ALERTMANAGER_URL.strip()) if url]


def alertmanager_configured() -> bool:
    return bool(alertmanager_urls())


def _secret(setting: str) -> str:
    """The value of the ``GPUOBS_SECRET_*`` environment variable a setting names (the setting
    holds its name; any other name, ``DJANGO_SECRET_KEY`` included, is refused)."""
    try:
        return secrets.read_env(getattr(settings, setting))
    except secrets.SecretError as exc:
        raise NotifyConfigError(f"{setting}: {exc}") from None


def alertmanager_targets() -> list[AlertmanagerTarget]:
    """One target per configured Alertmanager; secrets are read from the environment variables
    named (the same credentials for every member of the cluster)."""
    token = None
    basic = None
    if settings.GPUOBS_ALERTMANAGER_TOKEN_ENV:
        token = _secret("GPUOBS_ALERTMANAGER_TOKEN_ENV")
    if settings.GPUOBS_ALERTMANAGER_USERNAME:
        basic = (settings.GPUOBS_ALERTMANAGER_USERNAME, _secret("GPUOBS_ALERTMANAGER_PASSWORD_ENV"))
    return [
        AlertmanagerTarget(
            url=url,
            bearer_token=token,
            basic_auth=basic,
            timeout_s=float(settings.GPUOBS_ALERTMANAGER_TIMEOUT_SECONDS),
            request_id=gpuobs_logs.request_id.get(),  # docs/operations.md, "Logs"
        )
        for url in alertmanager_urls()
    ]


def post_to_alertmanagers(alerts: list[PostableAlert] | tuple[PostableAlert, ...]) -> SendResult:
    """Post ``alerts`` to every configured Alertmanager at once; raises nothing for one that is
    down (:class:`SendResult` says which)."""
    outcomes = post_to_each(alertmanager_targets(), alerts)
    failed = [o for o in outcomes if o.error is not None]
    return SendResult(
        attempts=sum(o.attempts for o in outcomes),
        sent=max((o.delivery.alerts for o in outcomes if o.delivery), default=0),
        delivered=len(failed) < len(outcomes),
        errors=tuple(str(o.error) for o in failed),
    )


@dataclass(frozen=True)
class SendResult:
    """One post to every Alertmanager: requests made, alerts the best member took, whether some
    member took them, and each failed member's error (it names its URL)."""

    attempts: int
    sent: int
    delivered: bool
    errors: tuple[str, ...] = ()


def severity_thresholds() -> dict[str, str]:
    """Rule id -> the lowest severity sent (``*`` for every other rule)."""
    thresholds = {"*": settings.GPUOBS_ALERTMANAGER_MIN_SEVERITY}
    for item in settings.GPUOBS_ALERTMANAGER_RULE_SEVERITY:
        rule, _, severity = item.partition("=")
        thresholds[rule.strip()] = severity.strip()
    for rule, severity in thresholds.items():
        if severity not in SEVERITY_ORDER:
            known = ", ".join(SEVERITY_ORDER)
            raise NotifyConfigError(
                f"severity threshold of {rule}: {severity!r} is not one of {known}"
            )
    return thresholds


def passes(rule_id: str, severity: str, thresholds: Mapping[str, str]) -> bool:
    floor = thresholds.get(rule_id, thresholds["*"])
    return SEVERITY_ORDER.get(severity, 0) >= SEVERITY_ORDER[floor]


def external_url(path: str) -> str:
    return settings.GPUOBS_EXTERNAL_URL.rstrip("/") + path


def finding_url(cluster: Cluster, finding_id: int) -> str:
    return external_url(
        reverse("diagnosis:finding", kwargs={"name": cluster.name, "finding_id": finding_id})
    )


def _subject_pool(subject: str, evidence: Mapping) -> str:
    if subject.startswith("pool:"):
        return subject.removeprefix("pool:")
    pool = evidence.get("pool") if isinstance(evidence, Mapping) else None
    return str(pool) if pool else ""


def finding_alert(
    cluster: Cluster, finding: Finding, *, now: datetime, ends_at: datetime
) -> PostableAlert:
    rule = all_rules().get(finding.rule_id)
    url = finding_url(cluster, finding.pk)
    title = rule.title if rule else finding.rule_id
    starts = min(finding.firing_since or finding.first_seen or now, now)
    return PostableAlert(
        labels={
            "alertname": "GpuobsFinding",
            "rule": finding.rule_id,
            "severity": finding.severity,
            "cluster": cluster.name,
            "pool": _subject_pool(finding.subject, finding.evidence),
            "tenant": finding.tenant.name if finding.tenant_id else "",
            "subject": finding.subject,
        },
        annotations={
            "summary": finding.summary or f"{title}: {finding.subject}",
            "description": f"{title} on {finding.subject} in cluster {cluster.name}. "
            + (rule.doc.fix if rule else ""),
            "runbook_url": url + "#rule-title",
        },
        starts_at=min(starts, ends_at),
        ends_at=ends_at,
        generator_url=url,
    )


def incident_severity(incident: Incident) -> str:
    xid = (incident.details or {}).get("xid") or {}
    if xid.get("severity") in SEVERITY_ORDER:
        return xid["severity"]
    return Severity.CRITICAL if (incident.details or {}).get("kind") == "gpu-health" else "warning"


def incident_alert(incident: Incident, *, now: datetime, ends_at: datetime) -> PostableAlert:
    cluster = incident.cluster
    where = incident.node if incident.gpu_index is None else f"{incident.node}/{incident.gpu_index}"
    details = incident.details or {}
    tenants = details.get("tenants") or []
    pools = {j.get("pool") for j in details.get("jobs") or [] if j.get("pool")}
    xid = details.get("xid") or {}
    jobs = ", ".join(str(j.get("id")) for j in details.get("jobs") or [])
    url = external_url(reverse("diagnosis:incidents", kwargs={"name": cluster.name}))
    return PostableAlert(
        labels={
            "alertname": "GpuobsIncident",
            "rule": str(details.get("kind") or "xid"),
            "severity": incident_severity(incident),
            "cluster": cluster.name,
            "pool": next(iter(pools)) if len(pools) == 1 else "",
            "tenant": tenants[0] if len(tenants) == 1 else "",
            "subject": f"gpu:{where}" if incident.gpu_index is not None else f"node:{where}",
            "xid": "" if incident.xid_code is None else str(incident.xid_code),
        },
        annotations={
            "summary": incident.summary or f"incident on {where}",
            "description": str(xid.get("meaning") or "")
            + (f" Action: {xid['action_text']}" if xid.get("action_text") else "")
            + (f" Jobs hit: {jobs}." if jobs else ""),
            "runbook_url": url,
        },
        starts_at=min(incident.opened_at, now),
        ends_at=ends_at,
        generator_url=url,
    )


def approval_alert(rec: Recommendation, *, now: datetime, ends_at: datetime) -> PostableAlert:
    """A requested change waiting for a second person, addressed to those who may approve it."""
    cluster = rec.cluster
    url = external_url(
        reverse(
            "diagnosis:recommendation",
            kwargs={"name": cluster.name, "recommendation_id": rec.pk},
        )
    )
    approvers = ",".join(p.get_username() for p in eligible_approvers(rec))
    requester = rec.requested_by.get_username() if rec.requested_by_id else ""
    change = rec.change or {}
    what = f"{change.get('from')!r} → {change.get('to')!r}" if "to" in change else "a change"
    return PostableAlert(
        labels={
            "alertname": "GpuobsApprovalRequested",
            "severity": "info",
            "cluster": cluster.name,
            "kind": rec.kind,
            "subject": rec.target,
            "recommendation": str(rec.pk),
            "requested_by": requester,
            "approvers": approvers,
        },
        annotations={
            "summary": f"{requester} asks for {rec.kind} {rec.target}: {what}; needs approval",
            "description": str((rec.impact or {}).get("summary") or "")
            + f" May approve: {approvers or 'nobody (no eligible approver)'}.",
            "runbook_url": url,
        },
        starts_at=min(rec.requested_at or now, now),
        ends_at=ends_at,
        generator_url=url,
    )


@dataclass(frozen=True)
class AlertBatch:
    alerts: tuple[PostableAlert, ...]
    firing: int
    resolved: int


def alerts_for(cluster: Cluster, *, now: datetime, since: datetime | None) -> AlertBatch:
    """What to send for a cluster now: the firing findings past their threshold and the open
    incidents (valid for a few cycles), and what resolved since ``since``."""
    thresholds = severity_thresholds()
    valid_until = now + timedelta(seconds=VALID_CYCLES * max(settings.GPUOBS_CYCLE_SECONDS, 60))
    cursor = (since or now) - RESOLVED_RESEND
    alerts: list[PostableAlert] = []
    firing = (
        Finding.objects.filter(cluster=cluster, state=FindingState.FIRING)
        .select_related("tenant")
        .order_by("id")
    )
    for finding in firing:
        if passes(finding.rule_id, finding.severity, thresholds):
            alerts.append(finding_alert(cluster, finding, now=now, ends_at=valid_until))
    resolved_at = dict(
        FindingEvent.objects.filter(
            finding__cluster=cluster, to_state=FindingState.RESOLVED, time__gte=cursor
        ).values_list("finding_id", "time")
    )
    for finding in (
        Finding.objects.filter(pk__in=resolved_at, state=FindingState.RESOLVED)
        .select_related("tenant")
        .order_by("id")
    ):
        if passes(finding.rule_id, finding.severity, thresholds):
            ended = min(resolved_at[finding.pk], now)
            alerts.append(finding_alert(cluster, finding, now=now, ends_at=ended))
    incidents = Incident.objects.filter(cluster=cluster).select_related("cluster").order_by("id")
    for incident in incidents.filter(state__in=OPEN_INCIDENT_STATES):
        alerts.append(incident_alert(incident, now=now, ends_at=valid_until))
    for incident in incidents.filter(state=IncidentState.RESOLVED, resolved_at__gte=cursor):
        ended = min(incident.resolved_at or now, now)
        alerts.append(incident_alert(incident, now=now, ends_at=ended))
    requested = (
        Recommendation.objects.filter(cluster=cluster, requested_by__isnull=False)
        .select_related("cluster", "requested_by")
        .order_by("id")
    )
    for rec in requested.filter(state=RecommendationState.PROPOSED):
        alerts.append(approval_alert(rec, now=now, ends_at=valid_until))
    for rec in requested.exclude(state=RecommendationState.PROPOSED).filter(updated_at__gte=cursor):
        alerts.append(approval_alert(rec, now=now, ends_at=min(rec.updated_at, now)))
    alerts += autopilot_alerts(
        cluster, now=now, url_of=external_url
    )  # what a policy did, and how to undo it
    firing_count = sum(1 for a in alerts if a.ends_at and a.ends_at > now)
    return AlertBatch(tuple(alerts), firing_count, len(alerts) - firing_count)


def delivery_state(cluster: Cluster, channel: str) -> DeliveryState:
    return DeliveryState.objects.get_or_create(cluster=cluster, channel=channel)[0]


def record_delivery(
    cluster: Cluster,
    channel: str,
    *,
    now: datetime,
    attempts: int,
    sent: int,
    error: str = "",
    pending: int = 0,
    degraded: str = "",
) -> None:
    """Count one send of a channel (success when ``error`` is empty; ``degraded``: what failed
    on a success, one Alertmanager of several down, kept as its last error)."""
    with transaction.atomic():
        row = delivery_state(cluster, channel)
        state = DeliveryState.objects.select_for_update().get(pk=row.pk)
        state.attempts_total = F("attempts_total") + attempts
        state.last_attempt_at = now
        if error:
            state.failures_total = F("failures_total") + 1
            state.consecutive_failures = F("consecutive_failures") + 1
            state.last_error = error
            state.pending = pending
        else:
            state.deliveries_total = F("deliveries_total") + 1
            state.alerts_sent_total = F("alerts_sent_total") + sent
            state.consecutive_failures = 0
            state.last_success_at = now
            state.last_error = degraded
            state.pending = 0
        state.save()


def deliver_to_alertmanager(cluster: Cluster, *, now: datetime | None = None) -> DeliveryState:
    """Send the cluster's alerts to Alertmanager and record how it went; never raises for an
    unreachable or refusing Alertmanager (the next cycle sends again)."""
    now = now or timezone.now()
    state = delivery_state(cluster, NotifyChannel.ALERTMANAGER)
    attempts, sent, error, degraded = 0, 0, "", ""
    batch = AlertBatch((), 0, 0)
    try:
        alertmanager_targets()  # the settings, checked before anything is read
        batch = alerts_for(cluster, now=now, since=state.last_success_at)
        for start in range(0, len(batch.alerts), BATCH):
            result = post_to_alertmanagers(batch.alerts[start : start + BATCH])
            attempts += result.attempts
            if not result.delivered:
                error = "; ".join(result.errors)
                break
            sent += result.sent
            degraded = degraded or "; ".join(result.errors)
    except NotifyConfigError as exc:
        error = str(exc)
    if error or degraded:
        logger.warning("alerts of cluster %s not delivered: %s", cluster.name, error or degraded)
    record_delivery(
        cluster,
        NotifyChannel.ALERTMANAGER,
        now=now,
        attempts=attempts,
        sent=sent,
        error=error,
        pending=len(batch.alerts) - sent,
        degraded=degraded,
    )
    state.refresh_from_db()
    return state


def notifications_wanted(cluster: Cluster) -> bool:
    if alertmanager_configured():
        return True
    return OwnerNoticePolicy.objects.filter(cluster=cluster, enabled=True).exists()


def notify_after_cycle(cluster: Cluster) -> None:
    """Start the notify step of a cluster once the cycle's writes commit (never inside it)."""
    try:
        wanted = notifications_wanted(cluster)
    except Exception:
        logger.exception("notify step of cluster %s not started", cluster.name)
        return
    if wanted:
        # an outbox mark, set before the send: cleared when the notify task runs
        Cluster.objects.filter(pk=cluster.pk, notify_pending_since__isnull=True).update(
            notify_pending_since=timezone.now()
        )
        notify_on_commit(cluster.pk)


def take_pending_notify(cluster_id: int) -> None:
    """The notify task runs for this cluster: its outbox mark goes."""
    Cluster.objects.filter(pk=cluster_id).update(notify_pending_since=None)


def send_pending_notifications() -> list[int]:
    """Beat, every period (``run_cycles``): send again the notify step of every cluster whose
    mark is older than a period (its send after the commit was refused: Redis down); returns
    their ids. Stops at the first refused send (the broker is still away)."""
    before = timezone.now() - timedelta(seconds=settings.GPUOBS_CYCLE_SECONDS)
    pending = Cluster.objects.filter(notify_pending_since__lt=before).values_list("pk", flat=True)
    sent = []
    for cluster_id in pending:
        try:
            send_task(NOTIFY, (cluster_id,))
        except Exception:  # the broker: the next period tries again
            logger.warning("notify of cluster %s not sent again", cluster_id, exc_info=True)
            break
        sent.append(cluster_id)
    return sent
