"""The Prometheus source's pure parts: escaping and the label allowlist, settings that name the
bad field, the range guards, the column-wise parser, Xid detection, dcgm label normalisation."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from diagnosis.edge.errors import ConfigError
from diagnosis.edge.sources.dcgm import fields as dcgm
from diagnosis.edge.sources.dcgm.exporter import MetricFamily, Series, exposition, write_openmetrics
from diagnosis.edge.sources.dcgm.stats import xid_events
from diagnosis.edge.sources.prometheus import PrometheusConfig
from diagnosis.edge.sources.prometheus.client import plan_range
from diagnosis.edge.sources.prometheus.promql import (
    Matcher,
    PromQLError,
    Selection,
    quote,
    regex_alternatives,
)
from diagnosis.edge.sources.prometheus.queries import family_queries
from diagnosis.edge.sources.prometheus.wire import Matrix, parse_matrix, parse_vector

# -- escaping ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "literal"),
    [
        ("plain", '"plain"'),
        ('say "hi"', '"say \\"hi\\""'),
        ("back\\slash", '"back\\\\slash"'),
        ("two\nlines", '"two\\nlines"'),
        ("bell\x07", '"bell\\u0007"'),
        ('"} or vector(1) or {x="', '"\\"} or vector(1) or {x=\\""'),
    ],
)
def test_quote_escapes_label_values(value, literal):
    assert quote(value) == literal


def test_regex_matchers_match_the_values_literally():
    assert regex_alternatives(["gpu-1.example", "a|b", "x.*"]) == r'"a\\|b|gpu-1\\.example|x\\.\\*"'


def test_label_names_come_from_the_allowlist():
    with pytest.raises(PromQLError, match="not on the allowlist"):
        Matcher.equal("secret_label", "x").render()


def test_declared_extra_label_names_are_allowed():
    assert Matcher.equal("rack", "r1").render(["rack"]) == 'rack="r1"'


def test_label_names_must_be_names_even_when_declared():
    with pytest.raises(PromQLError, match="not a Prometheus label name"):
        Matcher.equal('x="1"} or {y', "v").render(['x="1"} or {y'])


def test_alternative_selections_are_joined_with_or():
    selection = Selection(
        (Matcher.equal("cluster", "c"),),
        ((Matcher.any_of("Hostname", ["n1"]),), (Matcher.any_of("hostname", ["n1"]),)),
    )
    assert selection.over("rate({s}[1m])", "m") == (
        '(rate(m{cluster="c",Hostname=~"n1"}[1m])) or (rate(m{cluster="c",hostname=~"n1"}[1m]))'
    )


def test_a_collection_is_a_fixed_set_of_queries():
    config = PrometheusConfig.parse({"url": "http://p:9090", "matchers": {"cluster": "x"}})
    queries = family_queries(config.selection(), config.node_selection(), 900)
    assert sorted(queries) == sorted(
        [
            "inventory",
            "util",
            "tensor",
            "memory",
            "power",
            "temperature",
            "pcie",
            "nvlink",
            "xid",
            "cpu",
            "hardware",
            "health",
        ]
    )
    assert all('cluster="x"' in text for text in queries.values())


# -- settings ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({}, "metrics_config.url: required"),
        ({"url": "ftp://x"}, "metrics_config.url: expected an http(s) URL"),
        ({"url": "http://p", "timeout_s": "soon"}, "metrics_config.timeout_s: expected a number"),
        ({"url": "http://p", "min_coverage": 2}, "metrics_config.min_coverage: must lie in"),
        ({"url": "http://p", "host_label": "node"}, "metrics_config.host_label: one of"),
        ({"url": "http://p", "matchers": {"rack": "1"}}, "label 'rack' is not on the allowlist"),
        ({"url": "http://p", "token": "x"}, "metrics_config.token: unknown setting"),
        (
            {"url": "http://p", "ca_file": "/x.pem"},
            "metrics_config.ca_file: must name a file relative",
        ),
    ],
)
def test_settings_errors_name_the_field(raw, message):
    with pytest.raises(ConfigError) as raised:
        PrometheusConfig.parse(raw)
    assert message in str(raised.value)
    assert raised.value.permanent


def test_secrets_come_from_the_environment(monkeypatch):
    config = PrometheusConfig.parse(
        {"url": "https://p", "bearer_token_env": "GPUOBS_SECRET_TEST_TOKEN"}
    )
    monkeypatch.setenv("GPUOBS_SECRET_TEST_TOKEN", "s3cret")
    monkeypatch.setenv("GPUOBS_SECRET_BINDINGS", "GPUOBS_SECRET_TEST_TOKEN=prometheus@p")
    assert config.auth() == ({"Authorization": "Bearer s3cret"}, None)
    assert "s3cret" not in json.dumps(config.as_dict())


def test_a_missing_secret_names_its_variable(monkeypatch):
    monkeypatch.delenv("GPUOBS_SECRET_TEST_TOKEN", raising=False)
    monkeypatch.setenv("GPUOBS_SECRET_BINDINGS", "GPUOBS_SECRET_TEST_TOKEN=prometheus")
    config = PrometheusConfig.parse(
        {"url": "https://p", "bearer_token_env": "GPUOBS_SECRET_TEST_TOKEN"}
    )
    with pytest.raises(ConfigError, match="GPUOBS_SECRET_TEST_TOKEN is not set"):
        config.auth()


# -- guards --------------------------------------------------------------------------------------


def test_a_short_range_is_one_query():
    plan = plan_range(0, 900, 15, series=100)
    assert plan.queries == 1
    assert plan.chunks == ((0.0, 61),)


def test_more_than_11000_points_per_series_are_split_in_time():
    plan = plan_range(0, 30 * 86400, 60, series=10)  # 43,201 points
    assert len(plan.chunks) == 4
    assert all(points <= 11_000 for _, points in plan.chunks)
    assert sum(points for _, points in plan.chunks) == 43_201


def test_more_than_25_million_samples_are_split():
    plan = plan_range(0, 7 * 86400, 60, series=20_000)  # 10,081 points x 20,000 series
    assert all(points * 20_000 / plan.series_batches <= 25_000_000 for _, points in plan.chunks)
    assert sum(points for _, points in plan.chunks) == 10_081


def test_even_one_point_of_too_many_series_is_split_by_series():
    plan = plan_range(0, 60, 60, series=60_000_000)
    assert plan.series_batches == 3


# -- parsing -------------------------------------------------------------------------------------


def matrix_body(warnings: list[str] | None = None) -> bytes:
    payload = {
        "status": "success",
        "data": {
            "resultType": "matrix",
            "result": [
                {
                    "metric": {"UUID": "GPU-a", "note": 'with "values":[ inside'},
                    "values": [[100, "0.5"], [115, "NaN"], [130, "+Inf"]],
                },
                {"metric": {"UUID": "GPU-b"}, "values": [[115, "2"]]},
            ],
        },
    }
    if warnings:
        payload["warnings"] = warnings
    return json.dumps(payload, separators=(",", ":")).encode()


def test_range_results_parse_onto_the_step_grid():
    matrix, warnings = parse_matrix(matrix_body(), 100, 15, 3)
    assert matrix.labels[0] == {"UUID": "GPU-a", "note": 'with "values":[ inside'}
    assert np.array_equal(matrix.timestamps, [100, 115, 130])
    assert matrix.values[0, 0] == 0.5
    assert math.isnan(matrix.values[0, 1])
    assert matrix.values[0, 2] == math.inf
    assert np.isnan(matrix.values[1, [0, 2]]).all()
    assert matrix.values[1, 1] == 2
    assert warnings == []


def test_range_results_keep_their_warnings():
    _, warnings = parse_matrix(matrix_body(["partial response: store down"]), 100, 15, 3)
    assert warnings == ["partial response: store down"]


def test_instant_results_parse_column_wise():
    body = json.dumps(
        {
            "status": "success",
            "data": {
                "resultType": "vector",
                "result": [{"metric": {"a": "1"}, "value": [1, "0.25"]}],
            },
            "warnings": ["careful"],
        }
    ).encode()
    vector, warnings = parse_vector(body)
    assert vector.labels == [{"a": "1"}]
    assert vector.values.tolist() == [0.25]
    assert warnings == ["careful"]


# -- Xids ----------------------------------------------------------------------------------------


def xid_matrix(rows: dict[tuple[str, ...], list[float]]) -> Matrix:
    """Xid series on a 15 s grid from t=100: (src, uuid[, err_code or xid]) -> values."""
    labels = []
    for key in rows:
        src, uuid, *rest = key
        entry = {"src": src, "UUID": uuid}
        if rest:
            entry["err_code" if src == "gauge" else "xid"] = rest[0]
        labels.append(entry)
    values = np.array(list(rows.values()), dtype=float)
    return Matrix(labels, 100 + 15 * np.arange(values.shape[1], dtype=float), values)


def events_of(matrix: Matrix, window_start: float):
    return xid_events(matrix.labels, matrix.timestamps, matrix.values, window_start)


def test_a_gauge_that_turns_to_an_xid_in_the_window_is_one_event():
    events = events_of(xid_matrix({("gauge", "g"): [0, 0, 79, 79]}), 115)
    assert [(e.code, e.time) for e in events] == [(79, 130)]


def test_a_gauge_holding_an_old_xid_is_no_event():
    assert events_of(xid_matrix({("gauge", "g"): [13, 13, 13, 13]}), 115) == []


def test_a_new_err_code_series_is_an_event_with_its_code():
    rows = {
        ("gauge", "g", "0"): [0, 0, np.nan, np.nan],
        ("gauge", "g", "48"): [np.nan] * 2 + [48, 48],
    }
    events = events_of(xid_matrix(rows), 115)
    assert [(e.code, e.time) for e in events] == [(48, 130)]


def test_the_exporters_xid_counter_counts_when_it_grows():
    events = events_of(xid_matrix({("count", "g", "94"): [0, 1, 1, 0]}), 100)
    assert [(e.code, e.time) for e in events] == [(94, 115)]


# -- dcgm labels ---------------------------------------------------------------------------------


def test_exported_pod_labels_win_over_the_exporters_own_pod():
    labels = {
        "pod": "dcgm-exporter-x",
        "namespace": "gpu-operator",
        "exported_pod": "train-0",
        "exported_namespace": "team-a",
    }
    assert dcgm.workload_of(labels).as_text() == "team-a/train-0"


def test_slurm_jobs_are_named_by_hpc_job():
    assert dcgm.workload_of({"hpc_job": "4711"}).as_text() == "hpc_job:4711"


def test_either_host_and_uuid_spelling_is_read():
    identity = dcgm.normalize({"hostname": "n1", "uuid": "GPU-1", "gpu": "3", "GPU_I_ID": "7"})
    assert (identity.host, identity.uuid, identity.gpu, identity.key) == (
        "n1",
        "GPU-1",
        3,
        ("GPU-1", "7"),
    )


@pytest.mark.parametrize(
    ("profile", "model", "share"),
    [("3g.40gb", "NVIDIA A100-SXM4-80GB", 3 / 7), ("1g.6gb", "NVIDIA A30", 1 / 4), ("", "x", 0)],
)
def test_mig_profiles_hold_a_share_of_the_gpu(profile, model, share):
    assert dcgm.mig_share(profile, model) == pytest.approx(share)


def test_short_and_full_host_names_find_each_other():
    index = dcgm.host_index(["gpu-1.example.org", "gpu-2"])
    assert dcgm.node_for_host("gpu-1", index) == "gpu-1.example.org"
    assert dcgm.node_for_host("gpu-2.example.org", index) == "gpu-2"


# -- the exporter's formats ----------------------------------------------------------------------


def family() -> MetricFamily:
    return MetricFamily(
        dcgm.GPU_UTIL,
        [Series({"gpu": "0", "Hostname": 'n"1'}, np.array([10.0, 25.0]), np.array([40.0, 41.0]))],
    )


def test_exposition_writes_help_type_and_the_last_value():
    assert exposition([family()]) == (
        "# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).\n"
        "# TYPE DCGM_FI_DEV_GPU_UTIL gauge\n"
        'DCGM_FI_DEV_GPU_UTIL{gpu="0",Hostname="n\\"1"} 41\n'
    )


def test_openmetrics_history_has_timestamps_and_ends_with_eof(tmp_path):
    path = tmp_path / "h.om"
    with open(path, "w") as out:
        assert write_openmetrics([family()], out) == 2
    lines = path.read_text().splitlines()
    assert lines[2:] == [
        'DCGM_FI_DEV_GPU_UTIL{gpu="0",Hostname="n\\"1"} 40 10',
        'DCGM_FI_DEV_GPU_UTIL{gpu="0",Hostname="n\\"1"} 41 25',
        "# EOF",
    ]
