"""The pure pieces under the recommendations: verdicts on crafted replay outcomes, fair share,
weight steps, the generator registry."""

from __future__ import annotations

import pytest

from diagnosis.core.recommend.base import (
    HARMS,
    IMPROVES,
    NO_EFFECT,
    QUEUE_WEIGHT,
    FindingRef,
    Generator,
    ImpactPlan,
    Recommendation,
)
from diagnosis.core.recommend.builtin.queue_weight import raised_weight
from diagnosis.core.recommend.fair_share import queue_shares, water_fill
from diagnosis.core.recommend.impact import (
    ALLOCATION_UTIL,
    QUEUE_SHARE,
    QUEUE_WAIT_P95,
    SeedOutcome,
    assess,
    compare,
)
from diagnosis.core.recommend.registry import DuplicateGeneratorError, all_generators, collect
from diagnosis.core.simulate.policy import SetQueueWeight
from tests.support.builders import SnapshotBuilder

HOUR = 3600.0


def outcome(seed: int, util: float, *, wait_a: float = 600.0, share_b: float = 0.3) -> SeedOutcome:
    return SeedOutcome(
        seed=seed,
        allocation_util=util,
        fragmentation_gpus=4.0,
        job_waits={"j1": (wait_a, True)},
        queue_wait_p95_s={"a": wait_a, "b": 900.0},
        queue_share={"a": 1 - share_b, "b": share_b},
    )


PLAN = ImpactPlan(
    changes=(SetQueueWeight("b", 2.0),),
    jobs=("j1",),
    queues=("a", "b"),
    fair_share={"a": 0.5, "b": 0.5},
)


# -- one metric ----------------------------------------------------------------------------------


def test_a_consistent_gain_beyond_the_noise_improves():
    row = compare(ALLOCATION_UTIL, [0.60, 0.62, 0.61], [0.66, 0.69, 0.67], "cluster")
    assert row["verdict"] == IMPROVES
    assert row["delta"]["min"] == pytest.approx(0.06)
    assert row["delta"]["max"] == pytest.approx(0.07)


def test_a_consistent_loss_harms():
    row = compare(QUEUE_WAIT_P95, [1000.0, 1100.0, 900.0], [2000.0, 2300.0, 1900.0], "queue:a")
    assert row["verdict"] == HARMS


def test_a_change_within_the_seeds_noise_is_no_measurable_effect():
    row = compare(ALLOCATION_UTIL, [0.60, 0.60, 0.60], [0.70, 0.55, 0.58], "cluster")
    assert row["delta"]["mean"] > ALLOCATION_UTIL.floor
    assert row["verdict"] == NO_EFFECT


def test_a_change_below_the_metric_floor_is_no_measurable_effect():
    row = compare(ALLOCATION_UTIL, [0.600, 0.600], [0.603, 0.603], "cluster")
    assert row["noise"] == 0.0
    assert row["verdict"] == NO_EFFECT


def test_a_share_is_judged_by_its_distance_to_the_fair_share():
    toward = compare(QUEUE_SHARE, [0.8, 0.8], [0.6, 0.6], "queue:a", target=0.5)
    away = compare(QUEUE_SHARE, [0.4, 0.4], [0.2, 0.2], "queue:b", target=0.5)
    assert (toward["verdict"], away["verdict"]) == (IMPROVES, HARMS)


# -- a whole assessment ----------------------------------------------------------------------------


def test_a_predicted_harm_is_flagged():
    current = [outcome(s, 0.80) for s in range(3)]
    proposed = [outcome(s, 0.70 + 0.01 * s) for s in range(3)]
    assessment = assess(PLAN, current, proposed, 3 * HOUR)
    assert assessment.verdict == HARMS
    assert assessment.harm == (
        "allocation utilization: 80.0% → 71.0% (-9.0 pts; seeds -10.0 pts..-8.0 pts)",
    )
    assert assessment.headline.startswith("predicted harm: allocation utilization")


def test_harm_outweighs_an_improvement():
    current = [outcome(s, 0.80, share_b=0.2) for s in range(3)]
    proposed = [outcome(s, 0.70, share_b=0.4) for s in range(3)]
    assessment = assess(PLAN, current, proposed, 3 * HOUR)
    verdicts = {(r["metric"], r["subject"]): r["verdict"] for r in assessment.rows}
    assert verdicts[("queue_share", "queue:b")] == IMPROVES
    assert assessment.verdict == HARMS


def test_a_longer_wait_of_a_queue_above_its_fair_share_is_a_tradeoff_not_a_harm():
    plan = ImpactPlan(
        changes=PLAN.changes,
        queues=("a", "b"),
        fair_share={"a": 0.5, "b": 0.5},
        tradeoff_queues=frozenset({"a"}),
    )
    current = [outcome(s, 0.9, wait_a=600.0, share_b=0.2) for s in range(3)]
    proposed = [outcome(s, 0.9, wait_a=1800.0 + s, share_b=0.4) for s in range(3)]
    assessment = assess(plan, current, proposed, 3 * HOUR)
    assert assessment.harm == ()
    assert [t.split(":")[0] for t in assessment.tradeoffs] == ["wait p95 of queue"]
    assert "queue:a" in assessment.tradeoffs[0]
    assert assessment.verdict == IMPROVES


def test_identical_replays_predict_no_measurable_effect():
    same = [outcome(s, 0.75) for s in range(3)]
    assessment = assess(PLAN, same, same, 3 * HOUR)
    assert assessment.verdict == NO_EFFECT
    assert assessment.headline == "no measurable effect predicted over 3.0 h (3 seed(s))"
    assert {r["verdict"] for r in assessment.rows} == {NO_EFFECT}


def test_a_recommendation_json_has_no_nan():
    recommendation = Recommendation(
        generator="queue-weight",
        kind=QUEUE_WEIGHT,
        target="queue:b",
        change={"from": 1, "to": 2},
        findings=(),
        summary="s",
        advisory=None,
        impact={"metrics": [{"value": float("nan")}]},
        preselect=False,
        basis={"ratio": float("inf")},
    )
    out = recommendation.as_dict()
    assert out["impact"]["metrics"][0]["value"] is None
    assert out["basis"]["ratio"] is None


# -- weights and fair share --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("current", "factor", "expected"),
    [
        (1, 1.3, 2),  # at least one step up
        (4, 1.3, 5),
        (10, 1.5, 15),
        (4, 5.0, 8),  # at most doubled
        (3, 0.9, None),  # never lowered
        (65535, 2.0, None),  # top of Volcano's range
        (0, 2.0, 1),  # into the scheduler's domain
    ],
)
def test_raised_weight_steps(current, factor, expected):
    assert raised_weight(current, factor) == expected


def test_water_filling_gives_what_a_capped_queue_leaves_to_the_others():
    fair = water_fill(100, {"a": 1, "b": 1, "c": 2}, {"a": 10, "b": 80, "c": 80})
    assert fair["a"] == pytest.approx(10)
    assert fair["b"] == pytest.approx(30)
    assert fair["c"] == pytest.approx(60)


def test_water_filling_shares_leftovers_with_queues_without_entitlement():
    fair = water_fill(100, {"a": 1}, {"a": 40, "z": 100})
    assert fair == pytest.approx({"a": 40, "z": 60})


def test_fair_share_uses_deserved_gpus_when_every_queue_with_demand_sets_them():
    builder = SnapshotBuilder().pool("a100", nodes=4)
    builder.queue("a", weight=1, deserved_gpus=24).queue("b", weight=1, deserved_gpus=8)
    builder.job("a1", tenant="a", pods=4, nodes=[f"a100-{i:03d}" for i in range(4)])
    builder.job("b1", tenant="b", state="pending", pods=4, waited="1h")
    shares = queue_shares(builder.build())
    assert shares.basis == "deserved"
    assert shares.capacity_gpus == 32
    assert shares.queues["a"].fair_gpus == pytest.approx(24)
    assert shares.queues["b"].fair_gpus == pytest.approx(8)
    assert shares.queues["b"].ratio == 0.0
    assert shares.queues["a"].ratio == pytest.approx(32 / 24)


def test_fair_share_falls_back_to_weights_and_counts_unlisted_queues_at_weight_1():
    builder = SnapshotBuilder().pool("a100", nodes=4)
    builder.queue("a", weight=3, deserved_gpus=24)
    builder.job("a1", tenant="a", pods=4, nodes=[f"a100-{i:03d}" for i in range(4)])
    builder.job("x1", tenant="x", state="pending", pods=4, waited="1h")
    shares = queue_shares(builder.build())
    assert shares.basis == "weight"
    assert not shares.queues["x"].listed
    assert shares.queues["a"].fair_gpus == pytest.approx(24)
    assert shares.queues["x"].fair_gpus == pytest.approx(8)


# -- registry ----------------------------------------------------------------------------------


def test_every_generator_is_registered_under_its_stable_id():
    assert set(all_generators()) == {
        "placement-policy",
        "queue-weight",
        "drain-node",
        "drain-row-remap",
        "gang-release",
        "advisory",
    }


def test_a_duplicate_generator_id_is_an_error():
    one = Generator("twin", QUEUE_WEIGHT, "t", (), "d", lambda context: [])
    with pytest.raises(DuplicateGeneratorError, match="twin"):
        collect([one, one])


def test_stored_fields_match_the_model_and_keep_everything_else_in_the_impact():
    recommendation = Recommendation(
        generator="drain-node",
        kind="drain-node",
        target="node:n1",
        change={"from": "ready", "to": "drained", "reason": "gpuobs: Xid 79"},
        findings=(FindingRef("xid", "gpu:n1/3", "critical"),),
        summary="drain n1",
        advisory=None,
        impact={"method": "static", "verdict": "not simulated"},
        preselect=True,
        tradeoffs=("8 GPUs out",),
    )
    stored = recommendation.stored_fields()
    assert set(stored) == {"kind", "target", "change", "impact"}
    assert stored["change"]["reason"] == "gpuobs: Xid 79"
    assert stored["impact"]["preselect"] is True
    assert stored["impact"]["tradeoffs"] == ["8 GPUs out"]
    assert stored["impact"]["method"] == "static"
    assert recommendation.finding_keys() == [("xid", "gpu:n1/3")]
