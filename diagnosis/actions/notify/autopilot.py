"""What on-call hears of the autopilot (docs/autopilot.md "On-call is told"): each change a policy
applied, and each policy gpuobs turned to dry run, as a ``GpuobsAutopilotAction`` alert for an
hour after it happened (``endsAt`` then: Alertmanager resolves it by itself), with who approved
the policy and how to undo it. Sent by the notify step with the cluster's other alerts."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta

from django.urls import reverse

from diagnosis.edge.notify.alertmanager import PostableAlert
from diagnosis.models import AutopilotDecision, AutopilotOutcome, Cluster

TOLD_FOR = timedelta(hours=1)


def autopilot_alert(
    decision: AutopilotDecision, cluster: Cluster, *, now: datetime, url_of: Callable[[str], str]
) -> PostableAlert:
    url = url_of(reverse("diagnosis:autopilot-policy", kwargs={"policy_id": decision.policy_id}))
    demoted = decision.outcome == AutopilotOutcome.DEMOTED
    what = "turned to dry run" if demoted else f"applied {decision.kind} {decision.target}"
    return PostableAlert(
        labels={
            "alertname": "GpuobsAutopilotAction",
            "severity": "warning" if demoted else "info",
            "cluster": cluster.name,
            "policy": decision.policy.name,
            "outcome": decision.outcome,
            "kind": decision.kind,
            "subject": decision.target,
            "decision": str(decision.pk),
        },
        annotations={
            "summary": f"policy {decision.policy.name} {what} (approved by "
            f"{decision.approved_by or '?'}, written by {decision.written_by or '?'})",
            "description": decision.reason,
            "runbook_url": url,
        },
        starts_at=min(decision.time, now),
        ends_at=decision.time + TOLD_FOR,
        generator_url=url,
    )


def autopilot_alerts(
    cluster: Cluster, *, now: datetime, url_of: Callable[[str], str]
) -> list[PostableAlert]:
    """The cluster's autopilot actions of the last hour, each as its alert (``url_of``: a page's
    path as the external URL on-call follows)."""
    recent = (
        AutopilotDecision.objects.filter(
            cluster=cluster,
            outcome__in=[AutopilotOutcome.APPLIED, AutopilotOutcome.DEMOTED],
            time__gte=now - TOLD_FOR,
        )
        .select_related("policy")
        .order_by("id")
    )
    return [autopilot_alert(decision, cluster, now=now, url_of=url_of) for decision in recent]
