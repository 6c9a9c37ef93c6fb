"""Issue #16: "preempted by the drain of <node> for incident <id>" on a job's page comes from the
scheduler's eviction and preemption events matched to the drain (the stored ``SchedulerEvent``
rows on the drained node after the snapshot the drain was decided on), not from the list shown
at confirmation. Hand-built history: the oncall world of tests/app/oncall/test_incidents.py, a
drain of
n1 confirmed with ``latecomer`` on the list, then the scheduler's events."""

from __future__ import annotations

from datetime import timedelta

import pytest

from diagnosis.actions.oncall.drain import drain_for_incident, drains_of_job
from diagnosis.actions.oncall.incidents import resolve_incident_by
from diagnosis.actions.records.cycles import record_cycle
from diagnosis.models import Recommendation, SchedulerEvent
from tests.app.oncall.test_incidents import (  # noqa: F401 (oncall: the fixture)
    after_the_xid,
    oncall,
    store_now,
    the_incident,
)
from tests.support.builders import AS_OF
from tests.support.world import logged_in_client

pytestmark = pytest.mark.django_db


def evicted(cluster, job: str, *, node: str = "", message: str = "", minutes: int = 3):
    """The scheduler's eviction event of ``job``, stored (the events API, a cursor's read)."""
    SchedulerEvent.objects.create(
        cluster=cluster,
        time=AS_OF + timedelta(minutes=minutes),
        kind="evicted",
        job_external_id=job,
        node=node,
        reason="Evicted",
        message=message,
        dedup_key=f"{job}-{minutes}",
    )


def cycle(cluster, minutes: int, *, builder=None) -> None:
    """A cycle ``minutes`` after AS_OF: it matches the scheduler's events to the drain."""
    builder = builder or after_the_xid(as_of=AS_OF + timedelta(minutes=minutes))
    record_cycle(cluster, builder.build())


@pytest.fixture
def drained(oncall, erin):  # noqa: F811 (the imported fixture)
    """The drain of n1, confirmed with latecomer listed, applied."""
    store_now(oncall, [("latecomer", [3])])
    rec = drain_for_incident(the_incident(oncall), erin)
    Recommendation.objects.filter(pk=rec.pk).update(state="applied")
    return oncall


def job_page(cluster, user, job: str) -> str:
    return logged_in_client(user).get(f"/clusters/{cluster.name}/jobs/{job}/").content.decode()


def test_a_job_the_drain_evicted_that_was_not_on_the_list_gets_the_note(drained, erin):
    incident = the_incident(drained)
    # walk-in started on n1 right after on-call confirmed (the scheduler placed it meanwhile);
    # the next snapshot carries the simulator's eviction event, which names the node and incident
    later = after_the_xid(as_of=AS_OF + timedelta(minutes=2))
    later.job("walk-in", tenant="vision", allocation=[("n1", [4])], gpus_per_pod=1, ran=60)
    cycle(drained, 2, builder=later)
    evicting = after_the_xid(as_of=AS_OF + timedelta(minutes=4))
    evicting.event(
        "evicted",
        ago="1m",
        job="walk-in",
        message=f"node n1 drained: gpuobs: incident {incident.pk}: Xid 79 on n1/3",
    )
    cycle(drained, 4, builder=evicting)
    assert drains_of_job(drained, "walk-in") == [incident]
    assert "preempted by the drain of n1 for incident <a" in job_page(drained, erin, "walk-in")


def test_a_job_on_the_list_that_the_drain_did_not_evict_gets_no_note(drained, erin):
    cycle(drained, 4)
    assert drains_of_job(drained, "latecomer") == []
    assert "preempted by the drain" not in job_page(drained, erin, "latecomer")


def test_an_eviction_on_another_node_or_for_another_incident_is_not_this_drains(drained):
    evicted(drained, "elsewhere", node="n2")
    evicted(drained, "other-drain", message="node n1 drained: gpuobs: incident 999999: Xid 13")
    evicted(drained, "long-before", node="n1", minutes=-30)
    cycle(drained, 5)
    for job in ("elsewhere", "other-drain", "long-before"):
        assert drains_of_job(drained, job) == []


def test_a_stored_eviction_on_the_node_goes_on_the_timeline_once(drained):
    evicted(drained, "latecomer", node="n1")
    for minutes in (5, 6):
        cycle(drained, minutes)
    rows = the_incident(drained).history.filter(kind="evicted")
    assert list(rows.values_list("text", flat=True)) == [
        "job latecomer preempted by the drain of n1"
    ]
    assert drains_of_job(drained, "latecomer") == [the_incident(drained)]


def test_an_incident_resolved_right_after_its_drain_still_names_the_evicted(drained, erin):
    resolve_incident_by(the_incident(drained), erin, "replaced the GPU")
    evicted(drained, "latecomer", node="n1")
    cycle(drained, 5)
    assert drains_of_job(drained, "latecomer") == [the_incident(drained)]
