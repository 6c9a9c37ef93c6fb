"""Findings: per-cluster rule overrides, the findings lifecycle of one evaluation (upsert by
fingerprint, history rows on transitions) and their tenant tags.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db import transaction
from django.utils import timezone

from diagnosis.core import fairness, lifecycle
from diagnosis.core.rules.base import Rule, ThresholdError
from diagnosis.core.rules.engine import Diagnosis
from diagnosis.core.rules.registry import all_rules
from diagnosis.models import (
    Cluster,
    Finding,
    FindingEvent,
    RuleOverride,
)


def cluster_overrides(cluster: Cluster) -> dict[str, dict[str, float | int]]:
    """The cluster's stored threshold overrides, rule id -> threshold -> value.

    Rows that no longer fit a rule (a rule or threshold removed since) are skipped: the rule then
    runs on its default, which is safer than not running at all.
    """
    rules = all_rules()
    overrides: dict[str, dict[str, float | int]] = {}
    for row in RuleOverride.objects.filter(cluster=cluster):
        rule = rules.get(row.rule_id)
        if rule is None:
            continue
        try:
            value = rule.threshold(row.threshold).parse(row.value)
        except ThresholdError:
            continue
        overrides.setdefault(row.rule_id, {})[row.threshold] = value
    return overrides


def set_rule_override(cluster: Cluster, rule_id: str, threshold: str, value: Any) -> RuleOverride:
    """Store a per-cluster threshold; a bad rule, threshold or value raises ValidationError."""
    row = RuleOverride.objects.filter(cluster=cluster, rule_id=rule_id, threshold=threshold).first()
    row = row or RuleOverride(cluster=cluster, rule_id=rule_id, threshold=threshold)
    row.value = value
    row.full_clean()
    row.save()
    return row


@dataclass
class RecordedFindings:
    created: int = 0
    transitions: dict[str, int] = field(default_factory=dict)
    skipped_rules: tuple[str, ...] = ()

    def count(self, from_state: str | None, to_state: str) -> None:
        key = f"{from_state or 'new'}->{to_state}"
        self.transitions[key] = self.transitions.get(key, 0) + 1


def _tracked(finding: Finding) -> lifecycle.Tracked:
    return lifecycle.Tracked(
        state=finding.state,
        active_since=finding.active_since or finding.first_seen,
        last_hit_at=finding.last_hit_at,
        last_evaluated_at=finding.last_seen,
        firing_since=finding.firing_since,
        resolved_at=finding.resolved_at,
    )


def _apply_tracked(finding: Finding, tracked: lifecycle.Tracked) -> None:
    finding.state = tracked.state
    finding.active_since = tracked.active_since
    finding.last_hit_at = tracked.last_hit_at
    finding.last_seen = tracked.last_evaluated_at
    finding.firing_since = tracked.firing_since
    finding.resolved_at = tracked.resolved_at


@transaction.atomic
def record_findings(
    cluster: Cluster, diagnosis: Diagnosis, rules: Mapping[str, Rule] | None = None
) -> RecordedFindings:
    """Upsert a diagnosis's findings by fingerprint ``(cluster, rule, subject)`` and move each
    through its lifecycle (:mod:`diagnosis.core.lifecycle`); every transition is a FindingEvent row.

    Findings of a rule that failed in this diagnosis (an error value) are left as they are.
    Recording the same snapshot twice changes nothing.
    """
    rules = rules if rules is not None else all_rules()
    as_of: datetime = diagnosis.snapshot.as_of.to_pydatetime()
    failed = {error.rule for error in diagnosis.errors}
    judged = {rule_id for rule_id in diagnosis.seconds if rule_id not in failed}
    result = RecordedFindings(skipped_rules=tuple(sorted(failed)))

    hits = {(f.rule, f.subject): f for f in diagnosis.findings if f.rule in judged}
    existing = {
        (f.rule_id, f.subject): f
        for f in Finding.objects.select_for_update().filter(cluster=cluster, rule_id__in=judged)
    }
    events: list[FindingEvent] = []
    to_update: list[Finding] = []
    open_keys = {k for k, f in existing.items() if f.state != lifecycle.RESOLVED}
    for key in sorted(hits.keys() | open_keys):
        rule_id, subject = key
        rule = rules[rule_id]
        hit = hits.get(key)
        finding = existing.get(key)
        step = lifecycle.advance(
            _tracked(finding) if finding else None,
            hit=hit is not None,
            as_of=as_of,
            for_s=rule.for_s,
            keep_firing_for_s=rule.keep_firing_for_s,
        )
        if step is None:
            continue
        if finding is None:
            finding = Finding(cluster=cluster, rule_id=rule_id, subject=subject, first_seen=as_of)
            result.created += 1
        _apply_tracked(finding, step.tracked)
        if hit is not None:
            finding.severity = hit.severity
            finding.summary = hit.summary
            finding.evidence = dict(hit.evidence)
        if finding.pk is None:
            finding.save()
        else:
            to_update.append(finding)
        if step.changed:
            result.count(step.from_state, step.to_state)
            events.append(
                FindingEvent(
                    finding=finding,
                    time=timezone.now(),
                    from_state=step.from_state or "",
                    to_state=step.to_state,
                    snapshot_as_of=as_of,
                )
            )
    Finding.objects.bulk_update(
        to_update,
        [
            "state",
            "active_since",
            "last_hit_at",
            "last_seen",
            "firing_since",
            "resolved_at",
            "severity",
            "summary",
            "evidence",
        ],
        batch_size=500,
    )
    FindingEvent.objects.bulk_create(events, batch_size=500)
    return result


def tag_finding_tenants(
    cluster: Cluster,
    diagnosis: Diagnosis,
    tenant_of_job: Mapping[str, str],
    tenant_ids: Mapping[str, int],
) -> int:
    """Set ``Finding.tenant`` of every finding this diagnosis reported to the one tenant it
    concerns now (:func:`diagnosis.core.fairness.finding_tenant`), or to none when it concerns
    none or several. A finding's evidence is rewritten each cycle (an Xid's GPU gets another
    tenant's job), so its tenant is recomputed from the same evidence each cycle, never kept
    from when it was first seen (issue #12). Only findings whose tenant changes are written: one
    UPDATE per new tenant. Returns how many were re-tagged."""

    hits = {(hit.rule, hit.subject): hit for hit in diagnosis.findings}
    if not hits:
        return 0
    rows = Finding.objects.filter(
        cluster=cluster, rule_id__in={rule for rule, _ in hits}
    ).values_list("pk", "rule_id", "subject", "tenant_id")
    by_tenant: dict[int | None, list[int]] = {}
    for pk, rule_id, subject, current in rows.iterator(chunk_size=2000):
        hit = hits.get((rule_id, subject))
        if hit is None:
            continue  # not reported this cycle: its evidence (and so its tenant) is unchanged
        name = fairness.finding_tenant(hit, tenant_of_job)
        wanted = tenant_ids.get(name) if name is not None else None
        if wanted != current:
            by_tenant.setdefault(wanted, []).append(pk)
    return sum(
        Finding.objects.filter(pk__in=pks).update(tenant_id=tid) for tid, pks in by_tenant.items()
    )
