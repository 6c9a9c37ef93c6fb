"""The shipped Grafana dashboard (deploy/grafana/gpuobs.json) is a Classic dashboard JSON model
that Grafana imports: the fields Grafana's "Dashboard JSON model" reference lists for a dashboard,
its panels (type, title, unique id, gridPos), targets (refId, expr) and template variables, a
``datasource`` template variable (no ``__inputs``: file and sidecar provisioning resolve nothing),
the ``cluster``/``pool``/``tenant`` variables, and a link from every panel back to gpuobs.
(That every expression returns data from a real Prometheus scraping gpuobs:
tests/app/notify/test_metrics_prometheus.py.)"""

from __future__ import annotations

import json

import jsonschema
import pytest
import yaml

from tests.conftest import REPO_ROOT

DASHBOARD = REPO_ROOT / "deploy" / "grafana" / "gpuobs.json"
ANNOTATIONS = REPO_ROOT / "deploy" / "grafana" / "annotations-infinity.json"

GRID = {
    "type": "object",
    "required": ["h", "w", "x", "y"],
    "properties": {
        "h": {"type": "integer", "minimum": 1},
        "w": {"type": "integer", "minimum": 1, "maximum": 24},
        "x": {"type": "integer", "minimum": 0, "maximum": 23},
        "y": {"type": "integer", "minimum": 0},
    },
}
DATASOURCE = {
    "type": "object",
    "required": ["type", "uid"],
    "properties": {"type": {"const": "prometheus"}, "uid": {"const": "${datasource}"}},
}
PANEL = {
    "type": "object",
    "required": ["id", "type", "title", "gridPos", "datasource", "targets", "links"],
    "properties": {
        "id": {"type": "integer"},
        "type": {"enum": ["timeseries", "table", "stat", "bargauge", "gauge", "barchart"]},
        "title": {"type": "string", "minLength": 1},
        "gridPos": GRID,
        "datasource": DATASOURCE,
        "targets": {
            "type": "array",
            "minItems": 1,
            "items": {
                "type": "object",
                "required": ["refId", "expr", "datasource"],
                "properties": {"refId": {"type": "string"}, "expr": {"type": "string"}},
            },
        },
        "links": {
            "type": "array",
            "minItems": 1,
            "items": {"type": "object", "required": ["title", "url"]},
        },
    },
}
CLASSIC = {
    "type": "object",
    "required": [
        "id",
        "uid",
        "title",
        "tags",
        "timezone",
        "editable",
        "graphTooltip",
        "panels",
        "time",
        "timepicker",
        "templating",
        "annotations",
        "refresh",
        "schemaVersion",
        "version",
        "links",
    ],
    "properties": {
        "id": {"type": "null"},
        "uid": {"type": "string", "pattern": "^[A-Za-z0-9_-]{1,40}$"},
        "title": {"type": "string"},
        "tags": {"type": "array", "items": {"type": "string"}},
        "editable": {"type": "boolean"},
        "graphTooltip": {"enum": [0, 1, 2]},
        "panels": {"type": "array", "minItems": 1, "items": PANEL},
        "time": {"type": "object", "required": ["from", "to"]},
        "templating": {
            "type": "object",
            "required": ["list"],
            "properties": {
                "list": {
                    "type": "array",
                    "items": {"type": "object", "required": ["name", "type", "query"]},
                }
            },
        },
        "annotations": {"type": "object", "required": ["list"]},
        "schemaVersion": {"type": "integer", "minimum": 36},
        "version": {"type": "integer"},
    },
}


@pytest.fixture(scope="module")
def dashboard() -> dict:
    return json.loads(DASHBOARD.read_text(encoding="utf-8"))


def test_the_dashboard_is_a_classic_json_model(dashboard) -> None:
    jsonschema.validate(dashboard, CLASSIC)
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))


@pytest.mark.parametrize("path", sorted((REPO_ROOT / "deploy" / "grafana").glob("*.json")))
def test_shipped_dashboards_need_no_import_step(path) -> None:
    text = path.read_text(encoding="utf-8")
    assert "__inputs" not in text
    assert "${DS_" not in text
    assert "${VAR_" not in text


def test_the_datasource_is_a_template_variable(dashboard) -> None:
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    # every query variable reads through it too
    for variable in variables.values():
        if variable["type"] == "query":
            assert variable["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
    assert variables["gpuobs_url"]["type"] == "textbox"


def test_the_cluster_label_is_chosen_honored_or_exported(dashboard) -> None:
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["cluster_label"]["query"] == "cluster,exported_cluster"
    expressions = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    assert all('cluster=~"$cluster"' not in e.replace("${cluster_label}", "") for e in expressions)
    assert all("${cluster_label}=~" in e for e in expressions)


def test_it_has_the_cluster_pool_and_tenant_variables(dashboard) -> None:
    names = {v["name"] for v in dashboard["templating"]["list"]}
    assert {"cluster", "pool", "tenant"} <= names


def test_panels_do_not_overlap(dashboard) -> None:
    cells = set()
    for panel in dashboard["panels"]:
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24, panel["title"]
        mine = {
            (x, y)
            for x in range(grid["x"], grid["x"] + grid["w"])
            for y in range(grid["y"], grid["y"] + grid["h"])
        }
        assert not cells & mine, f"{panel['title']} overlaps another panel"
        cells |= mine


def test_every_panel_links_back_to_a_gpuobs_page(dashboard) -> None:
    for panel in dashboard["panels"]:
        assert any(link["url"].startswith("${gpuobs_url}/") for link in panel["links"]), panel[
            "title"
        ]


def test_the_covered_topics_each_have_a_panel(dashboard) -> None:
    expressions = " ".join(t["expr"] for p in dashboard["panels"] for t in p["targets"])
    for family in (
        "gpuobs_last_hour_gpu_seconds",
        "gpuobs_allocation_ratio",
        "gpuobs_activity_ratio",
        "gpuobs_productive_ratio",
        "gpuobs_findings",
        "gpuobs_tenant_fair_share_ratio",
        "gpuobs_incidents_open",
        "gpuobs_recommendations",
        "gpuobs_cycle_last_duration_seconds",
        "gpuobs_cycle_duration_seconds_bucket",
        "gpuobs_cycle_last_success_timestamp_seconds",
    ):
        assert family in expressions, family


def test_the_provisioning_files_point_where_the_docs_say() -> None:
    provisioning = REPO_ROOT / "deploy" / "grafana" / "provisioning"
    (provider,) = yaml.safe_load((provisioning / "dashboards" / "gpuobs.yaml").read_text())[
        "providers"
    ]
    assert provider["type"] == "file"
    docs = (REPO_ROOT / "docs" / "integrations.md").read_text()
    assert provider["options"]["path"] + "/" in docs
    (source,) = yaml.safe_load((provisioning / "datasources" / "prometheus.yaml").read_text())[
        "datasources"
    ]
    # the dashboard's datasource variable opens on the default Prometheus
    assert source["type"] == "prometheus"
    assert source["isDefault"] is True
