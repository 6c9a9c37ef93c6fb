"""Per-subject "not judged" in the findings lifecycle (issue #18): which subjects a GPU-metrics
rule cannot judge in a snapshot, and that such a subject keeps its finding's state."""

from __future__ import annotations

from datetime import timedelta

from diagnosis.core import lifecycle
from tests.support.builders import AS_OF, SnapshotBuilder


def test_a_gpu_without_metrics_silences_itself_its_node_and_its_running_job():
    builder = SnapshotBuilder()
    builder.pool("a100", nodes=2)
    builder.job("quiet", node="a100-000", waited="3h")  # no metrics on its GPUs
    builder.job("heard", node="a100-001", waited="3h", util=0.9)
    silent = lifecycle.silent_subjects(builder.build())
    assert "job:quiet" in silent
    assert "node:a100-000" in silent
    assert "gpu:a100-000/3" in silent
    assert not {"job:heard", "node:a100-001", "gpu:a100-001/0"} & silent


def test_a_firing_finding_of_a_subject_not_judged_keeps_its_state():
    firing = lifecycle.Tracked(
        state=lifecycle.FIRING,
        active_since=AS_OF,
        last_hit_at=AS_OF,
        last_evaluated_at=AS_OF,
        firing_since=AS_OF,
    )
    step = lifecycle.advance(
        firing,
        hit=False,
        as_of=AS_OF + timedelta(hours=1),
        for_s=600,
        keep_firing_for_s=300,
        judged=False,
    )
    assert step is None
