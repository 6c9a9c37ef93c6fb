"""``thermal-throttling`` and ``power-throttling``: a GPU whose clocks were held down for that
reason for at least min_frac [0.2] of the window. The reason bits are DCGM's
DCGM_CLOCKS_EVENT_REASON_* (NVIDIA/DCGM testing/python3/dcgm_fields.py): sw_power_cap 0x4,
sw_thermal 0x20, hw_thermal 0x40, hw_power_brake 0x80."""

from __future__ import annotations

import pytest

from diagnosis.core.rules import throttling
from diagnosis.core.rules.builtin import power_throttling, thermal_throttling
from tests.support.rules import judge_rule as judge
from tests.support.rules import one_busy_gpu as cluster

RULES = {
    "thermal": (thermal_throttling.RULE, "throttle_thermal"),
    "power": (power_throttling.RULE, "throttle_power"),
}


def test_the_reason_bits_are_dcgms():
    assert throttling.THERMAL.bits == 0x20 | 0x40
    assert throttling.POWER.bits == 0x4 | 0x80
    assert throttling.THERMAL.bit_names == ["sw_thermal", "hw_thermal"]
    assert throttling.POWER.bit_names == ["sw_power_cap", "hw_power_brake"]


@pytest.mark.parametrize("reason", RULES)
def test_a_throttled_gpu_under_a_job_is_reported_with_its_clocks(reason):
    rule, field = RULES[reason]
    snap = cluster(
        **{field: 0.35}, sm_clock_mhz=1005.0, max_sm_clock_mhz=1410.0, temp_c=87.0, power_w=390.0
    ).build()
    (finding,) = judge(rule, snap).findings
    assert finding.subject == "gpu:a100-000/0"
    assert finding.severity == "warning"
    evidence = finding.evidence
    assert evidence["reason"] == reason
    assert evidence["frac_of_window"] == pytest.approx(0.35)
    assert evidence["sm_clock_ratio"] == pytest.approx(1005 / 1410)
    assert evidence["temp_c_max"] == 87.0
    assert evidence["power_limit_w"] == 400.0
    assert evidence["job"] == "j"
    assert "35%" in finding.summary


@pytest.mark.parametrize("reason", RULES)
@pytest.mark.parametrize(("frac", "fires"), [(0.1999, False), (0.2, True)])
def test_min_frac(reason, frac, fires):
    rule, field = RULES[reason]
    assert bool(judge(rule, cluster(**{field: frac}).build()).findings) is fires


def test_each_rule_reads_only_its_own_reason():
    snap = cluster(throttle_thermal=0.9, throttle_power=0.0).build()
    assert judge(thermal_throttling.RULE, snap).findings
    assert judge(power_throttling.RULE, snap).findings == ()


def test_a_free_throttled_gpu_is_info():
    snap = cluster().gpu("a100-000", 5, throttle_thermal=0.5).build()
    (finding,) = judge(thermal_throttling.RULE, snap).findings
    assert finding.severity == "info"
    assert finding.evidence["job"] is None
    assert finding.evidence["sm_clock_ratio"] is None


@pytest.mark.parametrize("reason", RULES)
def test_gpus_without_the_field_are_not_judged(reason):
    rule, field = RULES[reason]
    judgement = judge(rule, cluster(**{field: 0.0}).build())
    assert judgement.findings == ()
    assert judgement.not_judged[throttling.NO_READING] == 7  # the node's other seven GPUs
