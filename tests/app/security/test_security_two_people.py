"""Issue #12, defect 4: two people for every write (docs/recommendations.md#workflow). An admin
cannot approve their own request; a rollback is requested by one person and approved by another --
putting a drained
node back into service included; only an on-call drain is one person's."""

from __future__ import annotations

import pytest

from diagnosis.actions.workflow.base import WorkflowDenied
from diagnosis.actions.workflow.review import (
    approve_recommendation,
    request_recommendation,
    request_rollback,
)
from tests.support.records import make_recommendation

pytestmark = pytest.mark.django_db

DRAIN = {"from": "ready", "to": "drained", "reason": "Xid 79"}


@pytest.fixture
def cluster(make_cluster):
    return make_cluster("two", metrics_kind="none")


def test_an_admin_cannot_approve_their_own_request(cluster, alice):
    rec = make_recommendation(cluster)
    request_recommendation(rec, alice)
    with pytest.raises(WorkflowDenied, match="someone other than the person who asked"):
        approve_recommendation(rec, alice)


def test_an_admin_cannot_approve_a_change_nobody_else_asked_for(cluster, alice):
    with pytest.raises(WorkflowDenied, match="nobody has requested"):
        approve_recommendation(make_recommendation(cluster), alice)


def test_an_admin_approves_someone_elses_request(cluster, alice, carol):
    rec = make_recommendation(cluster)
    request_recommendation(rec, carol)
    assert approve_recommendation(rec, alice).state == "approved"


def test_a_rollback_waits_for_a_second_person(cluster, carol, dave):
    applied = make_recommendation(cluster, state="applied", approved_by=dave, requested_by=carol)
    undo = request_rollback(applied, carol)
    assert (undo.state, undo.requested_by, undo.approved_by) == ("proposed", carol, None)
    with pytest.raises(WorkflowDenied, match="someone other"):
        approve_recommendation(undo, carol)
    assert approve_recommendation(undo, dave).state == "approved"


def test_putting_a_drained_node_back_is_no_on_call_drain(cluster, erin):
    drain = make_recommendation(
        cluster, "drain-node", "node:n1", DRAIN, state="applied", requested_by=erin
    )
    undo = request_rollback(drain, erin)
    with pytest.raises(WorkflowDenied):
        approve_recommendation(undo, erin)


def test_an_on_call_drain_is_still_one_persons(cluster, erin):
    drain = make_recommendation(cluster, "drain-node", "node:n1", DRAIN)
    assert approve_recommendation(drain, erin).state == "approved"
