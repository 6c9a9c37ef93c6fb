"""``hung-collective``: a multi-GPU job at util >= min_util [0.9] on every GPU, power <=
max_power_frac [0.4] of its limit, tensor <= max_tensor [0.02] and DRAM <= max_dram [0.05]
where reported (the NCCL-hang signature). The A100-SXM4's TDP is 400 W (NVIDIA A100 datasheet);
dcgm-exporter's DCGM_FI_DEV_POWER_MGMT_LIMIT, when reported, wins over it."""

from __future__ import annotations

from functools import partial

import pytest

from diagnosis.core.accounting import account
from diagnosis.core.rules.builtin.hung_collective import NO_POWER, NO_TENSOR, NO_UTIL_ALL, RULE
from diagnosis.core.rules.engine import run_rules
from tests.support.builders import SnapshotBuilder
from tests.support.rules import judge_rule

HUNG = {"util": 0.98, "power_w": 120.0, "tensor_active": 0.0, "dram_active": 0.01}


judge = partial(judge_rule, RULE)


def gang(ran="1h", **metrics):
    """A 2-pod x 8-GPU gang on two A100 nodes, every GPU with ``metrics``."""
    values = {**HUNG, **metrics}
    values = {k: v for k, v in values.items() if v is not None}
    return (
        SnapshotBuilder()
        .pool("a100", nodes=3)
        .job("g", pods=2, gpus_per_pod=8, nodes=["a100-000", "a100-001"], ran=ran, **values)
    )


def test_a_hung_gang_is_reported_with_its_signature():
    (finding,) = judge(gang().build()).findings
    assert finding.subject == "job:g"
    assert finding.severity == "critical"
    evidence = finding.evidence
    assert evidence["gpus"] == 16
    assert evidence["pods"] == 2
    assert evidence["nodes"] == 2
    assert evidence["util_min"] == pytest.approx(0.98)
    assert evidence["power_limit_w_mean"] == pytest.approx(400.0)
    assert evidence["power_frac"] == pytest.approx(0.3)
    assert evidence["tensor_active_mean"] == 0.0
    assert evidence["dram_active_mean"] == pytest.approx(0.01)
    assert evidence["per_gpu"][0] == {
        "gpu": "a100-000/0",
        "util": 0.98,
        "power_w": 120.0,
        "power_limit_w": 400.0,
        "tensor_active": 0.0,
        "dram_active": 0.01,
    }
    assert "hung collective" in finding.summary


def test_a_healthy_busy_gang_is_not_hung():
    snap = gang(power_w=350.0, tensor_active=0.45, dram_active=0.4).build()
    assert judge(snap).findings == ()


@pytest.mark.parametrize(("util", "fires"), [(0.8999, False), (0.9, True)])
def test_min_util_on_every_gpu(util, fires):
    snap = gang().gpu("a100-001", 7, util=util).build()
    assert bool(judge(snap).findings) is fires


@pytest.mark.parametrize(("watts", "fires"), [(160.0, True), (160.1, False)])
def test_max_power_frac_of_tdp(watts, fires):
    # 0.4 x 400 W = 160 W
    assert bool(judge(gang(power_w=watts).build()).findings) is fires


def test_a_reported_power_limit_wins_over_the_tdp():
    # 120 W of a 250 W cap is 48%: busy for this GPU, although 30% of the A100's TDP.
    snap = gang(power_limit_w=250.0).build()
    assert judge(snap).findings == ()


@pytest.mark.parametrize(("tensor", "fires"), [(0.02, True), (0.0201, False)])
def test_max_tensor(tensor, fires):
    assert bool(judge(gang(tensor_active=tensor).build()).findings) is fires


@pytest.mark.parametrize(("dram", "fires"), [(0.05, True), (0.0501, False), (None, True)])
def test_max_dram_where_reported(dram, fires):
    assert bool(judge(gang(dram_active=dram).build()).findings) is fires


@pytest.mark.parametrize(("ran", "fires"), [(899, False), (900, True)])
def test_min_runtime(ran, fires):
    assert bool(judge(gang(ran=ran).build()).findings) is fires


def test_a_single_gpu_job_is_not_judged_for_a_collective():
    snap = (
        SnapshotBuilder()
        .pool("a100", nodes=1)
        .job("one", gpus_per_pod=1, node="a100-000", ran="1h", **HUNG)
        .build()
    )
    assert judge(snap).findings == ()
    assert judge(snap, min_gpus=1).findings[0].subject == "job:one"


def test_a_gpu_without_util_leaves_every_gpu_open():
    builder = gang()
    builder.doc["gpus"] = [
        g for g in builder.doc["gpus"] if (g["node"], g["index"]) != ("a100-001", 7)
    ]
    judgement = judge(builder.build())
    assert judgement.findings == ()
    assert judgement.not_judged[NO_UTIL_ALL] == 1


def test_no_power_reading_is_not_judged():
    judgement = judge(gang(power_w=None).build())
    assert judgement.findings == ()
    assert judgement.not_judged[NO_POWER] == 1


def test_unknown_model_without_power_limit_is_not_judged():
    builder = gang()
    for node in builder.doc["nodes"]:
        node["gpu_model"] = "Mystery-GPU"
    judgement = judge(builder.build())
    assert judgement.findings == ()
    assert judgement.not_judged[NO_POWER] == 1


def test_no_tensor_metric_is_not_judged():
    judgement = judge(gang(tensor_active=None).build())
    assert judgement.findings == ()
    assert judgement.not_judged[NO_TENSOR] == 1


def test_a_known_busy_signal_settles_it_even_with_a_field_missing():
    judgement = judge(gang(power_w=None, tensor_active=0.5).build())
    assert judgement.findings == ()
    assert judgement.not_judged[NO_POWER] == 0


def test_pending_jobs_and_empty_snapshots_give_nothing():
    snap = (
        SnapshotBuilder()
        .pool("a100", nodes=1)
        .job("p", state="pending", pods=2, gpus_per_pod=8)
        .build()
    )
    assert judge(snap).findings == ()
    assert judge(SnapshotBuilder().build()).findings == ()


def test_hung_gpus_are_their_own_bucket_and_the_buckets_sum_to_capacity():
    snap = gang().build()
    result = account(run_rules(snap))
    buckets = result.cluster.buckets
    assert buckets["allocated-hung"] == 16
    assert buckets["allocated-busy"] == 0
    assert sum(buckets.values()) == result.cluster.gpus == 24
    assert result.findings["allocated-hung"] == ("hung-collective job:g",)
