"""The whole loop on the demo cluster, with figures: ``manage.py demo`` runs the seed scenario
until fragmentation fires and binpack is proposed; alice turns writes on, carol requests the
change, dave approves and applies it; later cycles verify it. The same scenario without the
change (the simulator is deterministic) is the counterfactual the figures compare against.

Run with ``-s`` to see the figures (also kept in ``var/demo_before_after.json``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime
from io import StringIO

import pytest
from django.core.management import call_command

from diagnosis.actions.records.cycles import run_cluster_cycle
from diagnosis.actions.workflow.review import (
    set_cluster_writes,
)
from diagnosis.core.accounting import account
from diagnosis.core.rules.engine import run_rules
from diagnosis.core.simulate import scenarios
from diagnosis.core.snapshot import load
from diagnosis.edge.sim import runtime as sim_runtime
from diagnosis.models import AuditEntry, Cluster, Finding, Recommendation
from tests.conftest import REPO_ROOT
from tests.support.records import request_approve_apply

pytestmark = pytest.mark.django_db

STEP_S = 600  # manage.py demo's default step: 10 simulated minutes a cycle
BEFORE_CYCLES = 3  # fragmentation is first reported at 0:30
AFTER_CYCLES = 45  # to 8:00
FIGURES = REPO_ROOT / "var" / "demo_before_after.json"


@pytest.fixture
def fresh_demo() -> Iterator[None]:
    sim_runtime.forget("demo")
    yield
    sim_runtime.forget("demo")


def fragmented(accounting: dict) -> int:
    return sum(p["buckets"]["free-fragmented"]["gpus"] for p in accounting["pools"])


def counterfactual(cycles: int) -> list[int]:
    """Free-fragmented GPUs per cycle of the seed scenario left under spread."""
    scenario = scenarios.seed_scenario(0)
    start = datetime(2026, 11, 29, 8, 0, tzinfo=UTC)
    simulator = replace(scenario, spec=replace(scenario.spec, start=start)).build()
    out = []
    for number in range(1, cycles + 1):
        snap = load(simulator.snapshot(at=number * STEP_S))
        out.append(fragmented(account(run_rules(snap)).as_dict()))
    return out


def gpu_hours(per_cycle: list[int]) -> float:
    return sum(per_cycle) * STEP_S / 3600


def test_approving_binpack_in_the_demo_makes_fragmentation_go_away(
    fresh_demo, alice, carol, dave, celery_eager, django_capture_on_commit_callbacks
) -> None:
    call_command("demo", cycles=BEFORE_CYCLES, step=STEP_S, stdout=StringIO())
    cluster = Cluster.objects.get(name="demo")
    rec = Recommendation.objects.get(
        cluster=cluster, kind="placement-policy", target="pool:a100", state="proposed"
    )
    assert rec.change == {"from": "spread", "to": "binpack"}
    before = [fragmented(c.accounting) for c in cluster.cycles.order_by("as_of")]

    cluster = set_cluster_writes(cluster, alice, enabled=True)
    rec = request_approve_apply(rec, carol, dave, django_capture_on_commit_callbacks)
    assert rec.state == "applied", rec.status_message
    assert rec.apply_result["before"] == "spread"
    assert rec.verification["baseline"] == before[-1]  # fragmented GPUs when it was applied

    after, verified_at, resolved_at, verified_while_open, states = [], None, None, [], []
    signalled = []
    for number in range(1, AFTER_CYCLES + 1):
        cycle = run_cluster_cycle(Cluster.objects.get(pk=cluster.pk))
        after.append(fragmented(cycle.accounting))
        rec.refresh_from_db()
        states.append(rec.state)
        if verified_at is None and rec.state == "verified":
            verified_at = number
        finding = Finding.objects.get(cluster=cluster, rule_id="fragmentation")
        if resolved_at is None and finding.state == "resolved":
            resolved_at = number
        if rec.state == "verified" and finding.state != "resolved":
            verified_while_open.append(number)  # issue #26.6: a signal, not a regression
            if not rec.verification.get("watch_ended"):  # still observed each cycle
                signals = rec.verification["signals"]
                signalled.append((number, any("finding returned" in s for s in signals)))
    without = counterfactual(BEFORE_CYCLES + AFTER_CYCLES)[BEFORE_CYCLES:]

    figures = {
        "applied_at_cycle": BEFORE_CYCLES,
        "cycle_s": STEP_S,
        "free_fragmented_gpus_before": before,
        "free_fragmented_gpus_after": after,
        "free_fragmented_gpus_without_change": without,
        "free_fragmented_gpu_hours_after": round(gpu_hours(after), 1),
        "free_fragmented_gpu_hours_without_change": round(gpu_hours(without), 1),
        "last_5h_gpu_hours_after": round(gpu_hours(after[-30:]), 1),
        "last_5h_gpu_hours_without_change": round(gpu_hours(without[-30:]), 1),
        "cycles_until_verified": verified_at,
        "recommendation_state_after": states,
        "cycles_until_finding_resolved": resolved_at,
        "verification": rec.verification.get("reason"),
    }
    FIGURES.parent.mkdir(parents=True, exist_ok=True)
    FIGURES.write_text(json.dumps(figures, indent=1))
    print("\ndemo before/after:", json.dumps(figures, indent=1))

    assert verified_at is not None  # after GPUOBS_VERIFY_GOOD_CYCLES good cycles in a row
    assert verified_at >= resolved_at + 2
    # issue #20.2: never verified while fragmentation is open; issue #26.6: once verified, the
    # finding coming back is shown as a signal on every such cycle, not a regression
    assert verified_at not in verified_while_open
    assert all(shown for _, shown in signalled), signalled
    assert "regressed" not in states
    assert resolved_at is not None
    # Jobs already placed stay where they are, so the first hour's burst (the hpo sweep) drains
    # as it would have; from then on binpack keeps whole nodes free for 8-GPU jobs.
    assert after[:6] == without[:6]
    assert gpu_hours(after) < 0.75 * gpu_hours(without)
    assert gpu_hours(after[-30:]) < 0.3 * gpu_hours(without[-30:])
    actions = AuditEntry.objects.filter(recommendation=rec).values_list("actor", "action")
    assert list(actions.order_by("time", "id"))[:5] == [
        ("carol", "request"),
        ("dave", "approve"),
        ("system:actuate", "dry-run"),
        ("dave", "apply-requested"),
        ("dave", "apply"),
    ]
