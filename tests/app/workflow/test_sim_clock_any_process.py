"""The simulator checks and applies a change at the cluster's clock in whichever process runs it
(issue #26.1): a web process or worker that has not collected builds its simulator at simulated
second 0, where the demo's sweep gangs have not arrived yet; brought to the latest snapshot's
time first, the gang release's dry run and apply succeed and the partial-gang share drops."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from diagnosis.actions.workflow.apply import run_dry_run
from diagnosis.actions.workflow.review import set_cluster_writes
from diagnosis.edge.sim import runtime as sim_runtime
from diagnosis.models import Cluster, Recommendation
from tests.support.records import request_approve_apply, run_cycles, seed_demo_cluster

pytestmark = pytest.mark.django_db

STEP_S = 1200
MAX_CYCLES_TO_PROPOSE = 10
AFTER_CYCLES = 2  # the other gang takes the released GPUs for a cycle, then completes


@pytest.fixture
def demo(db) -> Iterator[Cluster]:
    with seed_demo_cluster("demo-any-process", STEP_S) as cluster:
        yield cluster


def gang_release(cluster: Cluster) -> Recommendation:
    for _ in range(MAX_CYCLES_TO_PROPOSE):
        run_cycles(cluster, 1)
        rec = Recommendation.objects.filter(
            cluster=cluster, kind="gang-release", state="proposed"
        ).first()
        if rec is not None:
            return rec
    raise AssertionError("no gang-release proposed")


def held_by_partial_gangs(cluster: Cluster) -> int:
    pools = run_cycles(cluster, 1).accounting["pools"]
    return int(sum(p["buckets"].get("held-by-partial-gang", {}).get("gpus", 0) for p in pools))


def test_a_fresh_process_dry_runs_the_gang_release_at_the_clusters_clock(demo) -> None:
    rec = gang_release(demo)
    sim_runtime.forget(demo.name)  # the web process: no simulator yet

    assert run_dry_run(rec.pk) == {"outcome": "ok"}
    rec.refresh_from_db()
    assert "error" not in rec.dry_run_result, rec.dry_run_result
    assert rec.dry_run_result["before"] == "partial"


def test_a_fresh_process_applies_the_gang_release_and_partial_gangs_let_go(
    demo, alice, carol, dave, celery_eager, django_capture_on_commit_callbacks
) -> None:
    rec = gang_release(demo)
    held_before = held_by_partial_gangs(demo)
    set_cluster_writes(demo, alice, enabled=True)
    sim_runtime.forget(demo.name)  # the worker that applies never collected

    rec = request_approve_apply(rec, carol, dave, django_capture_on_commit_callbacks)
    sim_runtime.forget(demo.name)  # the next cycle in yet another process replays the log

    assert rec.state == "applied", rec.status_message
    assert rec.apply_result["before"] == "partial"
    after = [held_by_partial_gangs(demo) for _ in range(AFTER_CYCLES)]
    assert held_before > 0
    assert after[-1] < held_before, after
