"""The gang release end to end in the demo's seed scenario (issue #20.1): the two 40-pod sweep
gangs (arriving at 0:50, deadlocked from about 2:40) get a ``gang-release`` recommendation for
one of them (with the admission setting that prevents it as advice); carol requests it, dave
approves and applies it through the simulator's change protocol, and in the following cycles
the GPUs held by partial gangs drop. The figures go to ``var/gang_release_before_after.json``."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from diagnosis.actions.records.cycles import run_cluster_cycle
from diagnosis.actions.workflow.review import (
    set_cluster_writes,
)
from diagnosis.models import AuditEntry, Cluster, Recommendation
from tests.conftest import REPO_ROOT
from tests.support.records import request_approve_apply, seed_demo_cluster
from tests.support.world import logged_in_client

pytestmark = pytest.mark.django_db

STEP_S = 1200  # 20 simulated minutes a cycle: the deadlock within 10 cycles
MAX_CYCLES_TO_PROPOSE = 10  # the gangs arrive at 0:50, hold partially from ~1:50, deadlock ~2:40
AFTER_CYCLES = 2
FIGURES = REPO_ROOT / "var" / "gang_release_before_after.json"


@pytest.fixture
def demo(db) -> Iterator[Cluster]:
    with seed_demo_cluster("demo-gangs", STEP_S) as cluster:
        yield cluster


def held_by_partial_gangs(cluster: Cluster) -> tuple[int, float]:
    """The latest cycle's GPUs held by partial gangs, and their share of the capacity."""
    cycle = run_cluster_cycle(Cluster.objects.get(pk=cluster.pk))
    assert cycle.ok, cycle.error
    pools = cycle.accounting["pools"]
    held = sum(p["buckets"].get("held-by-partial-gang", {}).get("gpus", 0) for p in pools)
    capacity = sum(sum(b.get("gpus", 0) for b in p["buckets"].values()) for p in pools)
    return int(held), held / capacity


def test_releasing_a_deadlocked_gang_frees_the_gpus_partial_gangs_held(
    demo, alice, carol, dave, celery_eager, django_capture_on_commit_callbacks
) -> None:
    before = []
    rec = None
    for _ in range(MAX_CYCLES_TO_PROPOSE):
        before.append(held_by_partial_gangs(demo))
        rec = Recommendation.objects.filter(
            cluster=demo,
            kind="gang-release",
            state="proposed",
            motivating_findings__rule_id="gang-deadlock",
        ).first()
        if rec is not None:
            break
    assert rec is not None, f"no gang-release proposed; held by partial gangs: {before}"
    assert rec.target in ("job:sweep-gang-a", "job:sweep-gang-b")
    assert rec.change["to"] == "requeued"
    assert rec.impact["gpus_released"] > 0
    best, runner_up = rec.impact["basis"]["candidates"]
    assert best["id"] == rec.target.removeprefix("job:")
    assert best["completes"] == [runner_up["id"]]
    policy = Recommendation.objects.get(cluster=demo, kind="advisory", target="pool:a100")
    assert "all-or-nothing" in policy.impact["advisory"]

    page = logged_in_client(dave).get(f"/clusters/{demo.name}/recommendations/{rec.pk}/")
    assert 'id="release-candidates"' in page.content.decode()
    assert "Request this change" in page.content.decode()  # applied from the page like any other

    set_cluster_writes(demo, alice, enabled=True)
    rec = request_approve_apply(rec, carol, dave, django_capture_on_commit_callbacks)
    assert rec.state == "applied", rec.status_message
    assert rec.apply_result["before"] == "partial"

    after = [held_by_partial_gangs(demo) for _ in range(AFTER_CYCLES)]

    figures = {
        "cycle_s": STEP_S,
        "released": rec.target,
        "why": rec.impact.get("advisory"),
        "held_by_partial_gang_before": [gpus for gpus, _ in before],
        "share_before": [round(share, 3) for _, share in before],
        "held_by_partial_gang_after": [gpus for gpus, _ in after],
        "share_after": [round(share, 3) for _, share in after],
    }
    FIGURES.parent.mkdir(parents=True, exist_ok=True)
    FIGURES.write_text(json.dumps(figures, indent=1))
    print("\ngang release before/after:", json.dumps(figures, indent=1))
    assert before[-1][0] > 0
    assert all(gpus < before[-1][0] for gpus, _ in after)
    assert after[-1][0] == 0
    actions = list(AuditEntry.objects.filter(recommendation=rec).values_list("actor", "action"))
    assert ("carol", "request") in actions
    assert ("dave", "approve") in actions
    assert ("system:actuate", "apply") in actions or ("dave", "apply") in actions
