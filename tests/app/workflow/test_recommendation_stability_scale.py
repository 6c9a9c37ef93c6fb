"""Recommendations are stored at 16,384 GPUs (issue #17): three recommend steps of one cluster
where 512 jobs each have two advisory findings (topology-misplacement and data-starvation, the
pair that broke ``recommendation_one_open_per_target``), all stored without an IntegrityError.

Replays are off (``simulate=False``): what is measured is the store, not the simulator."""

from __future__ import annotations

from datetime import timedelta

import pytest

from diagnosis.actions.workflow.proposals import record_recommendations
from diagnosis.core.recommend.base import RecommendSettings
from diagnosis.core.rules.engine import run_rules
from diagnosis.models import Recommendation
from tests.support.builders import AS_OF, SnapshotBuilder

pytestmark = pytest.mark.django_db

NODES = 2048  # x 8 GPUs = 16,384
JOBS = NODES // 2
STARVED_EVERY = 2  # every other job is data-starved as well as misplaced


def big_cluster(as_of):
    """Every pair of 8-GPU nodes runs one job as two 4-GPU pods (one node would hold it), so
    every node has 4 GPUs free; eight 8-GPU jobs wait (fragmentation of the pool)."""
    builder = SnapshotBuilder(as_of=as_of).pool("a100", nodes=NODES).placement("a100", "spread")
    for i in range(JOBS):
        bursty = (
            {"util": 0.3, "util_p10": 0.0, "util_p90": 0.9, "fb_used_frac": 0.5}
            if i % STARVED_EVERY == 0
            else {"util": 0.9}
        )
        builder.job(
            f"j{i:04d}",
            pods=2,
            gpus_per_pod=4,
            nodes=[f"a100-{2 * i:03d}", f"a100-{2 * i + 1:03d}"],
            ran="2h",
            **bursty,
        )
    for i in range(8):
        builder.job(f"wait{i}", state="pending", gpus_per_pod=8, waited="30m")
    return builder.build()


def test_three_recommend_steps_at_16k_gpus_store_one_recommendation_per_target(
    make_cluster,
) -> None:
    cluster = make_cluster("big")
    config = RecommendSettings(simulate=False)
    all_stats = []
    for cycle in range(3):
        snap = big_cluster(AS_OF + timedelta(minutes=cycle))
        assert int(snap.gpus.shape[0]) == NODES * 8
        all_stats.append(record_recommendations(cluster, snap, run_rules(snap), {}, config))

    first, *later = all_stats
    assert first["merged"] == JOBS // STARVED_EVERY  # one advisory per job, not two
    assert first["proposed"] == JOBS + 1  # + the pool's binpack
    assert all(s["proposed"] == 0 and s["kept"] == JOBS + 1 for s in later)
    stored = Recommendation.objects.filter(cluster=cluster, state="proposed")
    assert stored.count() == JOBS + 1
    assert stored.filter(kind="advisory", target="job:j0000").count() == 1
