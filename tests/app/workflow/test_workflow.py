"""The recommendation workflow's actions (diagnosis/workflow.py) on a simulated cluster: who may
request, approve, apply and roll back; the write switch; the idempotent apply (claimed key,
re-read target, guarded write); lapsed approvals; the append-only audit trail."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import timedelta

import pytest
from django.db import IntegrityError, connections, transaction
from django.utils import timezone

from diagnosis.actions.records.cycles import run_cluster_cycle
from diagnosis.actions.workflow.apply import perform_apply
from diagnosis.actions.workflow.base import WorkflowDenied, WorkflowError
from diagnosis.actions.workflow.review import (
    approve_recommendation,
    reject_recommendation,
    request_apply,
    request_recommendation,
    request_rollback,
    set_cluster_writes,
)
from diagnosis.models import (
    AuditEntry,
    AuditEntryImmutableError,
    Cluster,
    Recommendation,
    Snapshot,
)
from diagnosis.tasks import actuate_recommendation
from tests.support.records import make_recommendation

pytestmark = [pytest.mark.django_db, pytest.mark.lab(dry_run=False)]

WEIGHT = {"from": 1, "to": 3}  # team-b's weight in the small scenario is 1


@pytest.fixture
def proposal(lab: Cluster) -> Callable[..., Recommendation]:
    """A recommendation of the lab (writes on: the module's mark), by default raising team-b's
    weight from 1 to 3."""

    def build(
        kind: str = "queue-weight", target: str = "queue:team-b", change=None, **fields
    ) -> Recommendation:
        return make_recommendation(
            fields.pop("cluster", lab),
            kind,
            target,
            dict(WEIGHT) if change is None else change,
            impact={"summary": "raise team-b's weight", "verdict": "improves"},
            **fields,
        )

    return build


def recorded_changes(cluster: Cluster) -> list[dict]:
    return Cluster.objects.get(pk=cluster.pk).scheduler_config.get("changes", [])


def actions_of(rec: Recommendation) -> list[str]:
    return list(
        AuditEntry.objects.filter(recommendation=rec)
        .order_by("time", "id")
        .values_list("action", flat=True)
    )


def approved(rec: Recommendation, requester, approver, run_tasks) -> Recommendation:
    request_recommendation(rec, requester)
    return run_tasks(approve_recommendation, rec, approver)


# -- requesting and approving --------------------------------------------------------------------


def test_an_sre_requests_and_another_sre_approves(proposal, carol, dave, run_tasks) -> None:
    rec = approved(proposal(), carol, dave, run_tasks)

    assert rec.state == "approved"
    assert (rec.requested_by, rec.approved_by) == (carol, dave)
    assert rec.expires_at > timezone.now()
    assert actions_of(rec) == ["request", "approve", "dry-run"]


def test_the_approval_sends_a_dry_run_whose_diff_is_kept(proposal, carol, dave, run_tasks):
    rec = approved(proposal(), carol, dave, run_tasks)

    assert rec.dry_run_result["before"] == 1.0
    assert rec.dry_run_result["after"] == 3
    assert rec.dry_run_result["command"].startswith("sim apply ")
    assert rec.dry_run_result["target_changed"] == ""


def test_the_requester_may_not_approve_their_own_request(proposal, carol) -> None:
    rec = request_recommendation(proposal(), carol)

    with pytest.raises(WorkflowDenied, match="someone other than"):
        approve_recommendation(rec, carol)


def test_an_sre_may_not_approve_what_nobody_requested(proposal, dave) -> None:
    with pytest.raises(WorkflowDenied, match="nobody has requested"):
        approve_recommendation(proposal(), dave)


def test_a_viewer_may_neither_request_nor_approve(proposal, bob, carol) -> None:
    rec = proposal()
    with pytest.raises(WorkflowDenied):
        request_recommendation(rec, bob)
    request_recommendation(rec, carol)
    with pytest.raises(WorkflowDenied):
        approve_recommendation(rec, bob)


def test_oncall_approves_a_drain_nobody_requested(proposal, erin, run_tasks) -> None:
    drain = proposal(
        kind="drain-node",
        target="node:a100-002",
        change={"from": "ready", "to": "drained", "reason": "gpuobs: Xid 79 on a100-002/3"},
    )

    rec = run_tasks(approve_recommendation, drain, erin)

    assert rec.state == "approved"
    assert rec.requested_by == rec.approved_by == erin


def test_oncall_may_not_approve_a_queue_weight(proposal, carol, erin) -> None:
    rec = request_recommendation(proposal(), carol)

    with pytest.raises(WorkflowDenied, match="sre role"):
        approve_recommendation(rec, erin)


def test_advice_cannot_be_approved(proposal, carol) -> None:
    advice = proposal(kind="advisory", target="job:a-0001", change={})

    with pytest.raises(WorkflowError, match="advice"):
        request_recommendation(advice, carol)


def test_a_rejected_recommendation_cannot_be_approved(proposal, carol, dave) -> None:
    rec = reject_recommendation(proposal(), carol, "team-b is fine")

    assert (rec.state, rec.status_message) == ("rejected", "team-b is fine")
    with pytest.raises(WorkflowError, match="rejected"):
        approve_recommendation(rec, dave)


# -- applying ------------------------------------------------------------------------------------


def test_applying_writes_once_and_audits_before_and_after(
    lab, proposal, carol, dave, run_tasks
) -> None:
    rec = approved(proposal(), carol, dave, run_tasks)

    rec = run_tasks(request_apply, rec, dave)

    assert rec.state == "applied"
    assert [c["change"] for c in recorded_changes(lab)] == [
        {"kind": "queue-weight", "target": "queue:team-b", "to": 3}
    ]
    entry = AuditEntry.objects.get(recommendation=rec, action="apply")
    assert entry.actor == "dave"
    assert entry.before == 1.0
    assert entry.after["value"] == 3
    assert entry.after["written"] is True
    assert entry.after["command"] == rec.apply_result["command"]


def test_the_applied_change_shows_in_the_next_cycle(lab, proposal, carol, dave, run_tasks):
    rec = approved(proposal(), carol, dave, run_tasks)
    run_tasks(request_apply, rec, dave)
    run_cluster_cycle(Cluster.objects.get(pk=lab.pk))

    document = Snapshot.objects.filter(cluster=lab).latest().load_document()
    assert {q["name"]: q["weight"] for q in document["queues"]}["team-b"] == 3


def test_a_cluster_in_dry_run_writes_nothing(lab, proposal, carol, dave, run_tasks) -> None:
    Cluster.objects.filter(pk=lab.pk).update(dry_run=True)
    rec = approved(proposal(), carol, dave, run_tasks)

    rec = run_tasks(request_apply, rec, dave)

    assert rec.state == "approved"
    assert "dry run only" in rec.status_message
    assert recorded_changes(lab) == []
    entry = AuditEntry.objects.get(recommendation=rec, action="apply-dry-run")
    assert entry.after["written"] is False


def test_a_redelivered_apply_task_applies_nothing(lab, proposal, carol, dave, run_tasks):
    rec = approved(proposal(), carol, dave, run_tasks)
    rec = run_tasks(request_apply, rec, dave)
    key = rec.apply_key

    again = actuate_recommendation.apply(args=(rec.pk, key)).get()

    assert again["outcome"] == "duplicate"
    assert len(recorded_changes(lab)) == 1
    assert actions_of(rec).count("apply") == 1


def test_a_claimed_apply_is_not_taken_twice(proposal, carol, dave, run_tasks) -> None:
    rec = approved(proposal(), carol, dave, run_tasks)
    rec = request_apply(rec, dave)  # the task is not run
    Recommendation.objects.filter(pk=rec.pk).update(apply_claimed_at=timezone.now())

    outcome = perform_apply(rec.pk, rec.apply_key)

    assert outcome.outcome == "in-progress"


@pytest.mark.django_db(transaction=True)
def test_two_workers_given_the_same_message_apply_it_once(lab, proposal, carol, dave) -> None:
    rec = proposal(
        state="applying", apply_key="k1", requested_by=carol, approved_by=dave, applied_by=dave
    )
    barrier = threading.Barrier(2)
    outcomes: list[str] = []

    def worker() -> None:
        try:
            barrier.wait(timeout=10)
            outcomes.append(perform_apply(rec.pk, "k1").outcome)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=worker) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)

    assert sorted(outcomes) in (["applied", "duplicate"], ["applied", "in-progress"])
    assert len(recorded_changes(lab)) == 1


def test_a_changed_target_sends_it_back_to_proposed_with_the_reason(
    lab, proposal, carol, dave, run_tasks
) -> None:
    rec = approved(proposal(change={"from": 5, "to": 6}), carol, dave, run_tasks)

    rec = run_tasks(request_apply, rec, dave)

    assert rec.state == "proposed"
    assert "changed since the recommendation" in rec.status_message
    assert "now 1.0" in rec.status_message
    assert rec.approved_by is None
    assert recorded_changes(lab) == []
    assert actions_of(rec)[-1] == "apply-stopped-target-changed"


def test_a_target_already_at_the_new_value_is_applied_without_writing(
    lab, proposal, carol, dave, run_tasks
) -> None:
    rec = approved(proposal(change={"from": 1, "to": 1}), carol, dave, run_tasks)

    rec = run_tasks(request_apply, rec, dave)

    assert rec.state == "applied"
    assert "nothing was written" in rec.status_message
    assert recorded_changes(lab) == []


def test_a_change_the_scheduler_refuses_fails_with_its_reason(
    lab, proposal, carol, dave, run_tasks
) -> None:
    rec = approved(proposal(target="queue:nobody", change={"to": 2}), carol, dave, run_tasks)

    rec = run_tasks(request_apply, rec, dave)

    assert rec.state == "failed"
    assert "no queue 'nobody'" in rec.status_message
    failure = AuditEntry.objects.get(recommendation=rec, action="apply-failed")
    assert failure.after["permanent"] is True


def test_a_lapsed_approval_cannot_be_applied(proposal, carol, dave, run_tasks, settings):
    settings.GPUOBS_APPROVAL_TTL_SECONDS = 0
    rec = approved(proposal(), carol, dave, run_tasks)

    with pytest.raises(WorkflowError, match="lapsed"):
        request_apply(rec, dave)

    rec.refresh_from_db()
    assert rec.state == "expired"
    assert actions_of(rec)[-1] == "expire"


def test_a_viewer_may_not_apply(proposal, carol, dave, bob, run_tasks) -> None:
    rec = approved(proposal(), carol, dave, run_tasks)

    with pytest.raises(WorkflowDenied):
        request_apply(rec, bob)


# -- rolling back --------------------------------------------------------------------------------


def test_a_rollback_restores_the_value_before_and_is_audited(
    lab, proposal, carol, dave, run_tasks
) -> None:
    rec = approved(proposal(), carol, dave, run_tasks)
    rec = run_tasks(request_apply, rec, dave)

    undo = run_tasks(request_rollback, rec, carol)
    undo = run_tasks(approve_recommendation, undo, dave)
    undo = run_tasks(request_apply, undo, dave)

    rec.refresh_from_db()
    assert (undo.state, undo.rollback_of) == ("applied", rec)
    assert undo.change == {"from": 3, "to": 1.0}
    assert rec.state == "rolled-back"
    assert [c["change"]["to"] for c in recorded_changes(lab)] == [3, 1.0]
    assert actions_of(rec)[-1] == "rolled-back"
    assert actions_of(undo)[:2] == ["rollback-requested", "approve"]
    assert "apply-requested" in actions_of(undo)


def test_only_applied_changes_can_be_rolled_back(proposal, carol) -> None:
    with pytest.raises(WorkflowError, match="roll back"):
        request_rollback(proposal(), carol)


# -- the write switch ----------------------------------------------------------------------------


def test_only_an_admin_turns_writes_on(make_cluster, carol, alice) -> None:
    cluster = make_cluster("east")
    assert cluster.dry_run  # every cluster starts in dry-run

    with pytest.raises(WorkflowDenied):
        set_cluster_writes(cluster, carol, enabled=True)
    cluster = set_cluster_writes(cluster, alice, enabled=True)

    assert cluster.dry_run is False
    entry = AuditEntry.objects.get(cluster=cluster)
    assert (entry.actor, entry.action, entry.after) == (
        "alice",
        "writes-enabled",
        {"writes_enabled": True},
    )


# -- the audit trail is append-only --------------------------------------------------------------


def test_the_workflows_audit_rows_can_be_neither_changed_nor_deleted(
    proposal, carol, dave, run_tasks
) -> None:
    rec = approved(proposal(), carol, dave, run_tasks)
    entry = AuditEntry.objects.filter(recommendation=rec).first()
    entry.actor = "mallory"

    with pytest.raises(AuditEntryImmutableError):
        entry.save()
    with pytest.raises(AuditEntryImmutableError):
        entry.delete()
    with pytest.raises(AuditEntryImmutableError):
        AuditEntry.objects.filter(recommendation=rec).update(actor="mallory")
    with pytest.raises(AuditEntryImmutableError):
        AuditEntry.objects.filter(recommendation=rec).delete()
    assert set(AuditEntry.objects.values_list("actor", flat=True)) == {
        "carol",
        "dave",
        "system:actuate",
    }


def test_the_actions_only_ever_add_audit_rows(lab, proposal, carol, dave, run_tasks) -> None:
    """Through a whole life (request, approve, dry run, apply, roll back) no row is rewritten."""
    rec = approved(proposal(), carol, dave, run_tasks)
    first = list(AuditEntry.objects.order_by("id").values())
    rec = run_tasks(request_apply, rec, dave)
    undo = run_tasks(request_rollback, rec, carol)
    run_tasks(request_apply, run_tasks(approve_recommendation, undo, dave), dave)

    assert list(AuditEntry.objects.order_by("id").values())[: len(first)] == first
    assert AuditEntry.objects.count() > len(first)


def test_one_open_recommendation_per_target(proposal) -> None:
    proposal()
    with pytest.raises(IntegrityError), transaction.atomic():
        proposal(change={"from": 1, "to": 2})
    proposal(state="rejected", change={"from": 1, "to": 2})  # closed ones may repeat
    assert Recommendation.objects.count() == 2


def test_the_approval_lifetime_is_the_setting(proposal, carol, dave, run_tasks, settings):
    settings.GPUOBS_APPROVAL_TTL_SECONDS = 600
    rec = approved(proposal(), carol, dave, run_tasks)

    assert rec.expires_at - rec.approved_at == timedelta(seconds=600)
