"""A real Prometheus (Debian's 2.42) scrapes the live test server's /metrics with a bearer token
and with basic auth, and PromQL over the scraped series gives back what the database holds;
every expression of the shipped Grafana dashboard returns data from it."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import yaml

from diagnosis.actions.notify.alertmanager import deliver_to_alertmanager
from diagnosis.core import fairness
from diagnosis.models import Cluster, ClusterCycle, Finding, Incident, PoolRollup, TenantRollup
from tests.conftest import REPO_ROOT
from tests.support.notify_world import open_xid_incident, record_cycles, scraper
from tests.support.processes import wait_until
from tests.support.prometheus_fixtures import PrometheusServer, start_prometheus
from tests.support.records import make_recommendation

pytestmark = [
    pytest.mark.prometheus,
    pytest.mark.django_db(transaction=True),
]

DASHBOARD = REPO_ROOT / "deploy" / "grafana" / "gpuobs.json"
# What Grafana puts in place of the dashboard's variables when everything is selected.
VARIABLES = {
    "${cluster_label}": "cluster",  # the scrape below keeps gpuobs's labels
    "$cluster": "outbound",
    "$pool": ".*",
    "$tenant": ".*",
    "$__rate_interval": "1m",
    "$__range": "1h",
    "$__interval": "15s",
}


def scrape_config(live_url: str, token: str, password: str) -> str:
    target = urlsplit(live_url).netloc
    jobs = [
        {
            "job_name": "gpuobs",
            "metrics_path": "/metrics",
            "scrape_interval": "1s",
            "authorization": {"type": "Bearer", "credentials": token},
            "static_configs": [{"targets": [target]}],
        },
        {
            "job_name": "gpuobs-basic",
            "metrics_path": "/metrics",
            "scrape_interval": "1s",
            "basic_auth": {"username": "prometheus", "password": password},
            "static_configs": [{"targets": [target]}],
        },
    ]
    return yaml.safe_dump({"global": {"scrape_interval": "1s"}, "scrape_configs": jobs})


@pytest.fixture
def outbound(make_cluster, settings) -> Cluster:
    """Cycles with a firing idle-allocation and a critical Xid, an open Xid incident, a proposed
    recommendation and a failed delivery to an Alertmanager that is not there."""
    cluster = make_cluster("outbound")
    record_cycles(cluster, ["idle", "idle", "idle"])
    open_xid_incident(cluster)
    make_recommendation(cluster, "queue-weight", "queue:team-b")
    settings.GPUOBS_ALERTMANAGER_URL = "http://127.0.0.1:9"  # the discard port: refused
    assert deliver_to_alertmanager(cluster).consecutive_failures == 1
    return cluster


@pytest.fixture
def scraping(outbound, live_server, tmp_path: Path) -> Iterator[PrometheusServer]:
    token, password = scraper()
    server = start_prometheus(tmp_path, config=scrape_config(live_server.url, token, password))
    try:
        for job in ("gpuobs", "gpuobs-basic"):
            wait_until(
                lambda job=job: server.query(f'up{{job="{job}"}} == 1'),
                what=f"Prometheus's {job} scrape to succeed\n{server.log_tail()}",
            )
        # enough scrapes for rate() over a minute
        wait_until(
            lambda: server.query('count_over_time(gpuobs_cycle_up{job="gpuobs"}[1m]) >= 3'),
            what="three scrapes",
        )
        yield server
    finally:
        server.stop()


def one(server: PrometheusServer, expression: str) -> float:
    result = server.query(expression)
    assert len(result) == 1, (expression, result)
    return float(result[0]["value"][1])


def test_promql_over_the_scraped_series_gives_the_database_values(outbound, scraping) -> None:
    base = '{job="gpuobs", cluster="outbound"}'
    open_findings = Finding.objects.filter(cluster=outbound, state__in=["pending", "firing"])
    assert open_findings.count() >= 2
    assert one(scraping, f"sum(gpuobs_findings{base})") == open_findings.count()
    assert (
        one(scraping, 'sum(gpuobs_findings{job="gpuobs", rule="idle-allocation", state="firing"})')
        == 1
    )

    # team-b's fairness ratio over the last hour of rollups, as the fairness report computes it
    cycle = ClusterCycle.objects.filter(cluster=outbound, ok=True).latest()
    tenant_rows = TenantRollup.objects.filter(cluster=outbound, tenant_name="team-b")
    cluster_rows = PoolRollup.objects.filter(cluster=outbound, pool="")
    tenant_sums = {c: sum(getattr(r, c) for r in tenant_rows) for c in fairness.TENANT_SUMS}
    cluster_sums = {c: sum(getattr(r, c) for r in cluster_rows) for c in fairness.CLUSTER_SUMS}
    expected = fairness.fairness_report({"team-b": tenant_sums}, cluster_sums).tenant("team-b")
    assert expected.ratio is not None
    ratio = one(scraping, 'gpuobs_tenant_fair_share_ratio{job="gpuobs", tenant="team-b"}')
    assert ratio == pytest.approx(expected.ratio, rel=1e-9)

    stamp = one(scraping, f"gpuobs_cycle_last_success_timestamp_seconds{base}")
    assert stamp == pytest.approx(cycle.ran_at.timestamp(), abs=1e-3)
    open_incidents = Incident.objects.filter(cluster=outbound, state__in=["open", "acknowledged"])
    assert open_incidents.count() >= 1
    assert one(scraping, f"sum(gpuobs_incidents_open{base})") == open_incidents.count()
    assert one(scraping, 'gpuobs_notification_failures_total{job="gpuobs"}') == 1
    # the basic-auth job scraped the same values
    assert one(scraping, 'sum(gpuobs_findings{job="gpuobs-basic"})') == open_findings.count()


def dashboard_expressions() -> list[tuple[str, str]]:
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    found = []
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            found.append((panel["title"], target["expr"]))
    return found


def substitute(expression: str) -> str:
    for name in sorted(VARIABLES, key=len, reverse=True):
        expression = expression.replace(name, VARIABLES[name])
    assert not re.search(r"\$\w", expression), f"unknown variable in {expression}"
    return expression


def test_every_dashboard_expression_returns_data(outbound, scraping) -> None:
    expressions = dashboard_expressions()
    assert len(expressions) >= 12
    empty = [
        (title, expression)
        for title, expression in expressions
        if not scraping.query(substitute(expression))
    ]
    assert not empty, f"panels whose queries return nothing: {empty}"
    # the template variables' queries too (label_values(metric{...}, label) = that metric's series)
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    for variable in dashboard["templating"]["list"]:
        if variable["type"] != "query":
            continue
        match = re.fullmatch(r"label_values\((.+), (\w+)\)", substitute(variable["definition"]))
        assert match, variable["definition"]
        series = scraping.query(substitute(match.group(1)))
        assert {s["metric"].get(match.group(2)) for s in series} - {None, ""}, variable["name"]
