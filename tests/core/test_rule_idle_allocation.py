"""``idle-allocation``: running jobs whose GPUs' mean util.mean is below max_util [0.05]."""

from __future__ import annotations

from functools import partial

import pytest

from diagnosis.core import snapshot as snapshot_format
from diagnosis.core.rules.builtin.idle_allocation import RULE
from diagnosis.core.rules.running_jobs import NO_GPUS, NO_START, NO_UTIL
from tests.support.builders import SnapshotBuilder
from tests.support.rules import judge_rule

judge = partial(judge_rule, RULE)


def one_job(util=0.01, ran="2h", **job_fields):
    return (
        SnapshotBuilder()
        .pool("a100", nodes=2)
        .job("j1", node="a100-000", ran=ran, util=util, fb_used_frac=0.05, **job_fields)
    )


def two_gpus(*utils):
    """A job on two GPUs of one node, started 2 h ago; GPU i reads ``utils[i]`` (fewer: the
    rest read nothing)."""
    builder = (
        SnapshotBuilder().pool("a100", nodes=1).job("j1", node="a100-000", gpus_per_pod=2, ran="2h")
    )
    for index, util in enumerate(utils):
        builder.gpu("a100-000", index, util=util)
    return builder.build()


def test_idle_job_is_reported_with_per_gpu_evidence():
    judgement = judge(one_job(util=0.01).build())
    (finding,) = judgement.findings
    assert finding.rule == "idle-allocation"
    assert finding.subject == "job:j1"
    assert finding.severity == "warning"
    evidence = finding.evidence
    assert evidence["util_mean"] == pytest.approx(0.01)
    assert evidence["fb_used_frac_mean"] == pytest.approx(0.05)
    assert evidence["gpus"] == 8
    assert evidence["runtime_s"] == 7200
    assert evidence["per_gpu"][0] == {"gpu": "a100-000/0", "util": 0.01, "fb_used_frac": 0.05}
    assert len(evidence["per_gpu"]) == 8
    assert "1.0%" in finding.summary


@pytest.mark.parametrize(("util", "fires"), [(0.0499, True), (0.05, False), (0.0, True)])
def test_util_threshold_is_strict(util, fires):
    assert bool(judge(one_job(util=util).build()).findings) is fires


@pytest.mark.parametrize(("ran", "fires"), [(1799, False), (1800, True)])
def test_min_runtime(ran, fires):
    assert bool(judge(one_job(ran=ran).build()).findings) is fires


def test_mean_equal_to_threshold_up_to_float_rounding_is_not_below():
    # In floating point, mean(0.01, 0.09) is 0.049999999999999996: a user means 0.05.
    assert not judge(two_gpus(0.01, 0.09)).findings


def test_gpus_without_a_reading_are_left_out_of_the_mean():
    (finding,) = judge(two_gpus(0.02)).findings
    assert finding.evidence["util_mean"] == pytest.approx(0.02)
    assert finding.evidence["gpus_with_util"] == 1
    assert finding.evidence["per_gpu"][1]["util"] is None


def test_one_busy_gpu_lifts_the_mean_above_the_threshold():
    assert not judge(two_gpus(0.02, 0.5)).findings


def test_job_without_any_util_reading_is_not_judged():
    snap = SnapshotBuilder().pool("a100", nodes=1).job("j1", node="a100-000", ran="2h").build()
    judgement = judge(snap)
    assert not judgement.findings
    assert judgement.not_judged[NO_UTIL] == 1


def test_young_job_without_metrics_is_neither_judged_nor_counted():
    snap = SnapshotBuilder().pool("a100", nodes=1).job("j1", node="a100-000", ran="5m").build()
    judgement = judge(snap)
    assert not judgement.findings
    assert judgement.not_judged[NO_UTIL] == 0


def test_running_job_without_start_time_is_not_judged():
    document = one_job().document()
    del document["jobs"][0]["started"]
    judgement = judge(snapshot_format.load(document))
    assert not judgement.findings
    assert judgement.not_judged[NO_START] == 1


def test_running_job_without_allocation_is_not_judged():
    document = one_job().document()
    document["jobs"][0]["allocation"] = []
    judgement = judge(snapshot_format.load(document))
    assert not judgement.findings
    assert judgement.not_judged[NO_GPUS] == 1


def test_partial_gang_holding_idle_gpus_is_not_this_rule():
    snap = (
        SnapshotBuilder()
        .pool("a100", nodes=2)
        .job("g1", state="pending", pods=2, bound=1, node="a100-000", waited="2h", util=0.0)
        .build()
    )
    assert not judge(snap).findings


@pytest.mark.parametrize("state", ["completed", "failed", "preempted"])
def test_finished_jobs_are_not_judged(state):
    document = one_job().document()
    document["jobs"][0]["state"] = state
    assert not judge(snapshot_format.load(document)).findings


def test_unhealthy_gpu_is_named_in_the_evidence():
    snap = one_job(util=0.0).gpu("a100-000", 3, health="unhealthy").build()
    (finding,) = judge(snap).findings
    assert finding.evidence["unhealthy_gpus"] == ["a100-000/3"]
    assert "unhealthy" in finding.summary


def test_job_on_drained_node_is_reported_with_the_node_state():
    snap = (
        SnapshotBuilder()
        .node("n1", state="drained")
        .job("j1", node="n1", ran="2h", util=0.0)
        .build()
    )
    (finding,) = judge(snap).findings
    assert finding.evidence["nodes_not_ready"] == ["n1"]


def test_threshold_override():
    assert judge(one_job(util=0.1).build(), max_util=0.2).findings
    assert not judge(one_job(util=0.1).build()).findings


def test_each_idle_job_gets_its_own_finding():
    snap = (
        SnapshotBuilder()
        .pool("a100", nodes=2)
        .job("j1", node="a100-000", ran="2h", util=0.0)
        .job("j2", node="a100-001", ran="2h", util=0.0)
        .job("j3", node="a100-001", gpus_per_pod=0, pods=1, ran="2h")
        .build()
    )
    assert sorted(f.subject for f in judge(snap).findings) == ["job:j1", "job:j2"]


def test_job_without_tenant_or_kind_stays_plain_json():
    snap = (
        SnapshotBuilder()
        .pool("a100", nodes=1)
        .job("j1", node="a100-000", ran="2h", util=0.0, tenant=None, kind=None, pool=None)
        .build()
    )
    (finding,) = judge(snap).findings  # judge() dumps the evidence with allow_nan=False
    assert finding.evidence["tenant"] is None
    assert finding.evidence["kind"] is None
    assert "no tenant" in finding.summary


@pytest.mark.parametrize(("fb", "fires"), [(0.0999, True), (0.10, False), (None, True)])
def test_an_idle_job_holding_memory_is_left_to_idle_held(fb, fires):
    """At held_fb [0.10] of memory idle-held takes the job over (one idle job, one finding);
    a job without a framebuffer reading stays here."""
    metrics = {} if fb is None else {"fb_used_frac": fb}
    snap = (
        SnapshotBuilder()
        .pool("a100", nodes=1)
        .job("j1", node="a100-000", ran="2h", util=0.01, **metrics)
        .build()
    )
    assert bool(judge(snap).findings) is fires
