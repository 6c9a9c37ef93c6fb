"""queue-weight under Volcano's queue-share plugins: ``capacity`` shares by deserved GPUs, so the
recommendation raises ``deserved``; ``proportion`` shares by weight, so it raises the weight."""

from __future__ import annotations

from diagnosis.core.recommend.base import QUEUE_WEIGHT, RecommendSettings
from diagnosis.core.recommend.engine import recommend
from tests.support.builders import SnapshotBuilder


def starved_team_b(queue_share: str | None, capability: int | None = None) -> SnapshotBuilder:
    """team-a (weight 10, deserves 8) holds 56 GPUs; team-b (weight 1, deserves 8) holds 8 and
    waits 5 h with 3 more 8-GPU jobs: below its fair share by either measure."""
    builder = SnapshotBuilder().pool("a100", nodes=8)
    extra = {} if capability is None else {"capability_gpus": capability}
    builder.queue("team-a", weight=10, deserved_gpus=8)
    builder.queue("team-b", weight=1, deserved_gpus=8, **extra)
    for i in range(7):
        builder.job(f"a{i}", tenant="team-a", node=f"a100-{i:03d}", waited=f"{60 - i}m")
    builder.job("b-run", tenant="team-b", node="a100-007", waited="6h")
    for i in range(3):
        builder.job(f"b{i}", state="pending", tenant="team-b", waited=f"{300 - i}m")
    if queue_share is not None:
        builder.doc["scheduler"]["queue_share"] = queue_share
    return builder


def queue_changes(builder: SnapshotBuilder) -> list:
    run = recommend(builder.build(), settings=RecommendSettings(simulate=False))
    return [r for r in run.recommendations if r.kind == QUEUE_WEIGHT]


def test_under_the_capacity_plugin_deserved_is_raised() -> None:
    [change] = queue_changes(starved_team_b("capacity"))
    assert change.target == "queue:team-b"
    assert change.change["field"] == "deserved"
    assert change.change["from"] == 8
    assert change.change["to"] > 8
    assert "deserved GPUs" in change.summary


def test_a_deserved_raise_stops_at_the_queues_capability() -> None:
    [change] = queue_changes(starved_team_b("capacity", capability=12))
    assert change.change["to"] == 12


def test_under_the_proportion_plugin_the_weight_is_raised() -> None:
    [change] = queue_changes(starved_team_b("proportion"))
    assert "field" not in change.change
    assert dict(change.change) == {"from": 1, "to": 2}
