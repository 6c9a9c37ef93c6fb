"""Recording rules (diagnosis/edge/sources/prometheus/recording.py): generated from the family
queries, their series backfilled by the real ``promtool tsdb create-blocks-from rules`` over the
session's planted history, and a collection that reads them gives the same per-GPU numbers as
one that computes its range functions; detection, staleness, another window's rules and the
fallback per family."""

from __future__ import annotations

import math
import re
import shutil
import subprocess
from datetime import UTC, datetime
from typing import Any

import pytest
import yaml

from diagnosis.edge.errors import CollectError
from diagnosis.edge.sources.dcgm import fields as dcgm
from diagnosis.edge.sources.prometheus import (
    PrometheusConfig,
    PrometheusConfigError,
    collect_document,
)
from diagnosis.edge.sources.prometheus.metrics import NodeInventory, PrometheusSource
from diagnosis.edge.sources.prometheus.promql import Selection
from diagnosis.edge.sources.prometheus.queries import POD_SPLIT_LABELS, family_queries
from diagnosis.edge.sources.prometheus.recording import (
    FAMILY_LABEL,
    MARKER,
    RULES_LABEL,
    expected_fingerprints,
    judge,
    recording_groups,
    rules_yaml,
)
from tests.conftest import require_binary
from tests.edge.test_prometheus import scheduler_doc
from tests.support.prometheus_fixtures import (
    SIM_SCENARIO_CLUSTER,
    STEADY_UTIL,
    STEP,
    start_prometheus,
)

pytestmark = pytest.mark.prometheus

# Every planted cluster with live data, and the nodes the scheduler lists for it.
CLUSTERS = {
    "steady": [("st-0", 4)],
    "lower": [("lo-0", 2)],
    "mixed": [("mx-prof", 2), ("mx-dev", 2)],
    "bursty": [("bu-0", 1)],
    "xid": [("xi-0", 4)],
    "gap": [("ga-0", 8), ("ga-1", 2)],
    "mig": [("mg-0", 2)],
    "workload": [("wl-0", 1)],
    "health": [("he-0", 3)],
    "nvl72": [("nvl-0", 4), ("nvl-1", 4)],
    "ts-copies": [("tc-0", 2), ("tc-1", 1)],
    "ts-process": [("tp-0", 2)],
    SIM_SCENARIO_CLUSTER: [(f"a100-{n:03d}", 8) for n in range(4)],
}
FAMILIES = set(expected_fingerprints(900))


# -- the generator -------------------------------------------------------------------------------


def test_every_range_function_of_the_family_queries_has_a_rule():
    recorded = {name for group in recording_groups(900) for name in _records(group)}
    for fallback in (False, True):
        texts = family_queries(Selection(), Selection(), 900, fallback=fallback, recorded=FAMILIES)
        used = {n for text in texts.values() for n in re.findall(r"gpuobs_gpu:[\w:]+", text)}
        assert used
        assert used <= recorded
        assert not re.search(r"_over_time\(|increase\(", texts["util"] + texts["health"])
    assert set(family_queries(Selection(), Selection(), 900)) - {"cpu"} == FAMILIES


def test_rules_sum_the_pod_labels_away_and_keep_what_the_collector_selects_on():
    for group in recording_groups(900):
        *rules, marker = group.rules
        for rule in rules:
            kept = re.match(r"(sum|max|min) without \(([^)]*)\) \(", rule.expr)
            assert kept, rule.expr
            dropped = set(kept.group(2).split(", "))
            assert dropped == set(POD_SPLIT_LABELS)
            assert not dropped & {*dcgm.HOST_LABELS, *dcgm.KEY_LABELS, "pod_uid", "cluster"}
            assert "[900s" in rule.expr
            assert rule.record.endswith("900s")
        assert marker.record == f"{MARKER}900s"
        assert dict(marker.labels) == {FAMILY_LABEL: group.family, RULES_LABEL: group.fingerprint}


def test_a_rule_set_names_its_window_and_changes_with_it():
    five = rules_yaml(300)
    assert "[300s]" in five
    assert "[900s]" not in five
    assert expected_fingerprints(300).keys() == expected_fingerprints(900).keys()
    assert set(expected_fingerprints(300).values()).isdisjoint(expected_fingerprints(900).values())


def test_the_rule_file_passes_promtool_check_rules(tmp_path):
    path = tmp_path / "rules.yml"
    path.write_text(rules_yaml(900))
    result = _promtool("check", "rules", str(path))
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {sum(len(g.rules) for g in recording_groups(900))} rules" in result.stdout


# -- detection, pure -----------------------------------------------------------------------------


def marker(family: str, fingerprint: str | None = None) -> dict[str, str]:
    expected = expected_fingerprints(900)[family]
    return {"cluster": "c", FAMILY_LABEL: family, RULES_LABEL: fingerprint or expected}


def test_fresh_markers_of_the_same_rules_are_read_recorded():
    t = 10_000.0
    verdict = judge([marker(f) for f in sorted(FAMILIES)], [t - 30] * len(FAMILIES), 900, t, 180)
    assert verdict.recorded == FAMILIES
    assert verdict.all_recorded
    assert verdict.deployed


def test_stale_absent_and_other_rules_fall_back_per_family():
    t = 10_000.0
    labels = [marker("util"), marker("memory"), marker("power", "0123456789ab")]
    verdict = judge(labels, [t - 30, t - 400, t - 30], 900, t, 180)
    assert verdict.recorded == {"util"}
    assert verdict.raw["memory"] == "recorded series stale (400 s old)"
    assert verdict.raw["power"].startswith("recorded by other rules")
    assert verdict.raw["xid"] == "no recorded series"
    assert verdict.deployed


def test_no_marker_at_all_is_rules_not_deployed():
    verdict = judge([], [], 900, 10_000.0, 180)
    assert not verdict.recorded
    assert not verdict.deployed
    assert set(verdict.raw) == FAMILIES


@pytest.mark.parametrize(
    ("settings", "named"),
    [
        ({"recording_rules": "sometimes"}, "metrics_config.recording_rules"),
        ({"recording_rules_max_age_s": 0}, "metrics_config.recording_rules_max_age_s"),
    ],
)
def test_bad_settings_are_refused_naming_the_key(settings, named):
    with pytest.raises(PrometheusConfigError, match=named):
        PrometheusConfig.parse({"url": "http://prometheus:9090", **settings})
    assert PrometheusConfig.parse({"url": "http://prometheus:9090"}).recording_rules == "auto"


# -- against a real Prometheus -------------------------------------------------------------------


@pytest.fixture(scope="module")
def recorded(prometheus, planted_history, make_module_prometheus):
    """A Prometheus with the planted history and the 900 s rules' series, backfilled by promtool
    over the session's Prometheus at t0 - 120 s, t0 - 60 s and t0."""
    return make_module_prometheus(rules_yaml(900))


@pytest.fixture(scope="module")
def make_module_prometheus(prometheus, planted_history, tmp_path_factory):
    servers = []

    def build(rules: str):
        base = tmp_path_factory.mktemp("prometheus-recorded")
        (base / "rules.yml").write_text(rules)
        t0 = planted_history.t0
        result = _promtool(
            "tsdb", "create-blocks-from", "rules",
            f"--url={prometheus.url}", f"--start={int(t0 - 120)}", f"--end={int(t0)}",
            "--eval-interval=60s", f"--output-dir={base / 'blocks'}", str(base / "rules.yml"),
            timeout=300,
        )  # fmt: skip
        assert result.returncode == 0, result.stdout + result.stderr
        server = start_prometheus(
            base / "server", history=planted_history.path, blocks=base / "blocks"
        )
        servers.append(server)
        return server

    yield build
    for server in servers:
        server.stop()
        shutil.rmtree(server.base, ignore_errors=True)


def collect(server, planted, cluster, *, at: float | None = None, **settings: Any):
    config = PrometheusConfig.parse(
        {"url": server.url, "matchers": {"cluster": cluster}, "scrape_interval_s": STEP, **settings}
    )
    when = datetime.fromtimestamp(at if at is not None else planted.t0, UTC)
    return collect_document(config, scheduler_doc(CLUSTERS.get(cluster, [])), as_of=when)


def evaluated(server, at: float) -> float:
    """The time of the rules' latest evaluation at ``at`` (promtool, like the rule manager,
    offsets a group's evaluations by a hash of its name)."""
    (marker, *_) = server.query(f"timestamp({MARKER}900s)", at)
    return float(marker["value"][1])


@pytest.mark.parametrize("cluster", sorted(CLUSTERS))
def test_recorded_series_give_the_raw_numbers(recorded, planted_history, cluster):
    at = evaluated(recorded, planted_history.t0)
    raw = collect(recorded, planted_history, cluster, at=at, recording_rules="off")
    over_rules = collect(recorded, planted_history, cluster, at=at, recording_rules="require")
    assert over_rules["collection"]["recording_rules"]["recorded"] == sorted(FAMILIES)
    assert "recording_rules" not in raw["collection"]
    assert raw["gpus"], "the planted cluster answers"
    assert_same(over_rules["gpus"], raw["gpus"])
    assert_same(over_rules["nodes"], raw["nodes"])


@pytest.mark.parametrize("host_label", ["auto", "Hostname"])
def test_a_shard_reads_its_hosts_recorded_series(recorded, planted_history, host_label):
    at = evaluated(recorded, planted_history.t0)
    nodes = [NodeInventory(name, gpus) for name, gpus in CLUSTERS["gap"]]

    def shard(mode: str):
        config = PrometheusConfig.parse(
            {"url": recorded.url, "matchers": {"cluster": "gap"}, "scrape_interval_s": STEP,
             "host_label": host_label, "recording_rules": mode}
        )  # fmt: skip
        return PrometheusSource(config).gpu_metrics(nodes, at, hosts=["ga-1"])

    over_rules, raw = shard("require"), shard("off")
    assert {g["node"] for g in raw.gpus} == {"ga-1"}
    assert over_rules.report["recording_rules"]["recorded"] == sorted(FAMILIES)
    assert_same(over_rules.gpus, raw.gpus)


def test_the_collector_reads_the_recorded_series(make_module_prometheus, planted_history):
    """Rules whose power sums are doubled (their markers as generated): a collection that reads
    recorded series reports twice the power, one that computes reports it as planted."""
    text = yaml.safe_load(rules_yaml(900))
    doubled = f"gpuobs_gpu:{dcgm.POWER_USAGE}:sum_sum_over_time900s"
    for rule in text["groups"][0]["rules"]:
        if rule["record"] == doubled:
            rule["expr"] = f"2 * {rule['expr']}"
    server = make_module_prometheus(yaml.safe_dump(text))
    over_rules = collect(server, planted_history, "steady", recording_rules="require")
    raw = collect(server, planted_history, "steady", recording_rules="off")
    assert over_rules["collection"]["families"]["recording-rules"]["queries"] == 1
    assert over_rules["collection"]["degraded"] == []
    assert [g["power_w"]["mean"] for g in over_rules["gpus"]] == pytest.approx(
        [2 * (100 + 200 * util) for util in STEADY_UTIL]
    )
    assert [g["power_w"]["mean"] for g in raw["gpus"]] == pytest.approx(
        [100 + 200 * util for util in STEADY_UTIL]
    )


def test_the_detection_is_asked_once_a_minute(recorded, planted_history):
    first = collect(recorded, planted_history, "steady")
    again = collect(recorded, planted_history, "steady")
    assert first["collection"]["families"]["recording-rules"]["queries"] == 1
    assert "recording-rules" not in again["collection"]["families"]
    assert again["collection"]["recording_rules"]["recorded"] == sorted(FAMILIES)


def test_the_detection_is_asked_again_after_a_minute(recorded, planted_history):
    at = evaluated(recorded, planted_history.t0)
    config = PrometheusConfig.parse(
        {"url": recorded.url, "matchers": {"cluster": "steady"}, "scrape_interval_s": STEP}
    )
    now = [1000.0]
    nodes = [NodeInventory("st-0", 4)]

    def asked() -> int:
        metrics = PrometheusSource(config, clock=lambda: now[0]).gpu_metrics(nodes, at)
        return metrics.report["families"].get("recording-rules", {}).get("queries", 0)

    assert asked() == 1
    now[0] += 59
    assert asked() == 0
    now[0] += 2
    assert asked() == 1


def test_stale_recorded_series_are_not_read(recorded, planted_history):
    later = evaluated(recorded, planted_history.t0) + 200  # within the lookback
    document = collect(recorded, planted_history, "steady", at=later, recording_rules_max_age_s=60)
    report = document["collection"]["recording_rules"]
    assert report["recorded"] == []
    assert report["deployed"]
    assert set(report["raw"].values()) == {"recorded series stale (200 s old)"}
    (problem,) = document["collection"]["degraded"]
    assert problem.startswith(f"recording rules not used for {len(FAMILIES)} famil(ies)")
    with pytest.raises(CollectError, match="recording_rules is require"):
        collect(
            recorded, planted_history, "steady", at=later, recording_rules="require",
            recording_rules_max_age_s=60,
        )  # fmt: skip


def test_rules_of_another_window_are_not_read(recorded, planted_history):
    document = collect(recorded, planted_history, "steady", window_s=600)
    report = document["collection"]["recording_rules"]
    assert report == {"recorded": [], "raw": report["raw"], "deployed": False}
    assert document["collection"]["degraded"] == []  # no rules of this window: not deployed


def test_a_cluster_without_rules_reads_raw_and_is_not_degraded(prometheus, planted_history):
    document = collect(prometheus, planted_history, "steady")
    assert document["collection"]["recording_rules"]["recorded"] == []
    assert document["collection"]["degraded"] == []
    assert document["gpus"][0]["util"]["mean"] == pytest.approx(0.9)


def test_a_family_without_its_rules_falls_back_alone(make_module_prometheus, planted_history):
    text = yaml.safe_load(rules_yaml(900))
    memory = next(g for g in recording_groups(900) if g.family == "memory")
    left_out = {rule.record for rule in memory.rules[:-1]} | {f"{MARKER}900s/memory"}
    (group,) = text["groups"]
    group["rules"] = [
        rule
        for rule in group["rules"]
        if rule["record"] not in left_out
        and f"{rule['record']}/{rule.get('labels', {}).get(FAMILY_LABEL)}" not in left_out
    ]
    partial = make_module_prometheus(yaml.safe_dump(text))
    at = evaluated(partial, planted_history.t0)
    document = collect(partial, planted_history, "bursty", at=at)
    report = document["collection"]["recording_rules"]
    assert report["raw"] == {"memory": "no recorded series"}
    assert "memory" not in report["recorded"]
    assert "util" in report["recorded"]
    (problem,) = document["collection"]["degraded"]
    assert "memory: no recorded series" in problem
    raw = collect(partial, planted_history, "bursty", at=at, recording_rules="off")
    assert_same(document["gpus"], raw["gpus"])


# -- helpers -------------------------------------------------------------------------------------


def assert_same(got: Any, want: Any, where: str = "") -> None:
    """Equal, floats within rounding (a sum of sums is added in another order)."""
    if isinstance(want, dict):
        assert isinstance(got, dict), where
        assert got.keys() == want.keys(), where
        for key in want:
            assert_same(got[key], want[key], f"{where}.{key}")
    elif isinstance(want, list):
        assert isinstance(got, list), where
        assert len(got) == len(want), where
        for i, (a, b) in enumerate(zip(got, want, strict=True)):
            assert_same(a, b, f"{where}[{i}]")
    elif isinstance(want, float) and isinstance(got, float):
        assert math.isclose(got, want, rel_tol=1e-9, abs_tol=1e-12), (where, got, want)
    else:
        assert got == want, (where, got, want)


def _records(group) -> list[str]:
    return [rule.record for rule in group.rules[:-1]]


def _promtool(*args: str, timeout: int = 60) -> subprocess.CompletedProcess:
    binary = require_binary("promtool", "apt-get install prometheus")
    return subprocess.run(
        [binary, *args], capture_output=True, text=True, timeout=timeout, check=False
    )
