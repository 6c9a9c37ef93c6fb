"""``low-mfu``: busy (util >= 0.6) training jobs whose MFU is below 0.25."""

from __future__ import annotations

from functools import partial

import pytest

from diagnosis.core.rules.builtin.low_mfu import NO_MFU, NO_PEAK, PROXY, REPORTED, RULE
from diagnosis.core.rules.running_jobs import NO_UTIL
from tests.support.builders import SnapshotBuilder
from tests.support.rules import judge_rule

judge = partial(judge_rule, RULE)


def training(*, model="A100-SXM4-80GB", ran="1h", kind="training", **job_fields):
    return (
        SnapshotBuilder()
        .pool("a100", nodes=1, gpu_model=model)
        .job("j1", node="a100-000", ran=ran, kind=kind, **job_fields)
        .build()
    )


def test_reported_tflops_below_a_quarter_of_peak_fires():
    (finding,) = judge(training(util=0.9, tflops=50.0)).findings
    assert finding.subject == "job:j1"
    assert finding.severity == "info"
    evidence = finding.evidence
    assert evidence["method"] == REPORTED
    assert evidence["mfu"] == pytest.approx(50 / 312)
    assert evidence["peak_tflops"] == 312.0
    assert evidence["gpu_model"] == "A100-SXM4-80GB"
    assert evidence["util_mean"] == pytest.approx(0.9)
    assert evidence["note"] is None


@pytest.mark.parametrize(("tflops", "fires"), [(77.9, True), (78.0, False)])  # 78 / 312 = 0.25
def test_min_mfu_with_reported_tflops(tflops, fires):
    assert bool(judge(training(util=0.9, tflops=tflops)).findings) is fires


@pytest.mark.parametrize(("tensor", "fires"), [(0.2499, True), (0.25, False)])
def test_tensor_activity_is_the_proxy_when_no_tflops(tensor, fires):
    findings = judge(training(util=0.9, tensor_active=tensor)).findings
    assert bool(findings) is fires
    if fires:
        assert findings[0].evidence["method"] == PROXY
        assert "proxy" in findings[0].summary


def test_reported_tflops_win_over_the_proxy():
    assert not judge(training(util=0.9, tflops=200.0, tensor_active=0.1)).findings


@pytest.mark.parametrize(("util", "fires"), [(0.5999, False), (0.6, True)])
def test_min_util(util, fires):
    assert bool(judge(training(util=util, tflops=10.0)).findings) is fires


@pytest.mark.parametrize(("ran", "fires"), [(899, False), (900, True)])
def test_min_runtime(ran, fires):
    assert bool(judge(training(ran=ran, util=0.9, tflops=10.0)).findings) is fires


@pytest.mark.parametrize("kind", ["inference", "tuning", "notebook"])
def test_only_training_jobs(kind):
    assert not judge(training(kind=kind, util=0.9, tflops=10.0)).findings


def test_neither_tflops_nor_tensor_activity_is_not_judged():
    judgement = judge(training(util=0.9))
    assert not judgement.findings
    assert judgement.not_judged[NO_MFU] == 1


def test_no_util_is_not_judged():
    judgement = judge(training(tflops=10.0))
    assert not judgement.findings
    assert judgement.not_judged[NO_UTIL] == 1


def test_unknown_model_falls_back_to_the_tensor_proxy_and_says_so():
    (finding,) = judge(
        training(model="Mystery-9000", util=0.9, tflops=140.0, tensor_active=0.1)
    ).findings
    assert finding.evidence["method"] == PROXY
    assert finding.evidence["peak_tflops"] is None
    assert "Mystery-9000" in finding.evidence["note"]


def test_unknown_model_without_tensor_activity_is_not_judged():
    judgement = judge(training(model="Mystery-9000", util=0.9, tflops=14.0))
    assert not judgement.findings
    assert judgement.not_judged[NO_PEAK] == 1


@pytest.mark.parametrize(("model", "peak"), [("H100-SXM5-80GB", 989.0), ("NVIDIA H20", 148.0)])
def test_peak_follows_the_gpu_model(model, peak):
    (finding,) = judge(training(model=model, util=0.9, tflops=peak * 0.2)).findings
    assert finding.evidence["peak_tflops"] == peak
    assert finding.evidence["mfu"] == pytest.approx(0.2)


def test_idle_training_job_is_not_this_rule():
    assert not judge(training(util=0.01, tflops=1.0)).findings


def test_threshold_override():
    snap = training(util=0.9, tflops=100.0)  # MFU 0.32
    assert not judge(snap).findings
    assert judge(snap, min_mfu=0.4).findings
