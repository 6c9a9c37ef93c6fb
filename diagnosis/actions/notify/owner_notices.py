"""Notices to job owners (the Job Defense Shield / IdleBot pattern): a job's owner hears about
its ``idle-allocation``, ``low-mfu``, ``data-starvation`` (and similar) findings, with the
evidence, the GPU-hours at stake and what to do.

Off by default: a cluster's :class:`OwnerNoticePolicy` turns it on and maps the scheduler's owner
names (the job's tenant: Slurm account or user, Kubernetes namespace) to email addresses. A
finding notifies its owner once it has fired for the policy's grace period, at most once per job,
rule and day (a unique row in :class:`OwnerNotice`), by Django's mail or as an Alertmanager alert
with an ``owner`` label. :func:`preview_notice` is what the finding page shows: what would be
sent, to whom, or why nothing would.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.core.mail import EmailMessage
from django.db import IntegrityError, transaction
from django.template.loader import render_to_string
from django.utils import timezone

from diagnosis.actions.notify.alertmanager import (
    alertmanager_configured,
    finding_url,
    post_to_alertmanagers,
    record_delivery,
)
from diagnosis.choices import FindingState
from diagnosis.core.rules.registry import all_rules
from diagnosis.core.text import SUMMARY_TEXT_KEY
from diagnosis.edge.notify.alertmanager import NotifyError, PostableAlert
from diagnosis.models import (
    Cluster,
    ClusterCycle,
    Finding,
    Job,
    NotifyChannel,
    OwnerNotice,
    OwnerNoticePolicy,
)

logger = logging.getLogger(__name__)

DEFAULT_RULES = ("idle-allocation", "idle-held", "low-mfu", "data-starvation", "hung-collective")
EVIDENCE_LINES = 8
# One plain address, nothing an SMTP or header parser reads as more: no comment "(...)", no list
# ",", no display name, quotes, angle brackets, spaces or line ends.
PLAIN_ADDRESS = re.compile(
    r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~.-]{1,64}@[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
    r"(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)+\Z"
)


@dataclass(frozen=True)
class NoticePreview:
    """What the owner of a finding's job would get, or why nothing would be sent."""

    would_send: bool
    reason: str
    channel: str = ""
    owner: str = ""
    recipient: str = ""
    subject: str = ""
    body: str = ""
    job_id: str = ""
    refused: bool = False  # the owner's address is no plain address: named in the cycle's notes


def policy_of(cluster: Cluster) -> OwnerNoticePolicy:
    """The cluster's policy (an unsaved, disabled one when it has none)."""
    return OwnerNoticePolicy.objects.filter(cluster=cluster).first() or OwnerNoticePolicy(
        cluster=cluster
    )


def recipient_of(policy: OwnerNoticePolicy, owner: str) -> str:
    """The owner's address: the policy's mapping, else ``owner@email_domain``; empty when there
    is none. Whether it is one plain address, :func:`plain_address` says."""
    mapped = (policy.owners or {}).get(owner)
    if mapped:
        return str(mapped)
    if policy.email_domain and owner:
        return f"{owner}@{policy.email_domain}"
    return ""


def plain_address(recipient: str) -> bool:
    """Whether ``recipient`` is exactly one plain email address (``attacker@evil.example(`` made
    from a scheduler's owner name, or ``a,b@corp.example``, is not)."""
    return bool(PLAIN_ADDRESS.match(recipient)) and ".." not in recipient


def _evidence_lines(evidence: Mapping[str, Any]) -> list[tuple[str, str]]:
    lines = []
    shown = {k: v for k, v in (evidence or {}).items() if k != SUMMARY_TEXT_KEY}
    for key, value in list(shown.items())[:EVIDENCE_LINES]:
        text = f"{value:.3g}" if isinstance(value, float) else str(value)
        lines.append((key, text if len(text) <= 200 else text[:197] + "..."))
    return lines


def compose(cluster: Cluster, finding: Finding, job: Job | None, owner: str) -> tuple[str, str]:
    """The notice's subject and body."""
    rule = all_rules().get(finding.rule_id)
    title = rule.title if rule else finding.rule_id
    job_id = finding.subject.removeprefix("job:")
    gpus = job.pods * job.gpus_per_pod if job else int(finding.evidence.get("gpus") or 0)
    since = finding.firing_since or finding.active_since or finding.first_seen
    hours = max((finding.last_seen - since).total_seconds(), 0) / 3600 if since else 0.0
    body = render_to_string(
        "diagnosis/notices/owner_notice.txt",
        {
            "owner": owner,
            "cluster": cluster.name,
            "job_id": job_id,
            "job_name": job.name if job else "",
            "title": title,
            "summary": finding.summary,
            "evidence": _evidence_lines(finding.evidence),
            "gpus": gpus,
            "episode_gpu_hours": f"{gpus * hours:.1f}",
            "daily_gpu_hours": f"{gpus * 24:.0f}",
            "since": f"{since:%Y-%m-%d %H:%M}" if since else "?",
            "fix": rule.doc.fix if rule else "",
            "url": finding_url(cluster, finding.pk),
        },
    ).strip()
    return f"[gpuobs] {title}: your job {job_id} on {cluster.name}", body


def _judge(
    policy: OwnerNoticePolicy, finding: Finding, job: Job | None, *, now: datetime
) -> tuple[bool, str, str, str]:
    """(would send, why not, owner, recipient)."""
    owner = job.tenant.name if job and job.tenant_id else str(finding.evidence.get("tenant") or "")
    recipient = recipient_of(policy, owner)
    rules = tuple(policy.rules or DEFAULT_RULES)
    if not policy.enabled:
        return False, "owner notices are off for this cluster", owner, recipient
    if finding.rule_id not in rules or not finding.subject.startswith("job:"):
        return False, f"rule {finding.rule_id} does not notify job owners", owner, recipient
    if finding.state != FindingState.FIRING or finding.firing_since is None:
        return False, "the finding is not firing", owner, recipient
    fired = (finding.last_seen - finding.firing_since).total_seconds()
    if fired < policy.grace_s:
        wait = policy.grace_s - fired
        return False, f"within the grace period ({wait:.0f} s to go)", owner, recipient
    if not owner:
        return False, "the job has no known owner", owner, recipient
    if policy.channel == NotifyChannel.OWNER_EMAIL and not recipient:
        return False, f"no email address for owner {owner}", owner, recipient
    if policy.channel == NotifyChannel.OWNER_EMAIL and not plain_address(recipient):
        return False, refused_reason(owner, recipient), owner, recipient
    if policy.channel == NotifyChannel.OWNER_ALERTMANAGER and not alertmanager_configured():
        return False, "GPUOBS_ALERTMANAGER_URL is not set", owner, recipient
    already = OwnerNotice.objects.filter(
        cluster=finding.cluster_id,
        job_external_id=finding.subject.removeprefix("job:"),
        rule_id=finding.rule_id,
        day=now.date(),
    ).exists()
    if already:
        return False, "already notified today", owner, recipient
    return True, "", owner, recipient


REFUSED = "is not one plain email address: refused"


def refused_reason(owner: str, recipient: str) -> str:
    return f"the address of owner {owner[:80]!r}, {recipient[:120]!r}, {REFUSED}"


def _job(finding: Finding) -> Job | None:
    if not finding.subject.startswith("job:"):
        return None
    return (
        Job.objects.filter(cluster=finding.cluster_id, external_id=finding.subject[4:])
        .select_related("tenant")
        .first()
    )


def preview_notice(finding: Finding, *, now: datetime | None = None) -> NoticePreview:
    """What the finding's job owner would be sent now, or why nothing (the finding page)."""
    now = now or timezone.now()
    cluster = finding.cluster
    policy = policy_of(cluster)
    job = _job(finding)
    would, reason, owner, recipient = _judge(policy, finding, job, now=now)
    subject, body = compose(cluster, finding, job, owner or "owner")
    return NoticePreview(
        would_send=would,
        reason=reason,
        channel=policy.channel,
        owner=owner,
        recipient=recipient,
        subject=subject,
        body=body,
        job_id=finding.subject.removeprefix("job:"),
        refused=reason.endswith(REFUSED),
    )


def _send(policy: OwnerNoticePolicy, preview: NoticePreview, finding: Finding) -> None:
    if policy.channel == NotifyChannel.OWNER_ALERTMANAGER:
        alert = PostableAlert(
            labels={
                "alertname": "GpuobsOwnerNotice",
                "rule": finding.rule_id,
                "severity": finding.severity,
                "cluster": finding.cluster.name,
                "subject": finding.subject,
                "owner": preview.owner,
                "job": preview.job_id,
            },
            annotations={"summary": preview.subject, "description": preview.body},
            starts_at=timezone.now(),
            ends_at=timezone.now() + timedelta(hours=1),
            generator_url=finding_url(finding.cluster, finding.pk),
        )
        result = post_to_alertmanagers([alert])
        if not result.delivered:
            raise NotifyError("; ".join(result.errors))
        return
    EmailMessage(
        subject=preview.subject,
        body=preview.body,
        from_email=settings.DEFAULT_FROM_EMAIL,
        to=[preview.recipient],
    ).send()


def send_owner_notices(cluster: Cluster, *, now: datetime | None = None) -> int | None:
    """Send the notices due for a cluster's firing job findings; how many were sent (None when
    the policy is off). A notice is logged before it is sent, inside one transaction per notice,
    so a second worker cannot send the same one twice; a failed send rolls its row back and is
    tried again next cycle."""
    now = now or timezone.now()
    policy = policy_of(cluster)
    if not policy.enabled:
        return None
    rules = tuple(policy.rules or DEFAULT_RULES)
    findings = (
        Finding.objects.filter(cluster=cluster, state=FindingState.FIRING, rule_id__in=rules)
        .filter(subject__startswith="job:")
        .select_related("cluster")
        .order_by("id")
    )
    sent = failed = 0
    error = ""
    refused: list[str] = []
    for finding in findings:
        preview = preview_notice(finding, now=now)
        if not preview.would_send:
            if preview.refused:
                refused.append(f"owner notice for job {preview.job_id}: {preview.reason}")
            continue
        try:
            with transaction.atomic():
                OwnerNotice.objects.create(
                    cluster=cluster,
                    finding=finding,
                    job_external_id=preview.job_id,
                    rule_id=finding.rule_id,
                    day=now.date(),
                    sent_at=now,
                    channel=policy.channel,
                    owner=preview.owner,
                    recipient=preview.recipient,
                    subject=preview.subject,
                    body=preview.body,
                )
                _send(policy, preview, finding)
        except IntegrityError:
            continue  # another worker sent it
        except Exception as exc:  # one notice that fails never stops the others
            failed += 1
            error = f"{type(exc).__name__}: {exc}"
            logger.warning("owner notice for %s not sent: %s", finding, error)
            continue
        sent += 1
    if refused:
        _note_on_latest_cycle(cluster, refused)
    if sent or failed:
        record_delivery(
            cluster,
            policy.channel,
            now=now,
            attempts=sent + failed,
            sent=sent,
            error=error,
            pending=failed,
        )
    return sent


def _note_on_latest_cycle(cluster: Cluster, notes: list[str]) -> None:
    """Name the refused owners in the collection notes of the cluster's latest cycle (once)."""
    cycle = ClusterCycle.objects.filter(cluster=cluster).order_by("-as_of", "-id").first()
    if cycle is None:
        return
    source = dict(cycle.source or {})
    known = list(source.get("notes") or [])
    new = [note for note in notes if note not in known]
    if new:
        cycle.source = {**source, "notes": [*known, *new]}
        cycle.save(update_fields=["source"])
