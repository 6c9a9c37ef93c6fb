"""Recording findings across cycles (actions.record_findings) and per-cluster overrides."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.exceptions import ValidationError

from diagnosis.actions.records.findings import cluster_overrides, record_findings, set_rule_override
from diagnosis.core.rules.engine import run_rules
from diagnosis.core.rules.registry import get_rule
from diagnosis.models import Finding, FindingEvent
from tests.support.builders import AS_OF, SnapshotBuilder

pytestmark = pytest.mark.django_db


def idle_cluster(minutes_later: float = 0, *, idle: bool = True):
    """One running job on 8 GPUs: idle (util 0.01) or busy (0.9), as of AS_OF + minutes."""
    builder = SnapshotBuilder(as_of=AS_OF + timedelta(minutes=minutes_later))
    builder.pool("a100", nodes=1)
    builder.job("j1", node="a100-000", waited="3h", util=0.01 if idle else 0.9, fb_used_frac=0.05)
    return builder.build()


def record(cluster, snap):
    return record_findings(cluster, run_rules(snap))


def idle_finding(cluster) -> Finding:
    return Finding.objects.get(cluster=cluster, rule_id="idle-allocation", subject="job:j1")


def test_a_new_hit_is_stored_pending_with_a_history_row(make_cluster):
    cluster = make_cluster()
    record(cluster, idle_cluster())
    finding = idle_finding(cluster)
    assert finding.state == "pending"
    assert finding.summary
    assert list(finding.events.values_list("from_state", "to_state")) == [("", "pending")]


def test_it_fires_after_the_rules_for_duration(make_cluster):
    for_minutes = get_rule("idle-allocation").for_s / 60
    cluster = make_cluster()
    record(cluster, idle_cluster(0))
    record(cluster, idle_cluster(for_minutes - 1))
    assert idle_finding(cluster).state == "pending"
    record(cluster, idle_cluster(for_minutes))
    finding = idle_finding(cluster)
    assert finding.state == "firing"
    assert [e.to_state for e in finding.events.all()] == ["pending", "firing"]


def test_recording_the_same_snapshot_twice_changes_nothing(make_cluster):
    cluster = make_cluster()
    snap = idle_cluster()
    record(cluster, snap)
    before = list(Finding.objects.values())
    record(cluster, snap)
    assert list(Finding.objects.values()) == before
    assert FindingEvent.objects.count() == 1


def test_a_firing_finding_resolves_after_keep_firing_for(make_cluster):
    rule = get_rule("idle-allocation")
    cluster = make_cluster()
    record(cluster, idle_cluster(0))
    record(cluster, idle_cluster(rule.for_s / 60))
    last_hit = rule.for_s / 60
    record(cluster, idle_cluster(last_hit + rule.keep_firing_for_s / 60 - 1, idle=False))
    assert idle_finding(cluster).state == "firing"
    record(cluster, idle_cluster(last_hit + rule.keep_firing_for_s / 60, idle=False))
    finding = idle_finding(cluster)
    assert finding.state == "resolved"
    assert [e.to_state for e in finding.events.all()] == ["pending", "firing", "resolved"]


def test_a_failing_rule_never_resolves_its_findings(make_cluster):
    cluster = make_cluster()
    record(cluster, idle_cluster(0))
    diagnosis = run_rules(idle_cluster(600, idle=False), {"idle-allocation": {"max_util": "x"}})
    assert [e.rule for e in diagnosis.errors] == ["idle-allocation"]
    outcome = record_findings(cluster, diagnosis)
    assert outcome.skipped_rules == ("idle-allocation",)
    assert idle_finding(cluster).state == "pending"


def test_findings_are_per_cluster(make_cluster):
    first, second = make_cluster("one"), make_cluster("two")
    record(first, idle_cluster())
    record(second, idle_cluster())
    assert Finding.objects.filter(rule_id="idle-allocation").count() == 2
    assert len({f.fingerprint for f in Finding.objects.all()}) == Finding.objects.count()


def test_override_is_stored_typed_and_used(make_cluster):
    cluster = make_cluster()
    set_rule_override(cluster, "idle-allocation", "min_runtime", "14400")
    assert cluster_overrides(cluster) == {"idle-allocation": {"min_runtime": 14400}}
    diagnosis = run_rules(idle_cluster(), cluster_overrides(cluster))
    assert diagnosis.by_rule("idle-allocation") == []


@pytest.mark.parametrize(
    ("rule_id", "threshold", "value", "field", "message"),
    [
        ("idle-allocation", "max_util", "lots", "value", "expected a number"),
        ("idle-allocation", "min_runtime", 1.5, "value", "expected a whole number"),
        ("idle-allocation", "max_util", -1, "value", "must be >= 0"),
        ("idle-allocation", "nonsense", 1, "threshold", "has no threshold 'nonsense'"),
        ("no-such-rule", "x", 1, "rule_id", "unknown rule 'no-such-rule'"),
    ],
)
def test_a_bad_override_is_refused_with_a_message(
    make_cluster, rule_id, threshold, value, field, message
):
    cluster = make_cluster()
    with pytest.raises(ValidationError) as caught:
        set_rule_override(cluster, rule_id, threshold, value)
    assert message in " ".join(caught.value.message_dict[field])
    assert not cluster.rule_overrides.exists()


def test_admin_refuses_a_bad_override(alice_client, make_cluster):
    cluster = make_cluster()
    response = alice_client.post(
        "/admin/diagnosis/ruleoverride/add/",
        {"cluster": cluster.pk, "rule_id": "xid", "threshold": "nope", "value": "1"},
    )
    assert response.status_code == 200
    assert "has no threshold" in response.content.decode()
    assert not cluster.rule_overrides.exists()
