"""Recommendation generators end to end: snapshot -> rules -> drafts -> simulated impact."""

from __future__ import annotations

import json

import pytest

from diagnosis.core.recommend.base import (
    ADVISORY,
    DRAIN_NODE,
    HARMS,
    IMPROVES,
    NO_EFFECT,
    NOT_SIMULATED,
    PLACEMENT_POLICY,
    QUEUE_WEIGHT,
    Draft,
    Generator,
    ImpactPlan,
    RecommendSettings,
)
from diagnosis.core.recommend.engine import recommend
from diagnosis.core.recommend.registry import all_generators
from diagnosis.core.simulate.policy import SetPlacement
from diagnosis.core.simulate.scenarios import rule_showcase_scenario
from diagnosis.core.snapshot import load
from tests.support.builders import SnapshotBuilder

VERDICTS = {IMPROVES, NO_EFFECT, HARMS}


def of_kind(run, kind: str) -> list:
    return [r for r in run.recommendations if r.kind == kind]


def scattered_pool(placement: str | None = "spread") -> SnapshotBuilder:
    """8 nodes x 8 GPUs, each with 5 GPUs busy with 1-GPU jobs (24 GPUs free, 3 per node),
    and a 2 x 8-GPU job pending for 2 h: fragmentation-blocked."""
    builder = SnapshotBuilder().pool("a100", nodes=8)
    if placement is not None:
        builder.placement("a100", placement)
    for n in range(8):
        for g in range(5):
            k = n * 5 + g
            builder.job(
                f"small-{k}", gpus_per_pod=1, node=f"a100-{n:03d}", waited=f"{20 + 13 * (k % 9)}m"
            )
    return builder.job("big", state="pending", pods=2, gpus_per_pod=8, waited="2h", tenant="b")


def starved_tenant(*, waited_h: float = 5.0, stream: bool = True) -> SnapshotBuilder:
    """Queues team-a (weight 3) and team-b (weight 1) deserve 32 GPUs each. team-a holds all 64
    with 8-GPU jobs submitted after team-b's six pending ones (waiting ``waited_h``). With
    ``stream``, both kept submitting over the last 3 h: team-a 60 jobs of 20 min that ran, team-b
    20 that wait -- a backlog the replay's resampled arrivals keep up."""
    builder = SnapshotBuilder().pool("a100", nodes=8)
    builder.queue("team-a", weight=3, deserved_gpus=32).queue("team-b", weight=1, deserved_gpus=32)
    for i in range(8):
        builder.job(
            f"a{i}", tenant="team-a", node=f"a100-{i:03d}", waited=f"{45 - 5 * i}m", ran="5m"
        )
    for i in range(6):
        builder.job(f"b{i}", state="pending", tenant="team-b", waited=f"{waited_h * 60 - i}m")
    if stream:
        for i in range(60):
            builder.job(
                f"a-done-{i}",
                state="completed",
                tenant="team-a",
                waited=f"{178 - 2 * i}m",
                started=f"{177 - 2 * i}m" if i < 59 else "56m",
                ended=f"{157 - 2 * i}m" if i < 59 else "36m",
            )
        for i in range(20):
            builder.job(f"b-new-{i}", state="pending", tenant="team-b", waited=f"{175 - 8 * i}m")
    return builder


@pytest.fixture(scope="module")
def fragmented_run():
    return recommend(scattered_pool().build())


@pytest.fixture(scope="module")
def starved_run():
    return recommend(starved_tenant().build())


@pytest.fixture(scope="module")
def showcase_run():
    scenario = rule_showcase_scenario(0)
    document = scenario.build().snapshot(scenario.snapshot_at)
    return recommend(load(document), settings=RecommendSettings(simulate=False))


# -- placement-policy --------------------------------------------------------------------------


def test_fragmented_pool_under_spread_gets_binpack(fragmented_run):
    [placement] = of_kind(fragmented_run, PLACEMENT_POLICY)
    assert placement.target == "pool:a100"
    assert dict(placement.change) == {"from": "spread", "to": "binpack"}
    assert [(f.rule, f.subject) for f in placement.findings] == [("fragmentation", "pool:a100")]
    assert placement.scheduler_change() == {
        "kind": "placement-policy",
        "target": "pool:a100",
        "to": "binpack",
    }


def test_binpack_impact_reports_every_metric_with_a_spread(fragmented_run):
    [placement] = of_kind(fragmented_run, PLACEMENT_POLICY)
    impact = placement.impact
    assert impact["method"] == "simulated"
    assert impact["seeds"] == [0, 1, 2]
    rows = {(m["metric"], m["subject"]): m for m in impact["metrics"]}
    assert set(rows) == {
        ("allocation_util", "cluster"),
        ("fragmentation_gpus", "cluster"),
        ("blocked_wait_s", "job:big"),
        ("blocked_started", "job:big"),
        ("queue_wait_p95_s", "queue:b"),
        ("queue_share", "queue:b"),
    }
    for row in rows.values():
        assert set(row["delta"]) == {"mean", "min", "max", "stdev"}
        assert row["verdict"] in VERDICTS


def test_binpack_is_predicted_to_start_the_blocked_job_and_is_preselected(fragmented_run):
    [placement] = of_kind(fragmented_run, PLACEMENT_POLICY)
    rows = {m["metric"]: m for m in placement.impact["metrics"]}
    assert rows["blocked_started"]["current"]["mean"] == 0.0
    assert rows["blocked_started"]["proposed"]["mean"] == 1.0
    assert rows["allocation_util"]["verdict"] == IMPROVES
    assert placement.verdict == IMPROVES
    assert placement.preselect
    assert placement.harm == ()


def test_pool_already_under_binpack_gets_no_placement_recommendation():
    run = recommend(scattered_pool("binpack").build())
    assert [f.subject for f in run.diagnosis.by_rule("fragmentation")] == ["pool:a100"]
    assert of_kind(run, PLACEMENT_POLICY) == []


def test_unreported_placement_is_proposed_from_none():
    run = recommend(scattered_pool(None).build(), settings=RecommendSettings(simulate=False))
    [placement] = of_kind(run, PLACEMENT_POLICY)
    assert dict(placement.change) == {"from": None, "to": "binpack"}
    assert "assumed" in placement.summary


def partial_gangs(count: int) -> SnapshotBuilder:
    """``count`` 3 x 8-GPU gangs holding one node each for 30 min; two more nodes half busy, so
    no gang can complete and none would with another's GPUs (no deadlock)."""
    builder = SnapshotBuilder().pool("a100", nodes=count + 2).placement("a100", "spread")
    for i in range(count):
        builder.job(
            f"gang-{i}",
            state="pending",
            pods=3,
            gpus_per_pod=8,
            bound=1,
            node=f"a100-{i:03d}",
            waited="40m",
            partial_since="30m",
        )
    for i in range(count, count + 2):
        builder.job(f"half-{i}", gpus_per_pod=4, node=f"a100-{i:03d}", waited="1h")
    return builder


def test_repeated_partial_gang_holds_propose_binpack():
    run = recommend(partial_gangs(2).build(), settings=RecommendSettings(simulate=False))
    [placement] = of_kind(run, PLACEMENT_POLICY)
    assert {(f.rule, f.subject) for f in placement.findings} == {
        ("gang-partial-hold", "job:gang-0"),
        ("gang-partial-hold", "job:gang-1"),
    }


def test_a_single_partial_gang_hold_proposes_nothing():
    run = recommend(partial_gangs(1).build(), settings=RecommendSettings(simulate=False))
    assert [f.subject for f in run.diagnosis.by_rule("gang-partial-hold")] == ["job:gang-0"]
    assert of_kind(run, PLACEMENT_POLICY) == []


# -- drain-node --------------------------------------------------------------------------------


def xid_cluster(*codes: int, node_state: str = "ready") -> SnapshotBuilder:
    builder = SnapshotBuilder().pool("a100", nodes=3)
    builder.doc["nodes"][1]["state"] = node_state
    builder.job("victim", node="a100-001", waited="2h", tenant="team-v")
    builder.job("bystander", gpus_per_pod=4, node="a100-002", waited="2h")
    builder.gpu("a100-001", 3, xid=[(code, f"{5 + i}m") for i, code in enumerate(codes)])
    return builder


def test_xid_79_drains_its_node_with_the_reason():
    run = recommend(xid_cluster(79).build())
    [drain] = of_kind(run, DRAIN_NODE)
    assert drain.target == "node:a100-001"
    assert drain.change["from"] == "ready"
    assert drain.change["to"] == "drained"
    assert drain.change["reason"] == "gpuobs: Xid 79 (GPU has fallen off the bus) on a100-001/3"
    assert [(f.rule, f.subject) for f in drain.findings] == [("xid", "gpu:a100-001/3")]
    assert drain.preselect


def test_drain_impact_counts_the_capacity_and_the_jobs_to_evict():
    run = recommend(xid_cluster(79).build())
    [drain] = of_kind(run, DRAIN_NODE)
    impact = drain.impact
    assert impact["method"] == "static"
    assert impact["verdict"] == NOT_SIMULATED
    assert impact["gpus_removed"] == 8
    assert impact["pool_gpus"] == 24
    assert [(j["id"], j["on_failing_gpu"]) for j in impact["jobs_to_evict"]] == [("victim", True)]
    assert any("victim" in t for t in drain.tradeoffs)


@pytest.mark.parametrize("codes", [(13,), (31,), (43,), (13, 31, 43)])
def test_application_xids_alone_never_drain(codes):
    run = recommend(xid_cluster(*codes).build())
    assert of_kind(run, DRAIN_NODE) == []


def test_application_xid_beside_a_critical_one_drains_for_the_critical_one():
    run = recommend(xid_cluster(13, 48).build())
    [drain] = of_kind(run, DRAIN_NODE)
    assert drain.change["reason"] == "gpuobs: Xid 48 (Double Bit ECC Error) on a100-001/3"


def test_a_drained_node_is_not_drained_again():
    run = recommend(xid_cluster(79, node_state="drained").build())
    assert of_kind(run, DRAIN_NODE) == []


# -- queue-weight ------------------------------------------------------------------------------


def test_starved_tenant_queue_gets_a_doubled_weight(starved_run):
    [weight] = of_kind(starved_run, QUEUE_WEIGHT)
    assert weight.target == "queue:team-b"
    assert dict(weight.change) == {"from": 1, "to": 2}
    assert {f.rule for f in weight.findings} == {"starvation"}
    assert len(weight.findings) == 6


def test_queue_weight_changes_only_the_starved_queue(starved_run):
    assert [r.target for r in of_kind(starved_run, QUEUE_WEIGHT)] == ["queue:team-b"]
    [weight] = of_kind(starved_run, QUEUE_WEIGHT)
    assert weight.basis["other_weights_unchanged"] == {"team-a": 3}


def test_queue_weight_impact_reports_the_affected_queues(starved_run):
    [weight] = of_kind(starved_run, QUEUE_WEIGHT)
    impact = weight.impact
    assert impact["method"] == "simulated"
    assert impact["queue_order"] == "fair-share"
    subjects = {(m["metric"], m["subject"]) for m in impact["metrics"]}
    for queue in ("queue:team-a", "queue:team-b"):
        assert ("queue_wait_p95_s", queue) in subjects
        assert ("queue_share", queue) in subjects
    share = next(m for m in impact["metrics"] if m["subject"] == "queue:team-b" and "target" in m)
    assert share["target"] == 0.5


def test_a_higher_weight_is_predicted_to_move_the_share_toward_fair(starved_run):
    [weight] = of_kind(starved_run, QUEUE_WEIGHT)
    share = next(
        m
        for m in weight.impact["metrics"]
        if m["metric"] == "queue_share" and m["subject"] == "queue:team-b"
    )
    assert share["proposed"]["mean"] > share["current"]["mean"]
    assert share["verdict"] == IMPROVES
    assert weight.preselect


def test_a_share_starvation_is_judged_against_deserved_gpus_when_weights_say_otherwise():
    """team-a (weight 10, nothing deserved) holds 56 GPUs; team-b (weight 1, deserves 32) holds
    8: above its weighted fair share (64 / 11), below what it deserves."""
    builder = SnapshotBuilder().pool("a100", nodes=8)
    builder.queue("team-a", weight=10).queue("team-b", weight=1, deserved_gpus=32)
    for i in range(7):
        builder.job(f"a{i}", tenant="team-a", node=f"a100-{i:03d}", waited=f"{60 - i}m")
    builder.job("b-run", tenant="team-b", node="a100-007", waited="6h")
    for i in range(3):
        builder.job(f"b{i}", state="pending", tenant="team-b", waited=f"{300 - i}m")
    run = recommend(builder.build(), settings=RecommendSettings(simulate=False))
    assert {f.evidence["cause"] for f in run.diagnosis.by_rule("starvation")} == {"share"}
    [weight] = of_kind(run, QUEUE_WEIGHT)
    assert dict(weight.change) == {"from": 1, "to": 2}
    assert weight.basis["target_gpus"] == 32


def test_fairness_ratio_below_threshold_with_waiting_demand_raises_the_weight():
    run = recommend(
        starved_tenant(waited_h=1, stream=False).build(), settings=RecommendSettings(simulate=False)
    )
    assert run.diagnosis.by_rule("starvation") == []
    [weight] = of_kind(run, QUEUE_WEIGHT)
    assert weight.target == "queue:team-b"
    assert weight.findings == ()
    assert weight.basis["fairness_ratio"] == 0.0


def test_fairness_trigger_waits_for_the_demand_to_age():
    run = recommend(
        starved_tenant(waited_h=0.4, stream=False).build(),
        settings=RecommendSettings(simulate=False),
    )
    assert of_kind(run, QUEUE_WEIGHT) == []


# -- healthy, advisory, engine -----------------------------------------------------------------


def test_healthy_cluster_gets_no_recommendations():
    builder = SnapshotBuilder().pool("a100", nodes=4)
    builder.queue("team-a", weight=1).queue("team-b", weight=1)
    for i in range(4):
        builder.job(
            f"train-{i}",
            tenant="team-a" if i % 2 else "team-b",
            node=f"a100-{i:03d}",
            waited="3h",
            util=0.9,
            fb_used_frac=0.7,
            tensor_active=0.5,
            tflops=150.0,
        )
    run = recommend(builder.build())
    assert run.recommendations == ()
    assert run.errors == ()


ADVISORY_RULES = {
    "gang-deadlock": ("pool:", "gang"),
    "topology-misplacement": ("job:", "topology-aware"),
    "data-starvation": ("job:", "data-loader"),
    "low-mfu": ("job:", "MFU"),
    "idle-allocation": ("job:", "idle-reclaim"),
}


@pytest.mark.parametrize("rule", sorted(ADVISORY_RULES))
def test_advisory_rules_get_advice_for_someone(showcase_run, rule):
    prefix, words = ADVISORY_RULES[rule]
    advice = [r for r in of_kind(showcase_run, ADVISORY) if any(f.rule == rule for f in r.findings)]
    assert advice
    for recommendation in advice:
        assert recommendation.target.startswith(prefix)
        assert recommendation.advisory.startswith("For ")
        assert words in recommendation.advisory
        assert recommendation.change == {}
        assert recommendation.scheduler_change() is None
        assert not recommendation.preselect


def test_every_recommendation_is_plain_json(showcase_run):
    text = json.dumps(showcase_run.as_dict(), allow_nan=False)
    assert json.loads(text)["recommendations"]


def test_a_predicted_harm_is_flagged_and_not_preselected():
    """A generator that proposes spread for the scattered pool under binpack: the replay
    predicts the blocked job never starts."""

    def spread_it(context):
        return [
            Draft(
                kind=PLACEMENT_POLICY,
                target="pool:a100",
                change={"from": "binpack", "to": "spread"},
                findings=(),
                summary="spread the pool",
                plan=ImpactPlan(changes=(SetPlacement("a100", "spread"),), jobs=("big",)),
            )
        ]

    generators = {"spread": Generator("spread", PLACEMENT_POLICY, "t", (), "d", spread_it)}
    run = recommend(scattered_pool("binpack").build(), generators=generators)
    [recommendation] = run.recommendations
    assert recommendation.verdict == HARMS
    assert any(h.startswith("share started of job:big") for h in recommendation.harm)
    assert recommendation.impact["headline"].startswith("predicted harm: ")
    assert not recommendation.preselect


def test_a_failing_generator_is_an_error_value_and_hides_nothing():
    def broken(context):
        raise RuntimeError("boom")

    generators = {"broken": Generator("broken", ADVISORY, "t", (), "d", broken), **all_generators()}
    run = recommend(xid_cluster(79).build(), generators=generators)
    assert [e.as_dict() for e in run.errors] == [
        {"generator": "broken", "error": "RuntimeError", "message": "boom"}
    ]
    assert of_kind(run, DRAIN_NODE)


def test_same_seeds_give_the_same_recommendations():
    snapshot = scattered_pool().build()
    settings = RecommendSettings(seeds=(3, 4))
    first = recommend(snapshot, settings=settings)
    again = recommend(snapshot, settings=settings)
    assert [r.as_dict() for r in first.recommendations] == [
        r.as_dict() for r in again.recommendations
    ]
    assert first.recommendations[0].impact["seeds"] == [3, 4]
