"""The autopilot's guards on the real simulator (the small lab: 4 nodes x 8 GPUs, pool a100) with
real PostgreSQL: an approved policy applies through the recommendation workflow, attributed to
its two people; the kill switch, stale data, degraded data and a person acting first hold it
back, each recorded with its reason; a change it applied that regressed turns it to dry run and
tells on-call. Drains are built in the ``drain-node`` generator's stored shape
(tests/support/autopilot.py)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from diagnosis.actions.autopilot.policies import edit_policy, set_kill_switch, terms_of
from diagnosis.actions.autopilot.step import run_autopilot
from diagnosis.actions.notify.alertmanager import alerts_for
from diagnosis.actions.workflow.base import WorkflowDenied
from diagnosis.actions.workflow.review import reject_recommendation, request_recommendation
from diagnosis.models import AuditEntry, AutopilotDecision, ClusterCycle, Recommendation
from tests.support.autopilot import approved_policy, step, xid_drain
from tests.support.records import run_cycles

pytestmark = [pytest.mark.django_db, pytest.mark.lab("lab-autopilot", dry_run=False)]


@pytest.fixture
def cycled(lab, celery_eager):
    run_cycles(lab, 1)
    return lab


def node_state(lab, node: str) -> str:
    document = run_cycles(lab, 1).cluster.snapshots.latest("as_of").load_document()
    return next(n["state"] for n in document["nodes"] if n["name"] == node)


def first_node(lab) -> str:
    return lab.snapshots.latest("as_of").load_document()["nodes"][0]["name"]


def test_an_enforcing_policy_drains_through_the_workflow_attributed_to_its_two_people(
    cycled, carol, dave, django_capture_on_commit_callbacks
) -> None:
    policy = approved_policy(carol, dave)
    node = first_node(cycled)
    rec = xid_drain(cycled, node)

    stats = step(cycled, django_capture_on_commit_callbacks)

    rec.refresh_from_db()
    assert stats["applied"] == 1
    assert rec.state == "applied", rec.status_message
    assert (rec.requested_by, rec.approved_by) == (carol, dave)
    trail = list(rec.audit_entries.order_by("id").values_list("actor", "action"))
    assert trail[:2] == [
        ("policy:xid-drain", "approve-by-policy"),
        ("policy:xid-drain", "apply-requested"),
    ]
    assert ("system:actuate", "apply") in trail  # the same apply as a person's
    approval = rec.audit_entries.get(action="approve-by-policy").after
    assert (approval["written_by"], approval["approved_by"], approval["version"]) == (
        "carol",
        "dave",
        1,
    )
    decision = AutopilotDecision.objects.get(recommendation=rec)
    assert (decision.outcome, decision.policy, decision.approved_by) == ("applied", policy, "dave")
    assert f"Roll back recommendation #{rec.pk}" in decision.reason
    assert node_state(cycled, node) == "drained"


def test_a_dry_run_policy_records_what_it_would_apply_once_and_writes_nothing(
    cycled, carol, dave, django_capture_on_commit_callbacks
) -> None:
    approved_policy(carol, dave, mode="dry-run")
    rec = xid_drain(cycled, first_node(cycled))

    step(cycled, django_capture_on_commit_callbacks)
    run_cycles(cycled, 1)
    step(cycled, django_capture_on_commit_callbacks)

    rec.refresh_from_db()
    assert rec.state == "proposed"
    assert rec.approved_by is None
    assert list(AutopilotDecision.objects.values_list("outcome", flat=True)) == ["would-apply"]


def test_the_kill_switch_stops_every_policy_at_the_next_step(
    cycled, alice, carol, dave, django_capture_on_commit_callbacks
) -> None:
    approved_policy(carol, dave)
    rec = xid_drain(cycled, first_node(cycled))
    set_kill_switch(alice, stopped=True, reason="maintenance")

    stats = step(cycled, django_capture_on_commit_callbacks)

    rec.refresh_from_db()
    assert stats["applied"] == 0
    assert rec.state == "proposed"
    held = AutopilotDecision.objects.get(recommendation=rec)
    assert (held.outcome, held.guard) == ("held", "kill-switch")
    assert AuditEntry.objects.filter(actor="alice", action="autopilot-stopped").exists()


def test_only_an_admin_turns_the_kill_switch(carol) -> None:
    with pytest.raises(WorkflowDenied, match="only an admin"):
        set_kill_switch(carol, stopped=True)


def test_stale_data_stops_the_autopilot(
    cycled, carol, dave, django_capture_on_commit_callbacks
) -> None:
    approved_policy(carol, dave)
    rec = xid_drain(cycled, first_node(cycled))
    ClusterCycle.objects.filter(cluster=cycled).update(
        ran_at=cycled.created_at - timedelta(hours=1)
    )

    step(cycled, django_capture_on_commit_callbacks)

    rec.refresh_from_db()
    held = AutopilotDecision.objects.get(recommendation=rec)
    assert (rec.state, held.guard) == ("proposed", "stale-data")
    assert "stale after 120 s" in held.reason


def test_a_failed_latest_cycle_is_stale_data(
    cycled, carol, dave, django_capture_on_commit_callbacks
) -> None:
    approved_policy(carol, dave)
    rec = xid_drain(cycled, first_node(cycled))
    good = ClusterCycle.objects.get(cluster=cycled)
    ClusterCycle.objects.create(cluster=cycled, as_of=good.as_of, ok=False, error="scheduler down")

    with django_capture_on_commit_callbacks(execute=True):
        run_autopilot(cycled.pk, good.pk)

    assert AutopilotDecision.objects.get(recommendation=rec).guard == "stale-data"


def test_degraded_data_stops_the_autopilot(
    cycled, carol, dave, django_capture_on_commit_callbacks
) -> None:
    approved_policy(carol, dave)
    rec = xid_drain(cycled, first_node(cycled))
    type(cycled).objects.filter(pk=cycled.pk).update(
        size_hold={"size": {"nodes": 2, "gpus": 16}, "cycles": 1}
    )

    step(cycled, django_capture_on_commit_callbacks)

    held = AutopilotDecision.objects.get(recommendation=rec)
    assert (held.guard, held.reason) == (
        "degraded-data",
        "the size guard holds a shrunken cluster back (not judged)",
    )


def test_a_held_change_is_recorded_once_per_reason(
    cycled, alice, carol, dave, django_capture_on_commit_callbacks
) -> None:
    approved_policy(carol, dave)
    xid_drain(cycled, first_node(cycled))
    set_kill_switch(alice, stopped=True)

    step(cycled, django_capture_on_commit_callbacks)
    run_cycles(cycled, 1)
    stats = step(cycled, django_capture_on_commit_callbacks)

    assert stats["noted"] == 1
    assert AutopilotDecision.objects.count() == 1


def test_a_change_a_person_rejected_is_not_the_policys(
    cycled, carol, dave, django_capture_on_commit_callbacks
) -> None:
    approved_policy(carol, dave)
    rec = xid_drain(cycled, first_node(cycled))
    reject_recommendation(rec, carol, "the GPU was reseated")

    stats = step(cycled, django_capture_on_commit_callbacks)

    assert stats["applied"] == 0
    assert not AutopilotDecision.objects.exists()
    assert Recommendation.objects.get(pk=rec.pk).state == "rejected"


def test_an_unapproved_or_edited_policy_acts_on_nothing(
    cycled, carol, dave, django_capture_on_commit_callbacks
) -> None:
    policy = approved_policy(carol, dave)
    edit_policy(policy, carol, terms_of(policy))  # a new version awaits a second person again
    rec = xid_drain(cycled, first_node(cycled))

    step(cycled, django_capture_on_commit_callbacks)

    rec.refresh_from_db()
    assert rec.state == "proposed"
    assert not AutopilotDecision.objects.exists()


def test_a_regressed_change_turns_its_policy_to_dry_run_and_alerts(
    cycled, carol, dave, django_capture_on_commit_callbacks
) -> None:
    policy = approved_policy(carol, dave, per_pool_per_hour=5, pool_out_share=1.0)
    rec = xid_drain(cycled, first_node(cycled))
    step(cycled, django_capture_on_commit_callbacks)
    run_cycles(cycled, 1)
    # what verification.py records of a verified change whose metric then got worse
    Recommendation.objects.filter(pk=rec.pk).update(
        state="regressed", verification={"status": "regressed", "reason": "metric worse x3"}
    )

    stats = step(cycled, django_capture_on_commit_callbacks)

    policy.refresh_from_db()
    assert stats["demoted"] == 1
    assert policy.mode == "dry-run"
    assert f"#{rec.pk}" in policy.mode_reason
    assert "regressed" in policy.mode_reason
    assert AuditEntry.objects.filter(
        actor="system:autopilot", action="policy-demoted", target="policy:xid-drain"
    ).exists()
    sent = alerts_for(cycled, now=timezone.now(), since=None).alerts
    alerts = [a for a in sent if a.labels["alertname"] == "GpuobsAutopilotAction"]
    assert [(a.labels["outcome"], a.labels["severity"]) for a in alerts] == [
        ("applied", "info"),
        ("demoted", "warning"),
    ]
    assert "approved by dave" in alerts[0].annotations["summary"]
    assert "to undo: Roll back" in alerts[0].annotations["description"]
    # once demoted, it does not apply again: a second drain is only what it would do
    other = xid_drain(cycled, cycled.snapshots.latest("as_of").load_document()["nodes"][1]["name"])
    step(cycled, django_capture_on_commit_callbacks)
    assert AutopilotDecision.objects.get(recommendation=other).outcome == "would-apply"


def test_a_change_a_person_requested_waits_for_a_person(
    cycled, carol, dave, erin, django_capture_on_commit_callbacks
) -> None:
    approved_policy(carol, dave)
    rec = xid_drain(cycled, first_node(cycled))
    request_recommendation(rec, dave)  # the policy's approver may not approve his own request

    step(cycled, django_capture_on_commit_callbacks)

    rec.refresh_from_db()
    held = AutopilotDecision.objects.get(recommendation=rec)
    assert rec.state == "proposed"
    assert (held.guard, held.reason) == (
        "workflow",
        "requested by dave: it awaits a person's approval",
    )
