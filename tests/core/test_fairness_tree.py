"""Fair shares down a queue hierarchy (Volcano/KAI parent queues, Kueue cohorts): the water-fill
divides at each level, and a queue alone under its parent has its share set at the parent's
level, so the queue-weight recommendation names the parent's (or the cohort's) weight."""

from __future__ import annotations

import pytest

from diagnosis.core.fairness import tree_water_fill, water_fill
from diagnosis.core.recommend.base import QUEUE_WEIGHT, RecommendSettings
from diagnosis.core.recommend.engine import recommend
from tests.support.builders import SnapshotBuilder


def test_without_parents_the_tree_is_the_flat_water_fill() -> None:
    weights, demand = {"a": 3.0, "b": 1.0, "c": 1.0}, {"a": 10.0, "b": 2.0, "c": 9.0}
    assert tree_water_fill(12, weights, demand, {}) == pytest.approx(
        water_fill(12, weights, demand)
    )


def test_a_subtree_gets_its_share_then_divides_it() -> None:
    demand = {"a1": 20.0, "a2": 20.0, "b1": 20.0}
    fair = tree_water_fill(12, {}, demand, {"a1": "A", "a2": "A", "b1": "B"}, {"A": 1, "B": 1})
    assert fair == pytest.approx({"a1": 3.0, "a2": 3.0, "b1": 6.0})  # flat would be 4 / 4 / 4


def test_a_group_weight_moves_the_whole_subtree() -> None:
    demand = {"a1": 20.0, "b1": 20.0}
    fair = tree_water_fill(12, {}, demand, {"a1": "A", "b1": "B"}, {"A": 1, "B": 2})
    assert fair == pytest.approx({"a1": 4.0, "b1": 8.0})


def test_what_a_capped_subtree_leaves_goes_to_the_others() -> None:
    demand = {"a1": 1.0, "b1": 20.0}
    fair = tree_water_fill(12, {}, demand, {"a1": "A", "b1": "B"})
    assert fair == pytest.approx({"a1": 1.0, "b1": 11.0})


def test_a_cycle_of_parents_does_not_hang() -> None:
    fair = tree_water_fill(4, {}, {"x": 10.0}, {"x": "P", "P": "x"})
    assert fair == pytest.approx({"x": 4.0})


def alone_in_its_cohort(scheduler: dict) -> SnapshotBuilder:
    """team-a (cohort a-org) holds 56 GPUs; team-b, alone in cohort b-org, holds 8 and waits."""
    builder = SnapshotBuilder().pool("a100", nodes=8)
    builder.queue("team-a", weight=1).queue("team-b", weight=1)
    for i in range(7):
        builder.job(f"a{i}", tenant="team-a", node=f"a100-{i:03d}", waited=f"{60 - i}m")
    builder.job("b-run", tenant="team-b", node="a100-007", waited="6h")
    for i in range(3):
        builder.job(f"b{i}", state="pending", tenant="team-b", waited=f"{300 - i}m")
    builder.doc["scheduler"].update(scheduler)
    return builder


def weight_changes(builder: SnapshotBuilder) -> list:
    run = recommend(builder.build(), settings=RecommendSettings(simulate=False))
    return [r for r in run.recommendations if r.kind == QUEUE_WEIGHT]


def test_a_queue_alone_in_its_cohort_gets_a_cohort_weight_recommendation() -> None:
    scheduler = {
        "queue_parents": {"team-a": "a-org", "team-b": "b-org"},
        "cohorts": {"a-org": {"weight": 1}, "b-org": {"weight": 1}},
    }
    [change] = weight_changes(alone_in_its_cohort(scheduler))
    assert change.target == "queue:b-org"
    assert dict(change.change) == {"field": "cohort-weight", "from": 1, "to": 2}
    assert "cohort b-org's fair-sharing weight" in change.summary


def test_a_queue_alone_under_a_parent_queue_gets_the_parents_weight() -> None:
    builder = alone_in_its_cohort({"queue_parents": {"team-a": "org-a", "team-b": "org-b"}})
    builder.queue("org-a", weight=1).queue("org-b", weight=3)
    [change] = weight_changes(builder)
    assert change.target == "queue:org-b"
    assert dict(change.change) == {"from": 3, "to": 6}


def test_siblings_in_one_cohort_keep_the_queues_own_weight() -> None:
    scheduler = {
        "queue_parents": {"team-a": "org", "team-b": "org"},
        "cohorts": {"org": {"weight": 1}},
    }
    [change] = weight_changes(alone_in_its_cohort(scheduler))
    assert change.target == "queue:team-b"
    assert "field" not in change.change
