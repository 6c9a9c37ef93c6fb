"""The autopilot on the demo (the simulator's seed scenario: 128 nodes x 8 A100 in pool a100, an
Xid 79 on gpu-100 GPU 3 at 2:00; diagnosis/core/simulate/scenarios.py), 10 simulated minutes a
cycle, writes on, with carol's drain policy for Xid 79 in enforce, approved by dave:

- the node is drained within the cycle whose snapshot first shows the Xid (the step runs after
  that cycle commits), through the workflow, and the next snapshot shows it drained;
- its incident's timeline says the policy drained it, who wrote and approved the policy, and
  how to undo it; the jobs the drain preempted are noted as preempted by the policy's drain;
- a second fault in the same pool within the hour is held back by the budget;
- a storm of 50 Xid drains at once drains one node (the pool's budget), the 49 others held;
- the replay preview over the stored cycles lists the drain the policy would have made.
"""

from __future__ import annotations

import pytest

from diagnosis.actions.autopilot.candidates import candidate_of
from diagnosis.actions.autopilot.policies import terms_of
from diagnosis.actions.autopilot.preview import replay_preview
from diagnosis.actions.records.cycles import run_cluster_cycle
from diagnosis.models import AutopilotDecision, Cluster, Incident, Recommendation
from tests.support.autopilot import approved_policy, step, xid_drain
from tests.support.records import seed_demo_cluster
from tests.support.world import logged_in_client

pytestmark = pytest.mark.django_db

XID_AT_CYCLE = 12  # 2:00 at 10 minutes a cycle


def cycle(cluster: Cluster, on_commit) -> object:
    """One cycle with what it sends on commit run in-process (the autopilot step, the apply)."""
    with on_commit(execute=True):
        done = run_cluster_cycle(Cluster.objects.get(pk=cluster.pk))
    assert done.ok, done.error
    return done


def node_state(cluster: Cluster, node: str) -> str:
    document = cluster.snapshots.latest("as_of").load_document()
    return next(n["state"] for n in document["nodes"] if n["name"] == node)


@pytest.fixture
def demo(celery_eager):
    with seed_demo_cluster("demo-autopilot", 600) as cluster:
        Cluster.objects.filter(pk=cluster.pk).update(dry_run=False)
        yield cluster


def test_the_demo_xid_79_node_is_drained_within_one_cycle_and_a_second_fault_is_held(
    demo, carol, dave, erin, django_capture_on_commit_callbacks
) -> None:
    policy = approved_policy(carol, dave)
    drain = None
    for _ in range(XID_AT_CYCLE + 4):
        cycle(demo, django_capture_on_commit_callbacks)
        drain = Recommendation.objects.filter(
            cluster=demo, kind="drain-node", target="node:gpu-100"
        ).first()
        if drain is not None:
            break
    assert drain is not None, "no drain of gpu-100 was proposed"

    # within the cycle that proposed it: approved by the policy and applied
    assert drain.state == "applied", drain.status_message
    assert (drain.requested_by, drain.approved_by) == (carol, dave)
    assert AutopilotDecision.objects.get(recommendation=drain).outcome == "applied"

    cycle(demo, django_capture_on_commit_callbacks)
    assert node_state(demo, "gpu-100") == "drained"

    incident = Incident.objects.get(cluster=demo, node="gpu-100", xid_code=79)
    by_policy = incident.history.get(actor="policy:xid-drain", kind="mitigating")
    assert "written by carol, approved by dave" in by_policy.text
    assert f"Roll back recommendation #{drain.pk}" in by_policy.text
    assert incident.drain_id == drain.pk
    evicted = list(incident.history.filter(kind="evicted").values_list("text", flat=True))
    expected = incident.details["drain"]["job_ids"]
    assert expected, "the demo's gpu-100 runs jobs at 2:00"
    assert evicted
    assert all(text.endswith("(policy xid-drain)") for text in evicted)
    page = logged_in_client(erin).get(f"/clusters/{demo.name}/incidents/{incident.pk}/")
    assert "by policy xid-drain (version 1, written by carol, approved by dave)" in (
        page.content.decode()
    )

    # a second fault in the same pool within the hour: held by the budget
    second = xid_drain(demo, "gpu-101")
    cycle(demo, django_capture_on_commit_callbacks)
    second.refresh_from_db()
    held = AutopilotDecision.objects.get(recommendation=second)
    assert second.state == "proposed"
    assert (held.outcome, held.guard) == ("held", "budget-pool-hour")
    assert "pool a100 had 1 of at most 1 drain-node action(s)" in held.reason

    # the replay preview over the stored history lists the drain
    preview = replay_preview(terms_of(policy), policy_id=policy.pk)
    assert [row["target"] for row in preview["would_apply"]] == ["node:gpu-100"]
    assert [(r["target"], r["guard"]) for r in preview["held"]] == [
        ("node:gpu-101", "budget-pool-hour")
    ]


def test_a_storm_of_fifty_xids_drains_one_node_of_the_pool(
    demo, carol, dave, django_capture_on_commit_callbacks
) -> None:
    approved_policy(carol, dave)
    cycle(demo, django_capture_on_commit_callbacks)
    nodes = [n["name"] for n in demo.snapshots.latest("as_of").load_document()["nodes"]][:50]
    storm = [xid_drain(demo, node) for node in nodes]

    stats = step(demo, django_capture_on_commit_callbacks)

    assert (stats["applied"], stats["held"]) == (1, 49)
    states = Recommendation.objects.filter(pk__in=[r.pk for r in storm]).values_list(
        "state", flat=True
    )
    assert sorted(states).count("applied") == 1
    guards = set(AutopilotDecision.objects.filter(outcome="held").values_list("guard", flat=True))
    assert guards == {"budget-pool-hour"}
    cycle(demo, django_capture_on_commit_callbacks)
    drained = [n for n in nodes if node_state(demo, n) == "drained"]
    assert drained == [nodes[0]]


def test_a_gang_release_policy_releases_only_a_gang_held_long_and_large_enough(
    carol, dave, celery_eager, django_capture_on_commit_callbacks
) -> None:
    # the two sweep gangs (40 x 8 GPUs each) bind pod by pod from ~1:50 and deadlock ~2:40 with
    # about 200 GPUs each (tests/app/workflow/test_verification_gang_release.py); 20 simulated
    # minutes a cycle. The earlier partial-hold releases (120 GPUs, 40 min) are not the policy's.
    with seed_demo_cluster("demo-autopilot-gangs", 1200) as demo:
        Cluster.objects.filter(pk=demo.pk).update(dry_run=False)
        approved_policy(
            carol,
            dave,
            name="gang-release",
            kind="gang-release",
            condition={"min_gpus": 150, "min_hold_s": 3600},
        )
        applied = None
        for _ in range(10):
            cycle(demo, django_capture_on_commit_callbacks)
            applied = AutopilotDecision.objects.filter(outcome="applied").first()
            if applied is not None:
                break
        assert applied is not None, "the policy released no gang"

        rec = applied.recommendation
        assert rec.kind == "gang-release"
        assert rec.state == "applied", rec.status_message
        assert rec.apply_result["before"] == "partial"
        facts = candidate_of(rec, demo.name)
        assert facts.gpus_held >= 150
        assert facts.hold_s >= 3600
        # the releases proposed before, smaller or younger, were not the policy's
        earlier = Recommendation.objects.filter(kind="gang-release", pk__lt=rec.pk)
        assert not AutopilotDecision.objects.filter(recommendation__in=earlier).exists()
