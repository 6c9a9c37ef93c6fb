"""The cycle's recommend step (docs/architecture.md#one-cycle, step 4): proposals from the
diagnosis, one open recommendation per target (kept without a new replay, or superseded), proposals
that
expire, lapsed approvals, and the verification of applied changes with its rollback."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import pytest
from django.utils import timezone

from diagnosis.actions.workflow.review import reject_recommendation
from diagnosis.actions.workflow.simulator import apply_sim_change
from diagnosis.core.recommend.base import Generator
from diagnosis.models import AuditEntry, Cluster, Finding, Recommendation, Snapshot
from diagnosis.tasks import estimate_impact
from tests.support.records import (
    applied_spread,
    binpack_proposal,
    make_finding,
    make_recommendation,
    run_cycles,
    seed_demo_cluster,
)

pytestmark = [pytest.mark.django_db, pytest.mark.lab("lab-cycle")]

STEP_S = 600
FIRST_FRAGMENTATION_CYCLE = 3  # the seed scenario's hpo burst is blocked from 0:30


@pytest.fixture
def demo(db) -> Iterator[Cluster]:
    """The seed scenario (128 x 8 A100, pool a100 under spread), 10 simulated minutes a cycle."""
    with seed_demo_cluster("demo-cycle", STEP_S) as cluster:
        yield cluster


def test_a_fragmented_pool_gets_a_binpack_proposal_with_its_impact(demo) -> None:
    cycle = run_cycles(demo, FIRST_FRAGMENTATION_CYCLE)
    estimate_impact(binpack_proposal(demo).pk)  # the impact task, apart from the cycle (#17)

    rec = binpack_proposal(demo)
    assert rec.change == {"from": "spread", "to": "binpack"}
    assert rec.impact["method"] == "simulated"
    assert {m["metric"] for m in rec.impact["metrics"]} >= {"allocation_util", "fragmentation_gpus"}
    assert rec.proposed_as_of == cycle.as_of
    finding = rec.motivating_findings.get()
    assert (finding.rule_id, finding.subject) == ("fragmentation", "pool:a100")
    assert cycle.recommendations["proposed"] >= 1
    assert cycle.recommendations["impact_queued"] >= 1


def test_the_next_cycle_keeps_the_open_proposal_and_its_impact(demo) -> None:
    run_cycles(demo, FIRST_FRAGMENTATION_CYCLE)
    first = binpack_proposal(demo)

    cycle = run_cycles(demo, 1)

    kept = binpack_proposal(demo)
    assert kept.pk == first.pk
    assert kept.impact == first.impact  # not replayed on the newer snapshot
    assert kept.last_proposed_as_of == cycle.as_of > kept.proposed_as_of
    assert cycle.recommendations["kept"] >= 1


def test_a_different_change_for_the_target_supersedes_the_open_one(demo) -> None:
    run_cycles(demo, FIRST_FRAGMENTATION_CYCLE - 1)
    old = make_recommendation(
        demo, "placement-policy", "pool:a100", {"from": "spread", "to": "best-fit"}
    )

    cycle = run_cycles(demo, 1)

    old.refresh_from_db()
    new = binpack_proposal(demo)
    assert old.state == "superseded"
    assert old.status_message.startswith(f"superseded by #{new.pk}")
    assert cycle.recommendations["superseded"] == 1


def test_a_rejected_change_is_not_proposed_again_at_once(demo, carol) -> None:
    run_cycles(demo, FIRST_FRAGMENTATION_CYCLE)
    reject_recommendation(binpack_proposal(demo), carol, "not during the sweep")

    cycle = run_cycles(demo, 1)

    assert not Recommendation.objects.filter(
        cluster=demo, state="proposed", kind="placement-policy"
    )
    assert cycle.recommendations["quiet"] == 1


def test_a_proposal_whose_findings_resolved_expires(lab) -> None:
    run_cycles(lab, 1)
    gone = make_finding(lab, "starvation", "job:b-0001", "resolved")
    rec = make_recommendation(
        lab, target="queue:nobody", change={"from": 1, "to": 2}, findings=[gone]
    )

    run_cycles(lab, 1)

    rec.refresh_from_db()
    assert rec.state == "expired"
    assert "findings resolved" in rec.status_message


def test_a_proposal_whose_finding_still_fires_stays(demo) -> None:
    run_cycles(demo, 1)
    still = Finding.objects.get(cluster=demo, subject="job:research-tp")  # spread over 2 nodes
    rec = make_recommendation(
        demo, target="queue:nobody", change={"from": 1, "to": 2}, findings=[still]
    )

    run_cycles(demo, 1)

    rec.refresh_from_db()
    assert rec.state == "proposed"
    assert Finding.objects.get(pk=still.pk).state != "resolved"


def test_a_drain_proposal_outlives_its_xid_and_expires_once_drained(lab) -> None:
    cycle = run_cycles(lab, 1)
    node = Snapshot.objects.filter(cluster=lab).latest().load_document()["nodes"][0]["name"]
    xid = Finding.objects.create(
        cluster=lab,
        rule_id="xid",
        subject=f"gpu:{node}/3",
        state="resolved",  # the Xid left the rule's window; the GPU is still broken
        first_seen=cycle.as_of,
        last_seen=cycle.as_of,
    )
    drain = make_recommendation(
        lab,
        "drain-node",
        f"node:{node}",
        {"from": "ready", "to": "drained", "reason": f"gpuobs: Xid 79 on {node}/3"},
        findings=[xid],
    )

    run_cycles(lab, 1)
    drain.refresh_from_db()
    assert drain.state == "proposed"

    apply_sim_change(lab, {"kind": "drain-node", "target": f"node:{node}"}, actor="someone")
    for _ in range(12):  # its jobs end within a few simulated hours
        run_cycles(lab, 1)
        drain.refresh_from_db()
        if drain.state != "proposed":
            break
    assert drain.state == "expired"
    assert drain.status_message == f"node {node} is drained already"


def test_the_cycle_lapses_approvals_past_their_time(lab, dave) -> None:
    rec = make_recommendation(
        lab,
        change={"from": 1, "to": 2},
        state="approved",
        approved_by=dave,
        approved_at=timezone.now() - timedelta(hours=5),
        expires_at=timezone.now() - timedelta(hours=1),
    )

    cycle = run_cycles(lab, 1)

    rec.refresh_from_db()
    assert rec.state == "expired"
    assert "lapsed" in rec.status_message
    entry = AuditEntry.objects.get(recommendation=rec)
    assert (entry.actor, entry.action) == ("system:cycle", "expire")
    assert cycle.recommendations["lapsed"] == 1


def test_a_failing_generator_is_an_error_value_and_the_cycle_stands(
    lab, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(context):
        raise RuntimeError("generator bug")

    generator = Generator("broken", "advisory", "Broken", (), "always fails", broken)
    monkeypatch.setattr(
        "diagnosis.core.recommend.engine.all_generators", lambda: {"broken": generator}
    )

    cycle = run_cycles(lab, 1)

    assert cycle.recommendations["errors"] == [
        {"generator": "broken", "error": "RuntimeError", "message": "generator bug"}
    ]


# -- verification and rollback -------------------------------------------------------------------


def test_a_change_in_effect_with_no_finding_left_and_no_worse_is_verified(demo) -> None:
    run_cycles(demo, FIRST_FRAGMENTATION_CYCLE)
    rec = applied_spread(demo, baseline=100.0)

    run_cycles(demo, 3)  # GPUOBS_VERIFY_GOOD_CYCLES good cycles in a row (test_verification.py)

    rec.refresh_from_db()
    assert rec.state == "verified"
    observation = rec.verification["observations"][-1]
    assert observation["in_effect"] is True
    assert 0 < observation["metric"] < 100
    assert AuditEntry.objects.get(recommendation=rec).action == "verify"


def test_a_change_that_made_fragmentation_worse_gets_a_rollback_proposed(demo) -> None:
    run_cycles(demo, FIRST_FRAGMENTATION_CYCLE)
    rec = applied_spread(demo, baseline=0.0)

    run_cycles(demo, 3)

    rec.refresh_from_db()
    assert rec.verification["status"] == "worse"
    assert rec.state == "applied"
    undo = rec.rollbacks.get()
    assert (undo.state, undo.change) == ("proposed", {"from": "spread", "to": "binpack"})
    assert "got worse" in undo.status_message
    assert AuditEntry.objects.filter(recommendation=rec, action="verify-worse").exists()


def test_with_auto_rollback_the_cycle_rolls_it_back_itself(
    demo, celery_eager, django_capture_on_commit_callbacks
) -> None:
    Cluster.objects.filter(pk=demo.pk).update(auto_rollback=True, dry_run=False)
    run_cycles(demo, FIRST_FRAGMENTATION_CYCLE)
    rec = applied_spread(demo, baseline=0.0)

    with django_capture_on_commit_callbacks(execute=True):
        run_cycles(demo, 3)

    rec.refresh_from_db()
    undo = rec.rollbacks.get()
    assert (undo.state, rec.state) == ("applied", "rolled-back")
    assert undo.approved_by is None  # gpuobs did it, and said so
    assert AuditEntry.objects.get(recommendation=undo, action="apply").actor == "system:actuate"
    run_cycles(demo, 1)
    document = Snapshot.objects.filter(cluster=demo).latest().load_document()
    assert document["scheduler"]["placement"]["a100"] == "binpack"
