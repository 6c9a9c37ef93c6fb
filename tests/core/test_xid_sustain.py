"""``xid`` after its Xid leaves the window (issue #16): the rule sustains the finding of a GPU that
is still not healthy -- health not ``ok``, node cordoned / drained / down, or an older Xid still
reported -- and the finding resolves ``healthy_s`` after the GPU is healthy again."""

from __future__ import annotations

import pytest

from diagnosis.core.rules.builtin.xid import RULE
from diagnosis.core.rules.engine import run_rules
from tests.support.builders import SnapshotBuilder


def sustained(builder: SnapshotBuilder) -> frozenset[str]:
    return run_rules(builder.build(), only=["xid"]).sustained.get("xid", frozenset())


def one_node(**node_fields) -> SnapshotBuilder:
    return SnapshotBuilder().node("n1", gpus=8, **node_fields)


def test_an_unhealthy_gpu_without_an_xid_in_the_window_is_sustained_not_reported():
    builder = one_node().gpu("n1", 3, health="unhealthy", util=0.0)
    diagnosis = run_rules(builder.build(), only=["xid"])
    assert diagnosis.findings == ()
    assert diagnosis.sustained["xid"] == {"gpu:n1/3"}


def test_a_healthy_gpu_on_a_ready_node_is_not_sustained():
    assert sustained(one_node().gpu("n1", 3, health="ok", util=0.5)) == frozenset()


@pytest.mark.parametrize("state", ["cordoned", "drained", "down"])
def test_every_gpu_of_an_unavailable_node_is_sustained(state):
    assert sustained(one_node(state=state)) == {f"gpu:n1/{i}" for i in range(8)}


def test_an_xid_older_than_the_window_still_reported_sustains_its_gpu():
    builder = one_node().gpu("n1", 5, xid=[(79, "40m")], health="ok", util=0.2)
    assert sustained(builder) == {"gpu:n1/5"}


def test_a_gpu_reported_in_the_window_is_a_finding_not_a_sustained_subject():
    builder = one_node().gpu("n1", 3, xid=[(79, "2m")], health="unhealthy")
    diagnosis = run_rules(builder.build(), only=["xid"])
    assert [f.subject for f in diagnosis.findings] == ["gpu:n1/3"]
    assert "gpu:n1/3" not in diagnosis.sustained.get("xid", frozenset())


def test_the_healthy_period_is_the_keep_firing_time_and_a_cluster_may_override_it():
    assert RULE.keep_firing_for(RULE.resolve()) == 1800
    assert RULE.keep_firing_for(RULE.resolve({"healthy_s": 600})) == 600
