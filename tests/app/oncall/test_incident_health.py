"""Issue #16: the ``xid`` finding does not resolve while its GPU is still unhealthy, and it and
on-call's incident resolve on the same cycle, ``healthy_s`` after the GPU is healthy again.

A hand-built history through the real cycle (:func:`record_cycle`): an Xid 79 at AS_OF - 5 min
on n1 GPU 3, the GPU unhealthy for an hour after, then healthy. The GPU sends metrics all along
(dcgm-exporter keeps reporting a GPU that is merely unhealthy), so the rule judges it."""

from __future__ import annotations

from datetime import timedelta

import pytest

from diagnosis.actions.oncall.incidents import acknowledge_incident
from diagnosis.actions.records.cycles import record_cycle
from diagnosis.actions.records.findings import set_rule_override
from diagnosis.models import Finding, Incident
from tests.support.builders import AS_OF, SnapshotBuilder

pytestmark = pytest.mark.django_db


def at(minutes: int, *, health: str, xid: bool = False, node_state: str = "ready"):
    builder = SnapshotBuilder(as_of=AS_OF + timedelta(minutes=minutes), cluster="health")
    builder.node("n1", gpus=8, state=node_state).queue("hpo")
    for index in range(8):
        builder.gpu("n1", index, util=0.0)
    if xid:
        builder.gpu("n1", 3, xid=[(79, "5m")])
    builder.gpu("n1", 3, health=health)
    return builder.build()


@pytest.fixture
def cluster(make_cluster, erin):
    cluster = make_cluster("health", metrics_kind="none")
    record_cycle(cluster, at(0, health="unhealthy", xid=True))
    acknowledge_incident(Incident.objects.get(cluster=cluster), erin)
    return cluster


def states(cluster) -> tuple[str, str]:
    finding = Finding.objects.get(cluster=cluster, rule_id="xid")
    return finding.state, Incident.objects.get(cluster=cluster).state


def test_the_finding_keeps_firing_while_the_gpu_stays_unhealthy(cluster):
    for minutes in (20, 40, 60):  # the Xid left the 15-minute window at minute 10
        record_cycle(cluster, at(minutes, health="unhealthy"))
        assert states(cluster) == ("firing", "acknowledged")


def test_a_cordoned_node_keeps_the_finding_firing(cluster):
    for minutes in (20, 60, 120):
        record_cycle(cluster, at(minutes, health="ok", node_state="cordoned"))
    assert states(cluster) == ("firing", "acknowledged")


def test_finding_and_incident_resolve_together_after_the_healthy_period(cluster):
    record_cycle(cluster, at(60, health="unhealthy"))
    for minutes in (70, 85):  # healthy, not yet for 30 minutes
        record_cycle(cluster, at(minutes, health="ok"))
        assert states(cluster) == ("firing", "acknowledged")
    record_cycle(cluster, at(90, health="ok"))
    assert states(cluster) == ("resolved", "resolved")


def test_the_clusters_healthy_period_moves_both(cluster):
    set_rule_override(cluster, "xid", "healthy_s", 600)
    record_cycle(cluster, at(60, health="unhealthy"))
    record_cycle(cluster, at(65, health="ok"))
    assert states(cluster) == ("firing", "acknowledged")
    record_cycle(cluster, at(70, health="ok"))
    assert states(cluster) == ("resolved", "resolved")
