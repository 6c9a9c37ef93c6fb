"""``idle-quota``: a queue with deserved_gpus > 0 whose settled jobs (run >= min_runtime [1800 s])
hold GPUs at mean util < max_util [0.05] while other queues' pending jobs in those pools ask
for no more GPUs than it holds. Warning when it holds beyond its guarantee (borrowing)."""

from __future__ import annotations

from functools import partial

import pytest

from diagnosis.core.rules.builtin.idle_quota import NO_UTIL, RULE
from tests.support.builders import SnapshotBuilder
from tests.support.rules import judge_rule

judge = partial(judge_rule, RULE)


def cluster(*, deserved=8, util=0.01, ran="2h", waiting_gpus=8, waiting_pool="a100"):
    """Queue ``research`` holds 16 GPUs (two 8-GPU jobs) at ``util``; ``prod`` waits with one
    job of ``waiting_gpus``."""
    builder = SnapshotBuilder().pool("a100", nodes=3).pool("h100", nodes=1)
    builder.queue("research", deserved_gpus=deserved).queue("prod", deserved_gpus=8)
    for i in range(2):
        metrics = {} if util is None else {"util": util}
        builder.job(f"r{i}", tenant="research", node=f"a100-00{i}", ran=ran, **metrics)
    builder.job("p1", tenant="prod", state="pending", gpus_per_pod=waiting_gpus, pool=waiting_pool)
    return builder


def test_a_borrowing_idle_queue_is_a_reclaim_candidate():
    (finding,) = judge(cluster().build()).findings
    assert finding.subject == "queue:research"
    assert finding.severity == "warning"
    evidence = finding.evidence
    assert evidence["held_gpus"] == 16
    assert evidence["borrowed_gpus"] == 8
    assert evidence["reclaimable_gpus"] == 16
    assert evidence["idle_gpu_hours"] == pytest.approx(16 * 0.25)
    assert evidence["idle_jobs"] == ["r0", "r1"]
    assert evidence["waiting_queues"] == [
        {"queue": "prod", "pending_jobs": 1, "smallest_request": 8}
    ]


def test_an_idle_queue_within_its_guarantee_is_info():
    (finding,) = judge(cluster(deserved=16).build()).findings
    assert finding.severity == "info"
    assert finding.evidence["borrowed_gpus"] == 0


@pytest.mark.parametrize(("util", "fires"), [(0.0499, True), (0.05, False)])
def test_max_util(util, fires):
    assert bool(judge(cluster(util=util).build()).findings) is fires


@pytest.mark.parametrize(("ran", "fires"), [(1799, False), (1800, True)])
def test_min_runtime(ran, fires):
    assert bool(judge(cluster(ran=ran).build()).findings) is fires


def test_a_waiting_job_larger_than_the_idle_gpus_is_not_a_reason():
    # 16 GPUs held; a 2-pod x 8 = 16 GPU job fits, one asking 24 does not.
    builder = cluster(waiting_gpus=1)
    builder.doc["jobs"] = [j for j in builder.doc["jobs"] if j["id"] != "p1"]
    builder.job("p2", tenant="prod", state="pending", pods=3, gpus_per_pod=8)
    assert judge(builder.build()).findings == ()


def test_waiting_in_another_pool_is_not_a_reason():
    assert judge(cluster(waiting_pool="h100").build()).findings == ()


def test_a_waiting_job_without_a_pool_may_use_the_idle_gpus():
    (finding,) = judge(cluster(waiting_pool=None).build()).findings
    assert finding.subject == "queue:research"


def test_only_other_queues_waiting_count():
    builder = cluster()
    builder.doc["jobs"] = [j for j in builder.doc["jobs"] if j["id"] != "p1"]
    builder.job("r-next", tenant="research", state="pending", gpus_per_pod=8)
    assert judge(builder.build()).findings == ()


def test_a_queue_without_a_guarantee_is_left_to_idle_allocation():
    builder = cluster()
    builder.doc["queues"][0].pop("deserved_gpus")
    assert judge(builder.build()).findings == ()


def test_held_gpus_without_util_are_not_judged():
    judgement = judge(cluster(util=None).build())
    assert judgement.findings == ()
    assert judgement.not_judged[NO_UTIL] == 1
