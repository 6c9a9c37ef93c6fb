"""Verification that means it (issue #20.2): an applied change is verified only after its
findings stayed resolved and its metric stayed better for GPUOBS_VERIFY_GOOD_CYCLES cycles in a
row; a verified change is ``regressed`` (its rollback proposed) only when its metric was worse
than before for GPUOBS_VERIFY_CYCLES cycles in a row, its finding coming back is a signal
(issue #26.6); the page shows the verdict with the checks behind it, from the one judgement."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from diagnosis.actions.workflow.review import create_rollback
from diagnosis.models import AuditEntry, Cluster, Finding, Recommendation
from tests.support.records import applied_spread, make_finding, run_cycles, seed_demo_cluster
from tests.support.world import logged_in_client

pytestmark = pytest.mark.django_db

FIRST_FRAGMENTATION_CYCLE = 3  # the seed scenario's hpo burst is blocked from 0:30


@pytest.fixture
def demo(db) -> Iterator[Cluster]:
    """The seed scenario (128 x 8 A100, pool a100 under spread), 10 simulated minutes a cycle."""
    with seed_demo_cluster("demo-verify", 600) as cluster:
        yield cluster


def test_a_change_is_verified_only_after_the_good_cycles_in_a_row(demo, settings) -> None:
    settings.GPUOBS_VERIFY_GOOD_CYCLES = 3
    run_cycles(demo, FIRST_FRAGMENTATION_CYCLE)
    rec = applied_spread(demo)

    states = []
    for _ in range(3):
        run_cycles(demo, 1)
        rec.refresh_from_db()
        states.append((rec.state, rec.verification["good_cycles"]))

    assert states == [("applied", 1), ("applied", 2), ("verified", 3)]
    assert AuditEntry.objects.get(recommendation=rec).action == "verify"


def test_a_stored_finding_still_open_keeps_it_from_being_verified(demo, settings) -> None:
    """The cycle does not report the finding (no rule of this build judges it), but its stored
    row is open -- the page lists it so -- and that is enough to withhold the verdict."""
    settings.GPUOBS_VERIFY_GOOD_CYCLES = 1
    run_cycles(demo, FIRST_FRAGMENTATION_CYCLE)
    rec = applied_spread(demo)
    rec.motivating_findings.add(make_finding(demo, "retired-rule", "pool:a100", "firing"))

    run_cycles(demo, 2)

    rec.refresh_from_db()
    assert rec.state == "applied"
    assert rec.verification["why"][0] == {
        "label": "motivating findings resolved",
        "ok": False,
        "detail": "1 open",
    }


def verified_spread(cluster: Cluster, baseline: float) -> Recommendation:
    """:func:`applied_spread`, verified three cycles ago, motivated by the pool's (open)
    fragmentation finding."""
    rec = applied_spread(cluster, state="verified", status="verified", baseline=baseline)
    Recommendation.objects.filter(pk=rec.pk).update(
        verification={**rec.verification, "verified_at_cycle": 3, "cycles": 3}
    )
    rec.motivating_findings.add(
        Finding.objects.get(cluster=cluster, rule_id="fragmentation", subject="pool:a100")
    )
    return rec


def test_a_metric_worse_than_before_cycles_in_a_row_regresses_with_a_rollback(
    demo, settings
) -> None:
    settings.GPUOBS_VERIFY_CYCLES = 2
    run_cycles(demo, FIRST_FRAGMENTATION_CYCLE)
    rec = verified_spread(demo, baseline=0.0)  # nothing was fragmented before: worse now

    run_cycles(demo, 1)
    rec.refresh_from_db()
    after_one = rec.state
    run_cycles(demo, 1)

    rec.refresh_from_db()
    assert (after_one, rec.state) == ("verified", "regressed")
    undo = rec.rollbacks.get()
    assert (undo.state, undo.change) == ("proposed", {"from": "spread", "to": "binpack"})
    assert rec.status_message.startswith("regressed after verification")
    assert f"rollback #{undo.pk} proposed" in rec.status_message
    assert AuditEntry.objects.filter(recommendation=rec, action="regress").exists()


def test_a_finding_back_while_the_metric_is_still_better_is_a_signal_not_a_regression(
    demo,
) -> None:
    run_cycles(demo, FIRST_FRAGMENTATION_CYCLE)
    rec = verified_spread(demo, baseline=1000.0)

    run_cycles(demo, 1)  # the pool is still fragmented: the finding is reported again

    rec.refresh_from_db()
    assert rec.state == "verified"
    assert rec.verification["signals"] == ["finding returned (1 open)"]
    assert not rec.rollbacks.exists()


def test_the_page_shows_the_verdict_with_its_checks(demo, carol, settings) -> None:
    settings.GPUOBS_VERIFY_GOOD_CYCLES = 2
    run_cycles(demo, FIRST_FRAGMENTATION_CYCLE)
    rec = applied_spread(demo)
    run_cycles(demo, 1)

    page = logged_in_client(carol).get(f"/clusters/{demo.name}/recommendations/{rec.pk}/")

    html = page.content.decode()
    assert page.status_code == 200
    assert "<strong>watching</strong>" in html
    assert "✗ good cycles in a row: 1 of 2" in html
    assert "✓ motivating findings resolved: none open" in html


def regressed_spread_with_its_rollback(cluster: Cluster) -> tuple[Recommendation, Recommendation]:
    """:func:`applied_spread`, regressed a cycle ago (its metric 1000 before: every cycle now is
    better), with the rollback gpuobs proposed for it when it regressed."""
    rec = applied_spread(cluster, state="regressed", status="regressed", baseline=1000.0)
    Recommendation.objects.filter(pk=rec.pk).update(
        verification={
            **rec.verification,
            "verified_at_cycle": 1,
            "regressed_at_cycle": 3,
            "cycles": 3,
        }
    )
    rec.refresh_from_db()
    undo = create_rollback(rec, user=None, reason="regressed", approved=False)
    return rec, undo


def test_verified_again_after_a_regression_expires_the_rollback_nobody_asked_for(
    demo, settings
) -> None:
    settings.GPUOBS_VERIFY_GOOD_CYCLES = 1
    run_cycles(demo, FIRST_FRAGMENTATION_CYCLE)
    rec, undo = regressed_spread_with_its_rollback(demo)

    run_cycles(demo, 1)

    rec.refresh_from_db()
    undo.refresh_from_db()
    assert rec.state == "verified"
    assert undo.state == "expired"
    assert undo.status_message == f"not needed: #{rec.pk} was verified again"
    assert AuditEntry.objects.filter(recommendation=undo, action="expire").exists()


def test_a_rollback_a_person_requested_stays_when_the_change_is_verified_again(
    demo, carol, settings
) -> None:
    settings.GPUOBS_VERIFY_GOOD_CYCLES = 1
    run_cycles(demo, FIRST_FRAGMENTATION_CYCLE)
    rec, undo = regressed_spread_with_its_rollback(demo)
    Recommendation.objects.filter(pk=undo.pk).update(state="requested", requested_by=carol)

    run_cycles(demo, 1)

    rec.refresh_from_db()
    undo.refresh_from_db()
    assert (rec.state, undo.state) == ("verified", "requested")
