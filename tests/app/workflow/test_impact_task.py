"""Impact estimates apart from the cycle (issue #17): the cycle stores a recommendation with a
pending impact and only sends its estimate (on commit, to the ``impact`` queue); the task
``estimate_impact`` replays it and fills the impact in; replays are cached by the snapshot's
digest and the setting; at most ``GPUOBS_IMPACT_MAX_PER_CYCLE`` are sent per cycle, the most
GPU-hours at stake first; page and API say "impact pending" meanwhile."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kombu.exceptions import OperationalError

from diagnosis.actions.workflow.impact import enqueue_impact_estimates
from diagnosis.core.recommend.impact import PENDING
from diagnosis.models import Cluster, Recommendation, ReplayOutcome
from diagnosis.tasks import estimate_impact
from gpuobs.celery import queue_for_task
from tests.support.records import (
    binpack_proposal,
    make_recommendation,
    run_cycles,
    seed_demo_cluster,
)
from tests.support.world import logged_in_client

pytestmark = [pytest.mark.django_db]

STEP_S = 600
FIRST_FRAGMENTATION_CYCLE = 3  # the seed scenario's hpo burst is blocked from 0:30
PLAN = {"changes": [{"type": "SetQueueWeight", "queue": "team-b", "weight": 3.0}]}


@pytest.fixture
def demo(db, settings) -> Iterator[Cluster]:
    """The seed scenario (128 x 8 A100, pool a100 under spread), 10 simulated minutes a cycle,
    its impacts replayed with the reduced model (one seed, one hour) to keep the test short."""
    settings.GPUOBS_IMPACT_REDUCED_FROM_GPUS = 0
    with seed_demo_cluster("demo-impact", STEP_S) as cluster:
        yield cluster


def pending(cluster: Cluster, target: str, stake: float) -> Recommendation:
    return make_recommendation(
        cluster,
        target=target,
        impact={"method": "pending", "verdict": PENDING, "plan": PLAN, "stake_gpu_h": stake},
    )


def test_the_cycle_stores_the_impact_pending_and_only_sends_its_estimate(
    demo, django_capture_on_commit_callbacks
) -> None:
    with django_capture_on_commit_callbacks(execute=False):  # what it sends is not run
        run_cycles(demo, FIRST_FRAGMENTATION_CYCLE)

    rec = binpack_proposal(demo)
    assert rec.impact["method"] == "pending"
    assert rec.impact["verdict"] == PENDING
    assert rec.impact["preselect"] is False
    assert rec.impact["queued_at"]  # its estimate was sent
    assert rec.impact["plan"]["changes"] == [
        {"type": "SetPlacement", "pool": "a100", "placement": "binpack"}
    ]
    assert not ReplayOutcome.objects.exists()  # no replay ran in the cycle


def test_the_impact_task_fills_the_pending_impact_in(demo) -> None:
    run_cycles(demo, FIRST_FRAGMENTATION_CYCLE)
    rec = binpack_proposal(demo)

    result = estimate_impact(rec.pk)

    rec.refresh_from_db()
    assert result["outcome"] == "estimated"
    assert rec.impact["method"] == "simulated"
    assert rec.impact["model"] == "reduced"
    assert rec.impact["verdict"] == result["verdict"] != PENDING
    assert {m["metric"] for m in rec.impact["metrics"]} >= {"allocation_util", "fragmentation_gpus"}
    assert "plan" not in rec.impact
    assert rec.impact["summary"]  # what the cycle stored beside the pending impact stays


def test_a_second_estimate_of_the_same_snapshot_and_change_replays_nothing(demo) -> None:
    run_cycles(demo, FIRST_FRAGMENTATION_CYCLE)
    rec = binpack_proposal(demo)
    twin_impact = dict(rec.impact)
    estimate_impact(rec.pk)
    rec.state = "superseded"
    rec.save(update_fields=["state"])
    twin = make_recommendation(
        demo,
        "placement-policy",
        "pool:a100",
        rec.change,
        impact=twin_impact,
        proposed_as_of=rec.proposed_as_of,
    )

    estimate_impact(twin.pk)

    twin.refresh_from_db()
    assert twin.impact["estimate"]["replays_run"] == 0
    assert twin.impact["estimate"]["replays_cached"] == 2  # current and proposed setting
    assert ReplayOutcome.objects.count() == 2


def test_a_cycle_sends_at_most_the_bound_the_most_gpu_hours_at_stake_first(
    lab, settings, django_capture_on_commit_callbacks
) -> None:
    settings.GPUOBS_IMPACT_MAX_PER_CYCLE = 2
    small, large, middle = (
        pending(lab, "queue:a", 1.0),
        pending(lab, "queue:b", 50.0),
        pending(lab, "queue:c", 10.0),
    )

    with django_capture_on_commit_callbacks(execute=False) as sent:
        count = enqueue_impact_estimates(lab)

    queued = {r.pk for r in Recommendation.objects.filter(cluster=lab) if r.impact.get("queued_at")}
    assert count == len(sent) == 2
    assert queued == {large.pk, middle.pk}
    assert small.pk not in queued


def test_an_estimate_sent_is_not_sent_again_while_it_is_queued(
    lab, django_capture_on_commit_callbacks
) -> None:
    pending(lab, "queue:a", 5.0)
    with django_capture_on_commit_callbacks(execute=False):
        enqueue_impact_estimates(lab)

    with django_capture_on_commit_callbacks(execute=False) as again:
        count = enqueue_impact_estimates(lab)

    assert count == 0
    assert not again


def test_page_and_api_say_impact_pending(lab, bob) -> None:
    rec = pending(lab, "queue:a", 5.0)
    client = logged_in_client(bob)

    page = client.get(f"/clusters/{lab.name}/recommendations/{rec.pk}/")
    api = client.get(f"/api/recommendations/{rec.pk}/")

    assert page.status_code == 200
    assert PENDING in page.content.decode()
    assert api.json()["verdict"] == PENDING


def test_the_estimate_task_goes_to_the_impact_queue() -> None:
    assert queue_for_task("diagnosis.tasks.estimate_impact") == "impact"


def test_a_broker_that_refuses_the_send_leaves_the_impact_pending(
    lab, monkeypatch, django_capture_on_commit_callbacks
) -> None:
    rec = pending(lab, "queue:a", 5.0)

    def refuse(*args, **kwargs):
        raise OperationalError("Error 111 connecting to 127.0.0.1:6379. Connection refused.")

    monkeypatch.setattr(estimate_impact, "apply_async", refuse)
    with django_capture_on_commit_callbacks(execute=True):
        count = enqueue_impact_estimates(lab)  # does not raise into the cycle

    rec.refresh_from_db()
    assert count == 1
    assert rec.impact["method"] == "pending"  # a later cycle sends it again
