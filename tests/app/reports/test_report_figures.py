"""The fairness report's figures (diagnosis/reports/figures.py), built as plain dicts: each is a
valid plotly figure that plotly itself writes the same way, and the page embeds it as JSON.

The world: cluster ``figures`` with tenants ``hpo`` and ``vision`` over two cycles, the second
with ``vision`` idle (a gap-free series) and a tenant whose name is markup."""

from __future__ import annotations

import base64
import json
from datetime import timedelta

import numpy as np
import plotly.graph_objects as go
import pytest

from diagnosis.actions.records.cycles import record_cycle
from diagnosis.charts.figures import embed
from diagnosis.reports import figures
from diagnosis.reports.fairness_report import build_fairness_report
from diagnosis.reports.period import ReportPeriod
from tests.support.builders import AS_OF, SnapshotBuilder

pytestmark = pytest.mark.django_db

TENANTS = ("hpo", "vision", "<b>odd&co</b>")


def snapshot(as_of):
    b = SnapshotBuilder(as_of=as_of, cluster="figures").node("n1", gpus=8)
    for index, tenant in enumerate(TENANTS):
        b.queue(tenant)
        b.job(f"job-{index}", tenant=tenant, allocation=[("n1", [index])], gpus_per_pod=1)
    return b.build()


@pytest.fixture
def report(make_cluster, alice):
    cluster = make_cluster("figures", metrics_kind="none")
    record_cycle(cluster, snapshot(AS_OF - timedelta(minutes=1)))
    record_cycle(cluster, snapshot(AS_OF))
    period = ReportPeriod(start=AS_OF - timedelta(hours=1), end=AS_OF)
    return build_fairness_report(alice, cluster, period)


@pytest.mark.parametrize(
    "build", [figures.share_over_time, figures.waits_by_size_class, figures.tenant_breakdown]
)
def test_each_figure_is_what_plotly_makes_of_it(report, build) -> None:
    figure = build(report)

    validated = go.Figure(figure)  # raises on any property plotly does not know

    assert json.loads(validated.to_json()) == json.loads(json.dumps(figure))


def test_the_share_chart_draws_three_lines_per_tenant(report) -> None:
    traces = figures.share_over_time(report)["data"]

    assert len(traces) == 3 * len(TENANTS)
    assert {t["legendgroup"] for t in traces} == set(TENANTS)
    assert "&lt;b&gt;odd&amp;co&lt;/b&gt; usage" in {t["name"] for t in traces}  # never markup


def decoded(array: dict[str, str]) -> list[float]:
    return np.frombuffer(base64.b64decode(array["bdata"]), dtype="<f8").tolist()


def test_the_share_chart_keeps_each_tenants_points(report) -> None:
    usage = next(t for t in figures.share_over_time(report)["data"] if t["name"] == "hpo usage")

    assert len(decoded(usage["x"])) == 2  # a minute bin per cycle
    assert decoded(usage["y"]) == [0.125, 0.125]  # one GPU of the eight


def test_a_figure_embeds_as_json_a_script_cannot_escape(report) -> None:
    html = embed(figures.tenant_breakdown(report), "fairness-breakdown", label="chart")

    payload = html.split('type="application/json">', 1)[1].rsplit("</script>", 1)[0]
    assert "<b>" not in payload
    assert json.loads(payload)["data"][0]["type"] == "bar"
