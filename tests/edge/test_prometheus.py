"""The Prometheus source against a real Prometheus, backfilled with history whose every value is
known (tests/support/prometheus_fixtures.py): what it collects is what was planted."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from diagnosis.core import snapshot as snapshot_format
from diagnosis.edge.collection import collect_snapshot
from diagnosis.edge.sim import runtime as sim_runtime
from diagnosis.edge.sources.prometheus import PrometheusConfig, collect_document
from diagnosis.edge.sources.prometheus.client import PrometheusClient
from tests.support.prometheus_fixtures import (
    LOWER_UTIL,
    MIG_IDLE_INSTANCE,
    MIG_INSTANCES,
    SIM_SCENARIO_CLUSTER,
    STEADY_UTIL,
    WEIRD_CLUSTER,
    bursty_util,
    require_dcgm_data,
    sim_cluster,
)

pytestmark = pytest.mark.prometheus


def scheduler_doc(nodes: list[tuple[str, int]], model: str = "A100-SXM4-80GB") -> dict[str, Any]:
    return {
        "format": snapshot_format.FORMAT,
        "cluster": "test",
        "as_of": "2026-01-01T00:00:00Z",
        "nodes": [
            {"name": name, "pool": "a100", "gpu_model": model, "gpus": gpus, "state": "ready"}
            for name, gpus in nodes
        ],
        "jobs": [],
        "queues": [],
        "events": [],
    }


def collected(
    prometheus,
    planted,
    cluster: str,
    nodes: list[tuple[str, int]],
    *,
    at: datetime | None = None,
    **settings: Any,
) -> dict[str, Any]:
    config = PrometheusConfig.parse(
        {"url": prometheus.url, "matchers": {"cluster": cluster}, **settings}
    )
    document = collect_document(config, scheduler_doc(nodes), as_of=at or planted.as_of)
    snapshot_format.load(document)  # every document the source writes loads
    return document


def gpu(document: dict[str, Any], node: str, index: int) -> dict[str, Any]:
    return next(g for g in document["gpus"] if g["node"] == node and g["index"] == index)


def iso(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def test_steady_gpus_read_back_as_planted(prometheus, planted_history):
    document = collected(prometheus, planted_history, "steady", [("st-0", 4)])
    for index, util in enumerate(STEADY_UTIL):
        entry = gpu(document, "st-0", index)
        assert entry["util"] == pytest.approx({"mean": util, "p10": util, "p90": util})
        assert entry["tensor_active"]["mean"] == pytest.approx(util / 2)
        assert entry["fb_used_frac"]["mean"] == pytest.approx(40960 / 81920)
        assert entry["power_w"]["mean"] == pytest.approx(100 + 200 * util)
        assert entry["pcie_rx_Bps"]["mean"] == pytest.approx(1e9 * (index + 1))
        assert entry["pcie_tx_Bps"]["mean"] == pytest.approx(5e8)
        assert entry["nvlink_Bps"]["mean"] == pytest.approx(2e10)
    assert gpu(document, "st-0", 0)["temp_c"]["max"] == 80
    assert gpu(document, "st-0", 1)["temp_c"]["max"] == 41


def test_complete_fresh_data_is_judgeable(prometheus, planted_history):
    report = collected(prometheus, planted_history, "steady", [("st-0", 4)])["collection"]
    assert report["coverage"] == 1.0
    assert report["data_age_s"] == 0
    assert report["judgeable"] is True
    assert report["util_sources"] == {"prof": 4}


def test_lowercase_hostname_label_places_the_gpus(prometheus, planted_history):
    document = collected(prometheus, planted_history, "lower", [("lo-0", 2)])
    assert [gpu(document, "lo-0", i)["util"]["mean"] for i in range(2)] == list(LOWER_UTIL)
    assert document["collection"]["coverage"] == 1.0


def test_nodes_without_profiling_fields_fall_back_to_gpu_util(prometheus, planted_history):
    document = collected(prometheus, planted_history, "mixed", [("mx-prof", 2), ("mx-dev", 2)])
    without = gpu(document, "mx-dev", 0)
    assert without["util"]["mean"] == pytest.approx(0.4)
    assert "tensor_active" not in without
    assert without["nvlink_Bps"]["mean"] == pytest.approx(
        2e10
    )  # DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL
    assert gpu(document, "mx-prof", 0)["util"]["mean"] == pytest.approx(0.7)
    assert document["collection"]["util_sources"] == {"prof": 2, "dev": 2}


def test_bursty_utilisation_keeps_its_p10_and_p90(prometheus, planted_history):
    samples = bursty_util()[planted_history.history.window()]
    entry = gpu(collected(prometheus, planted_history, "bursty", [("bu-0", 1)]), "bu-0", 0)
    assert entry["util"]["mean"] == pytest.approx(samples.mean(), abs=1e-6)
    assert entry["util"]["p10"] == pytest.approx(np.quantile(samples, 0.1), abs=1e-6)
    assert entry["util"]["p90"] == pytest.approx(np.quantile(samples, 0.9), abs=1e-6)
    assert entry["util"]["p90"] - entry["util"]["p10"] > 0.5


def test_xids_that_appeared_in_the_window_with_their_times(prometheus, planted_history):
    t0 = planted_history.t0
    document = collected(prometheus, planted_history, "xid", [("xi-0", 4)])
    assert gpu(document, "xi-0", 0)["xid"] == [{"code": 79, "time": iso(t0 - 300)}]
    assert gpu(document, "xi-0", 2)["xid"] == [{"code": 48, "time": iso(t0 - 195)}]
    assert gpu(document, "xi-0", 3)["xid"] == [{"code": 94, "time": iso(t0 - 105)}]


def test_an_xid_held_from_before_the_window_is_not_reported(prometheus, planted_history):
    document = collected(prometheus, planted_history, "xid", [("xi-0", 4)])
    assert "xid" not in gpu(document, "xi-0", 1)


def test_a_gpu_that_stops_reporting_lowers_coverage(prometheus, planted_history):
    report = collected(prometheus, planted_history, "gap", [("ga-0", 8), ("ga-1", 2)])["collection"]
    assert (report["gpus_answered"], report["gpus_expected"]) == (9, 10)
    assert report["coverage"] == pytest.approx(0.9)
    assert report["judgeable"] is False
    assert "cover 9 of 10 GPUs" in report["problems"][0]


def test_data_older_than_two_scrape_intervals_is_not_judgeable(prometheus, planted_history):
    report = collected(prometheus, planted_history, "stale", [("sa-0", 2)])["collection"]
    assert report["data_age_s"] == 600
    assert report["judgeable"] is False
    assert any("600 s old" in p for p in report["problems"])


def instances(document: dict[str, Any], node: str, index: int) -> dict[int, dict[str, Any]]:
    """The MIG instance entries of one GPU, by GPU_I_ID."""
    return {
        g["mig"]["instance"]: g
        for g in document["gpus"]
        if g["node"] == node and g["index"] == index and "mig" in g
    }


def test_each_mig_instance_is_a_unit_of_its_own(prometheus, planted_history):
    document = collected(prometheus, planted_history, "mig", [("mg-0", 2)])
    split = instances(document, "mg-0", 0)
    share = {"3g.40gb": 3 / 7, "1g.10gb": 1 / 7}
    assert sorted(split) == [1, 7, 8]
    for profile, gi, util, total, used in (*MIG_INSTANCES, MIG_IDLE_INSTANCE):
        entry = split[int(gi)]
        assert entry["mig"]["profile"] == profile
        assert entry["mig"]["compute_fraction"] == pytest.approx(share[profile], abs=1e-6)
        assert entry["util"]["mean"] == pytest.approx(util)  # its own, not weighted
        assert entry["fb_used_frac"]["mean"] == pytest.approx(used / total)
        assert entry["power_w"]["mean"] == pytest.approx(250)  # device-wide: its GPU's
        assert "uuid" not in entry  # the exporter names no MIG UUID here
    assert not any(
        g["node"] == "mg-0" and g["index"] == 0 and "mig" not in g for g in document["gpus"]
    )
    assert gpu(document, "mg-0", 1)["util"]["mean"] == pytest.approx(0.8)


def test_workload_from_exported_pod_labels_across_a_pod_change(prometheus, planted_history):
    entry = gpu(collected(prometheus, planted_history, "workload", [("wl-0", 1)]), "wl-0", 0)
    assert entry["workload"] == "team-x/train-b/main"
    assert entry["util"]["mean"] == pytest.approx((30 * 0.2 + 31 * 0.8) / 61)


def test_label_values_are_escaped_exactly(prometheus, planted_history):
    document = collected(prometheus, planted_history, WEIRD_CLUSTER, [("wd-0", 1)])
    assert gpu(document, "wd-0", 0)["util"]["mean"] == pytest.approx(0.123)


def test_node_cpu_comes_from_node_exporter(prometheus, planted_history):
    document = collected(prometheus, planted_history, "steady", [("st-0", 4)])
    assert document["nodes"][0]["cpu_util"] == pytest.approx(0.75)


def test_queries_per_cycle_do_not_grow_with_the_cluster(prometheus, planted_history):
    small = collected(prometheus, planted_history, "bursty", [("bu-0", 1)])["collection"]
    nodes = [(f"a100-{n:03d}", 8) for n in range(4)]
    large = collected(prometheus, planted_history, SIM_SCENARIO_CLUSTER, nodes)["collection"]
    assert large["gpus_answered"] == 32
    assert small["queries"] == large["queries"] == 12 + 1  # and the recording rules' markers


def test_responses_come_gzip_compressed(prometheus, planted_history):
    nodes = [(f"a100-{n:03d}", 8) for n in range(4)]
    report = collected(prometheus, planted_history, SIM_SCENARIO_CLUSTER, nodes)["collection"]
    assert 0 < report["wire_bytes"] < report["bytes"] / 3


def test_a_window_ending_later_reads_the_same_samples_as_of_then(prometheus, planted_history):
    later = planted_history.as_of + timedelta(seconds=60)
    report = collected(prometheus, planted_history, "steady", [("st-0", 4)], at=later)
    assert report["collection"]["data_age_s"] == 60
    assert report["collection"]["judgeable"] is False


def test_the_simulators_exporter_reads_back_as_the_simulators_own_statistics(
    prometheus, planted_history
):
    cluster = sim_cluster(planted_history.t0, name="simsmall-read", url=prometheus.url)
    reference = SimpleNamespace(**{**vars(cluster), "name": "simsmall-ref", "metrics_kind": "sim"})
    try:
        document = collect_snapshot(cluster)
        expected = collect_snapshot(reference)
    finally:
        sim_runtime.forget(cluster.name)
        sim_runtime.forget(reference.name)
    assert document["as_of"] == expected["as_of"]
    assert document["collection"]["coverage"] == 1.0
    # The simulator rounds power and temperature to 0.1 in its snapshot; the exporter writes
    # temperatures as whole degrees, as dcgm-exporter does.
    tolerance = {"temp_c": 0.55, "power_w": 0.051}
    got = {(g["node"], g["index"]): g for g in document["gpus"]}
    for want in expected["gpus"]:
        entry = got[(want["node"], want["index"])]
        assert entry["uuid"] == want["uuid"]
        for metric in ("util", "tensor_active", "fb_used_frac", "power_w", "temp_c"):
            for stat, value in want.get(metric, {}).items():
                assert entry[metric][stat] == pytest.approx(
                    value, abs=tolerance.get(metric, 2e-4)
                ), (want["node"], want["index"], metric, stat)
        for metric in ("pcie_rx_Bps", "nvlink_Bps"):
            if metric in want:
                assert entry[metric]["mean"] == pytest.approx(want[metric]["mean"], rel=1e-2)


@pytest.mark.shared_data
@pytest.mark.parametrize(
    ("cluster", "node", "gpus", "util", "source"),
    [
        ("real-v100", "r6i3n0", 4, 0.0, "dev"),
        ("real-h100", "gsrh100-074", 1, 0.0, "prof"),
        ("real-a100", "k8s-dra-driver-cluster-worker", 1, 0.029399, "prof"),  # GPU_I_ID 8
    ],
)
def test_real_dcgm_exporter_excerpts(
    prometheus, planted_history, cluster, node, gpus, util, source
):
    require_dcgm_data()
    assert cluster in planted_history.excerpts, f"excerpt for {cluster} missing"
    document = collected(prometheus, planted_history, cluster, [(node, gpus)])
    entry = gpu(document, node, 0)
    assert entry["util"]["mean"] == pytest.approx(util, abs=1e-6)
    units = sum(1 for g in document["gpus"] if "util" in g)
    assert document["collection"]["util_sources"] == {source: units}


@pytest.mark.shared_data
def test_real_h100_excerpt_names_the_pods_of_its_mig_instances(prometheus, planted_history):
    require_dcgm_data()
    document = collected(prometheus, planted_history, "real-h100", [("gsrh100-074", 1)])
    split = instances(document, "gsrh100-074", 0)
    assert {gi: e.get("workload") for gi, e in split.items()} == {
        7: "model-playground-stg/text-embedding-predictor-00008-deployment-57946f6c67-vdtjl/"
        "kserve-container",
        8: None,
        9: "model-playground-stg/tts-predictor-00011-deployment-5554f75554-8j8pl/kserve-container",
    }
    assert {e["mig"]["parent_uuid"] for e in split.values()} == {
        "GPU-58e8f5ea-13cc-013a-d88f-2bcf5ae8bc77"
    }


def test_a_range_read_split_by_the_guards_equals_one_read(prometheus, planted_history):
    t0 = planted_history.t0
    selector = 'DCGM_FI_PROF_GR_ENGINE_ACTIVE{cluster="bursty"}'
    with PrometheusClient(PrometheusConfig.parse({"url": prometheus.url})) as client:
        whole = client.range(selector, t0 - 3600, t0, 15, "test")
        split = client.range(selector, t0 - 3600, t0, 15, "test", max_points=50)
        queries = len(client.report.queries)
    assert queries == 1 + 5  # 241 points in chunks of at most 50
    assert np.array_equal(split.timestamps, whole.timestamps)
    assert np.array_equal(split.values, whole.values)
    assert np.allclose(whole.values[0], bursty_util())
