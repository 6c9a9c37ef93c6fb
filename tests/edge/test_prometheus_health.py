"""Issue 20's hardware-health fields against a real Prometheus (the ``health`` cluster of
tests/support/prometheus_fixtures.py): power limit, SM clock and its maximum, DRAM activity,
the share of the window throttled (the violation counter where exported, else the clock-event
reasons under either field name) and the row remapper, in the one ``health`` query."""

from __future__ import annotations

import pytest

from tests.edge.test_prometheus import collected, gpu
from tests.support.prometheus_fixtures import HEALTH_CLUSTER

pytestmark = pytest.mark.prometheus


@pytest.fixture(scope="module")
def document(prometheus, planted_history):
    return collected(prometheus, planted_history, HEALTH_CLUSTER, [("he-0", 3)])


def test_power_limit_clocks_and_dram_read_back(document):
    entry = gpu(document, "he-0", 0)
    assert entry["power_limit_w"] == {"max": 300.0}
    assert entry["sm_clock_mhz"] == {"mean": 1100.0}
    assert entry["max_sm_clock_mhz"] == {"max": 1410.0}
    assert entry["dram_active"]["mean"] == pytest.approx(0.3)


def test_the_thermal_share_comes_from_the_clock_event_reasons(document):
    # 0x40 set over the window's last 6 of 15 minutes, sampled once a minute.
    assert gpu(document, "he-0", 0)["throttle_thermal"]["frac"] == pytest.approx(0.4, abs=0.07)
    assert gpu(document, "he-0", 0)["throttle_power"]["frac"] == 0.0


def test_the_violation_counter_wins_and_the_old_field_name_is_read(document):
    entry = gpu(document, "he-0", 1)
    assert entry["throttle_power"]["frac"] == pytest.approx(0.5, abs=0.02)
    assert entry["throttle_thermal"]["frac"] == pytest.approx(0.25, abs=0.07)


def test_the_row_remapper_reads_back(document):
    assert gpu(document, "he-0", 0)["row_remap"] == {
        "pending": 1.0,
        "failure": 0.0,
        "uncorrectable": 1.0,
    }


def test_a_gpu_without_the_fields_reports_none_of_them(document):
    entry = gpu(document, "he-0", 2)
    for field in ("power_limit_w", "sm_clock_mhz", "throttle_thermal", "row_remap", "dram_active"):
        assert field not in entry
