"""Verification that means it (issue #20.2): an applied change is verified only after its
findings stayed resolved and its metric stayed better for GPUOBS_VERIFY_GOOD_CYCLES cycles in a
row; a verified change whose finding comes back is ``regressed`` with its rollback proposed; the
page shows the verdict with the checks behind it, from the one judgement."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from django.utils import timezone

from diagnosis.actions.cycles import run_cluster_cycle
from diagnosis.edge.sim import runtime as sim_runtime
from diagnosis.models import AuditEntry, Cluster, ClusterCycle, Finding, Recommendation
from tests.support.records import make_recommendation, stepped_seed_config
from tests.support.world import logged_in_client

pytestmark = pytest.mark.django_db

FIRST_FRAGMENTATION_CYCLE = 3  # the seed scenario's hpo burst is blocked from 0:30


@pytest.fixture
def demo(make_cluster) -> Iterator[Cluster]:
    """The seed scenario (128 x 8 A100, pool a100 under spread), 10 simulated minutes a cycle."""
    cluster = make_cluster(
        "demo-verify",
        scheduler_kind="sim",
        metrics_kind="sim",
        scheduler_config=stepped_seed_config(datetime(2026, 11, 29, 8, 0, tzinfo=UTC), 600),
    )
    yield cluster
    sim_runtime.forget(cluster.name)


def cycles(cluster: Cluster, count: int) -> None:
    for _ in range(count):
        cycle = run_cluster_cycle(Cluster.objects.get(pk=cluster.pk))
        assert cycle.ok, cycle.error


def applied_spread(cluster: Cluster, *, state: str = "applied", **verification) -> Recommendation:
    """A change to spread (the demo pool's setting) recorded as applied at the latest cycle,
    with 100 fragmented GPUs before it: every later cycle has fewer."""
    latest = ClusterCycle.objects.filter(cluster=cluster).latest()
    return make_recommendation(
        cluster,
        "placement-policy",
        "pool:a100",
        {"from": "binpack", "to": "spread"},
        state=state,
        applied_at=timezone.now(),
        apply_result={"before": "binpack", "after": "spread", "command": "sim apply ..."},
        verification={
            "status": "watching",
            "since_as_of": latest.as_of.isoformat(),
            "metric": "free_fragmented_gpus",
            "baseline": 100.0,
            "observations": [],
            **verification,
        },
    )


def test_a_change_is_verified_only_after_the_good_cycles_in_a_row(demo, settings) -> None:
    settings.GPUOBS_VERIFY_GOOD_CYCLES = 3
    cycles(demo, FIRST_FRAGMENTATION_CYCLE)
    rec = applied_spread(demo)

    states = []
    for _ in range(3):
        cycles(demo, 1)
        rec.refresh_from_db()
        states.append((rec.state, rec.verification["good_cycles"]))

    assert states == [("applied", 1), ("applied", 2), ("verified", 3)]
    assert AuditEntry.objects.get(recommendation=rec).action == "verify"


def test_a_stored_finding_still_open_keeps_it_from_being_verified(demo, settings) -> None:
    """The cycle does not report the finding (no rule of this build judges it), but its stored
    row is open -- the page lists it so -- and that is enough to withhold the verdict."""
    settings.GPUOBS_VERIFY_GOOD_CYCLES = 1
    cycles(demo, FIRST_FRAGMENTATION_CYCLE)
    rec = applied_spread(demo)
    rec.motivating_findings.add(
        Finding.objects.create(
            cluster=demo,
            rule_id="retired-rule",
            subject="pool:a100",
            state="firing",
            first_seen=timezone.now(),
            last_seen=timezone.now(),
        )
    )

    cycles(demo, 2)

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


def test_a_finding_back_while_the_metric_is_no_better_regresses_with_a_rollback(demo) -> None:
    cycles(demo, FIRST_FRAGMENTATION_CYCLE)
    rec = verified_spread(demo, baseline=0.0)  # nothing was fragmented before: no better now

    cycles(demo, 1)  # the pool is still fragmented: the finding is reported again

    rec.refresh_from_db()
    assert rec.state == "regressed"
    undo = rec.rollbacks.get()
    assert (undo.state, undo.change) == ("proposed", {"from": "spread", "to": "binpack"})
    assert rec.status_message.startswith("regressed after verification")
    assert f"rollback #{undo.pk} proposed" in rec.status_message
    assert AuditEntry.objects.filter(recommendation=rec, action="regress").exists()


def test_a_finding_back_while_the_metric_is_still_better_regresses_without_a_rollback(
    demo,
) -> None:
    cycles(demo, FIRST_FRAGMENTATION_CYCLE)
    rec = verified_spread(demo, baseline=1000.0)

    cycles(demo, 1)

    rec.refresh_from_db()
    assert rec.state == "regressed"
    assert "still better than before" in rec.status_message
    assert not rec.rollbacks.exists()


def test_the_page_shows_the_verdict_with_its_checks(demo, carol, settings) -> None:
    settings.GPUOBS_VERIFY_GOOD_CYCLES = 2
    cycles(demo, FIRST_FRAGMENTATION_CYCLE)
    rec = applied_spread(demo)
    cycles(demo, 1)

    page = logged_in_client(carol).get(f"/clusters/{demo.name}/recommendations/{rec.pk}/")

    html = page.content.decode()
    assert page.status_code == 200
    assert "<strong>watching</strong>" in html
    assert "✗ good cycles in a row: 1 of 2" in html
    assert "✓ motivating findings resolved: none open" in html
