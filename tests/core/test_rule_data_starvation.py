"""``data-starvation``: memory loaded, utilisation in [0.05, 0.60), and bursty or host-CPU-bound."""

from __future__ import annotations

from functools import partial

import pytest

from diagnosis.core.rules.builtin.data_starvation import NO_FB, NO_TRIGGER_METRICS, RULE
from diagnosis.core.rules.running_jobs import NO_UTIL
from tests.support.builders import SnapshotBuilder
from tests.support.rules import judge_rule

judge = partial(judge_rule, RULE)


def starved(*, cpu=0.2, ran="1h", util=0.3, p10=0.0, p90=0.9, fb=0.5, **metrics):
    """A one-node job; by default bursty (p90 - p10 = 0.9) on a quiet host."""
    return (
        SnapshotBuilder()
        .pool("a100", nodes=1, cpu_util=cpu)
        .job(
            "j1",
            node="a100-000",
            ran=ran,
            util=util,
            util_p10=p10,
            util_p90=p90,
            fb_used_frac=fb,
            **metrics,
        )
        .build()
    )


def test_bursty_job_is_reported():
    (finding,) = judge(starved(pcie_rx_Bps=2e8)).findings
    assert finding.subject == "job:j1"
    assert finding.severity == "warning"
    evidence = finding.evidence
    assert evidence["trigger"] == "bursty"
    assert evidence["util_mean"] == pytest.approx(0.3)
    assert evidence["util_p10"] == pytest.approx(0.0)
    assert evidence["util_p90"] == pytest.approx(0.9)
    assert evidence["util_spread"] == pytest.approx(0.9)
    assert evidence["host_cpu_max"] == pytest.approx(0.2)
    assert evidence["pcie_rx_Bps_mean"] == pytest.approx(2e8)


def test_host_cpu_bound_job_is_reported():
    (finding,) = judge(starved(cpu=0.95, p10=0.3, p90=0.3)).findings
    assert finding.evidence["trigger"] == "host-cpu"


def test_both_triggers():
    (finding,) = judge(starved(cpu=0.95)).findings
    assert finding.evidence["trigger"] == "both"


def test_steady_job_on_quiet_host_is_not_reported():
    assert not judge(starved(p10=0.25, p90=0.35)).findings


@pytest.mark.parametrize(("ran", "fires"), [(899, False), (900, True)])
def test_min_runtime(ran, fires):
    assert bool(judge(starved(ran=ran)).findings) is fires


@pytest.mark.parametrize(("fb", "fires"), [(0.0499, False), (0.05, True)])
def test_min_fb_used(fb, fires):
    assert bool(judge(starved(fb=fb)).findings) is fires


@pytest.mark.parametrize(
    ("util", "fires"), [(0.0499, False), (0.05, True), (0.5999, True), (0.60, False)]
)
def test_util_band_is_closed_below_and_open_above(util, fires):
    assert bool(judge(starved(util=util)).findings) is fires


@pytest.mark.parametrize(
    ("p10", "p90", "fires"),
    [(0.0, 0.4999, False), (0.0, 0.5, True), (0.2, 0.7, True)],  # 0.7 - 0.2 < 0.5 in floats
)
def test_min_burst_spread(p10, p90, fires):
    assert bool(judge(starved(p10=p10, p90=p90)).findings) is fires


@pytest.mark.parametrize(("cpu", "fires"), [(0.8999, False), (0.9, True)])
def test_min_host_cpu(cpu, fires):
    assert bool(judge(starved(cpu=cpu, p10=0.3, p90=0.3)).findings) is fires


def test_busiest_node_decides_host_cpu():
    snap = (
        SnapshotBuilder()
        .node("n1", cpu_util=0.1)
        .node("n2", cpu_util=0.95)
        .job("j1", pods=2, nodes=["n1", "n2"], ran="1h", util=0.3, fb_used_frac=0.5)
        .build()
    )
    (finding,) = judge(snap).findings
    assert finding.evidence["host_cpu_max"] == pytest.approx(0.95)
    assert finding.evidence["nodes"] == 2


def test_spread_is_the_mean_over_gpus_of_p90_minus_p10():
    snap = (
        SnapshotBuilder()
        .pool("a100", nodes=1, cpu_util=0.1)
        .job("j1", node="a100-000", gpus_per_pod=2, ran="1h", fb_used_frac=0.5)
        .gpu("a100-000", 0, util=0.3, util_p10=0.0, util_p90=0.8)  # spread 0.8
        .gpu("a100-000", 1, util=0.3, util_p10=0.3, util_p90=0.3)  # spread 0.0
        .build()
    )
    assert not judge(snap).findings  # mean spread 0.4


@pytest.mark.parametrize(
    ("metrics", "reason"),
    [({"fb_used_frac": 0.5}, NO_UTIL), ({"util": 0.3}, NO_FB)],
    ids=["without-util", "in-band-without-framebuffer-metric"],
)
def test_job_missing_a_metric_is_not_judged(metrics, reason):
    snap = (
        SnapshotBuilder()
        .pool("a100", nodes=1, cpu_util=0.95)
        .job("j1", node="a100-000", ran="1h", **metrics)
        .build()
    )
    judgement = judge(snap)
    assert not judgement.findings
    assert judgement.not_judged[reason] == 1


def test_idle_job_without_framebuffer_metric_is_judged_not_starved():
    snap = SnapshotBuilder().pool("a100", nodes=1).job("j1", node="a100-000", ran="1h", util=0.01)
    judgement = judge(snap.build())
    assert not judgement.findings
    assert judgement.not_judged[NO_FB] == 0


def test_steady_job_with_unknown_host_cpu_is_not_judged():
    snap = (
        SnapshotBuilder()
        .pool("a100", nodes=1)  # no cpu_util
        .job("j1", node="a100-000", ran="1h", util=0.3, fb_used_frac=0.5)
        .build()
    )
    judgement = judge(snap)
    assert not judgement.findings
    assert judgement.not_judged[NO_TRIGGER_METRICS] == 1


def test_unknown_spread_with_busy_host_still_fires():
    (finding,) = judge(starved(cpu=0.95, p10=None, p90=None)).findings
    assert finding.evidence["trigger"] == "host-cpu"
    assert finding.evidence["util_spread"] is None


def test_unknown_spread_with_quiet_host_is_not_judged():
    judgement = judge(starved(cpu=0.2, p10=None, p90=None))
    assert not judgement.findings
    assert judgement.not_judged[NO_TRIGGER_METRICS] == 1


def test_pending_job_is_not_judged():
    snap = (
        SnapshotBuilder()
        .pool("a100", nodes=2, cpu_util=0.95)
        .job("g1", state="pending", pods=2, bound=1, node="a100-000", waited="2h", util=0.3)
        .build()
    )
    judgement = judge(snap)
    assert not judgement.findings
    assert not any(judgement.not_judged.values())


def test_threshold_override():
    snap = starved(p10=0.1, p90=0.5)  # spread 0.4
    assert not judge(snap).findings
    assert judge(snap, min_burst_spread=0.3).findings
