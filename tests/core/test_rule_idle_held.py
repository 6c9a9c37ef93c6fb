"""``idle-held``: a running job whose GPUs hold fb_used_frac >= min_fb [0.10] of their memory at
util < max_util [0.05] (a notebook); such a job is not also an ``idle-allocation`` finding."""

from __future__ import annotations

from functools import partial

import pytest

from diagnosis.core.rules.builtin.idle_held import NO_FB, RULE
from diagnosis.core.rules.engine import run_rules
from diagnosis.core.rules.running_jobs import NO_UTIL
from tests.support.builders import SnapshotBuilder
from tests.support.rules import judge_rule

judge = partial(judge_rule, RULE)


def notebook(util=0.0, fb=0.6, ran="3h"):
    metrics = {k: v for k, v in {"util": util, "fb_used_frac": fb}.items() if v is not None}
    return (
        SnapshotBuilder()
        .pool("a100", nodes=1)
        .job("nb", kind="notebook", gpus_per_pod=1, node="a100-000", ran=ran, **metrics)
    )


def test_a_notebook_holding_memory_is_reported():
    (finding,) = judge(notebook().build()).findings
    assert finding.subject == "job:nb"
    assert finding.severity == "warning"
    evidence = finding.evidence
    assert evidence["kind"] == "notebook"
    assert evidence["fb_used_frac_mean"] == pytest.approx(0.6)
    assert evidence["util_mean"] == 0.0
    assert evidence["runtime_s"] == 3 * 3600
    assert evidence["per_gpu"] == [{"gpu": "a100-000/0", "util": 0.0, "fb_used_frac": 0.6}]
    assert "60%" in finding.summary


@pytest.mark.parametrize(("fb", "fires"), [(0.0999, False), (0.10, True)])
def test_min_fb(fb, fires):
    assert bool(judge(notebook(fb=fb).build()).findings) is fires


@pytest.mark.parametrize(("util", "fires"), [(0.0499, True), (0.05, False)])
def test_max_util_is_strict(util, fires):
    assert bool(judge(notebook(util=util).build()).findings) is fires


@pytest.mark.parametrize(("ran", "fires"), [(1799, False), (1800, True)])
def test_min_runtime(ran, fires):
    assert bool(judge(notebook(ran=ran).build()).findings) is fires


def test_no_framebuffer_reading_is_not_judged_here():
    judgement = judge(notebook(fb=None).build())
    assert judgement.findings == ()
    assert judgement.not_judged[NO_FB] == 1


def test_no_util_reading_is_not_judged():
    judgement = judge(notebook(util=None).build())
    assert judgement.findings == ()
    assert judgement.not_judged[NO_UTIL] == 1


def test_one_idle_job_gets_one_finding_across_both_rules():
    diagnosis = run_rules(notebook().build(), only=["idle-held", "idle-allocation"])
    assert [(f.rule, f.subject) for f in diagnosis.findings] == [("idle-held", "job:nb")]


def test_an_idle_job_without_memory_held_stays_idle_allocation():
    diagnosis = run_rules(notebook(fb=0.02).build(), only=["idle-held", "idle-allocation"])
    assert [(f.rule, f.subject) for f in diagnosis.findings] == [("idle-allocation", "job:nb")]
