"""GET /metrics: authentication (token, bearer, basic; tenant-scoped managers refused), the
families and their values from stored rows, a constant number of queries, bounded series."""

from __future__ import annotations

import base64
import os
import tomllib

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from prometheus_client.parser import text_string_to_metric_families
from rest_framework.authtoken.models import Token

import gpuobs
from diagnosis.actions.notify.alertmanager import deliver_to_alertmanager
from diagnosis.actions.upkeep.health import HEARTBEAT_KEY, redis_client, write_heartbeat
from diagnosis.models import ApiToken, Cluster, ClusterCycle, Finding, PoolRollup, Tenant
from tests.conftest import REPO_ROOT
from tests.support.notify_world import record_cycles, scraper
from tests.support.world import create_user

pytestmark = pytest.mark.django_db


def scrape(client: Client, **headers: str):
    return client.get("/metrics", **headers)


def samples(body: bytes) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(body.decode()):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def value(found, name: str, **labels: str) -> float:
    return found[(name, tuple(sorted(labels.items())))]


@pytest.fixture
def world(make_cluster) -> Cluster:
    cluster = make_cluster("outbound")
    record_cycles(cluster, ["idle", "idle", "idle"])
    return cluster


def test_anonymous_gets_401_and_a_tenant_manager_403(world, client) -> None:
    assert scrape(client).status_code == 401
    manager = create_user("mgr", roles=("manager",))
    Tenant.objects.get(cluster=world, name="team-a").managers.add(manager)
    token = Token.objects.create(user=manager).key
    assert scrape(client, HTTP_AUTHORIZATION=f"Bearer {token}").status_code == 403
    assert scrape(client, HTTP_AUTHORIZATION=basic("prometheus", "wrong")).status_code == 401


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


@pytest.mark.parametrize("scheme", ["Bearer", "Token", "Basic"])
def test_a_viewer_machine_user_scrapes_with_a_token_or_basic_auth(world, client, scheme) -> None:
    token, password = scraper()
    credential = basic("prometheus", password) if scheme == "Basic" else f"{scheme} {token}"
    response = scrape(client, HTTP_AUTHORIZATION=credential)
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain; version=0.0.4")
    assert b"# HELP gpuobs_findings " in response.content


def test_families_hold_what_the_database_holds(world, client) -> None:
    token, _ = scraper()
    found = samples(scrape(client, HTTP_AUTHORIZATION=f"Bearer {token}").content)
    idle = Finding.objects.get(cluster=world, rule_id="idle-allocation")
    assert idle.state == "firing"
    assert (
        value(
            found,
            "gpuobs_findings",
            cluster="outbound",
            rule="idle-allocation",
            severity=idle.severity,
            state="firing",
        )
        == 1
    )
    assert (
        value(
            found,
            "gpuobs_finding_info",
            cluster="outbound",
            rule="idle-allocation",
            subject="job:idle-1",
            severity=idle.severity,
            pool="a100",
            tenant="team-a",
            finding_id=str(idle.pk),
        )
        == 1
    )
    cycle = ClusterCycle.objects.filter(cluster=world, ok=True).latest()
    assert value(
        found, "gpuobs_cycle_last_success_timestamp_seconds", cluster="outbound"
    ) == pytest.approx(cycle.ran_at.timestamp())
    assert value(found, "gpuobs_allocation_ratio", cluster="outbound") == pytest.approx(
        cycle.allocation_utilization
    )
    # the last hour's rollups (the first cycle stands for its whole 15-minute window)
    rows = PoolRollup.objects.filter(cluster=world, pool="a100")
    assert rows.count() == 3
    idle_seconds = value(
        found,
        "gpuobs_last_hour_gpu_seconds",
        cluster="outbound",
        pool="a100",
        bucket="allocated-idle",
    )
    assert idle_seconds == pytest.approx(sum(r.idle_gpu_s for r in rows))
    assert idle_seconds == pytest.approx(8 * (900 + 600 + 600))
    assert 0 < value(found, "gpuobs_jain_index", cluster="outbound") <= 1
    # every stored cycle in the duration histogram; the version in gpuobs_build_info
    cycles = ClusterCycle.objects.filter(cluster=world)
    assert value(found, "gpuobs_cycle_duration_seconds_count", cluster="outbound") == cycles.count()
    assert (
        value(found, "gpuobs_cycle_duration_seconds_bucket", cluster="outbound", le="+Inf")
        == cycles.count()
    )
    assert value(found, "gpuobs_build_info", version=gpuobs.__version__) == 1


def test_the_version_is_pyproject_tomls() -> None:
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    assert project["version"] == gpuobs.__version__
    assert project["license"] == "Apache-2.0"


def test_queries_do_not_grow_with_clusters_or_findings(world, client, make_cluster) -> None:
    token, _ = scraper()
    auth = {"HTTP_AUTHORIZATION": f"Bearer {token}"}
    with CaptureQueriesContext(connection) as one:
        assert scrape(client, **auth).status_code == 200
    for name in ("second", "third"):
        record_cycles(make_cluster(name), ["idle", "idle", "gone"])
    with CaptureQueriesContext(connection) as three:
        body = scrape(client, **auth).content
    assert len(three.captured_queries) == len(one.captured_queries)
    assert b'cluster="third"' in body


def test_per_finding_series_are_capped_and_the_rest_counted(world, client, settings) -> None:
    settings.GPUOBS_METRICS_MAX_FINDING_SERIES = 1
    token, _ = scraper()
    found = samples(scrape(client, HTTP_AUTHORIZATION=f"Bearer {token}").content)
    firing = Finding.objects.filter(cluster=world, state="firing").count()
    assert firing >= 2
    info = [k for k in found if k[0] == "gpuobs_finding_info"]
    assert len(info) == 1
    # the most severe first: the critical Xid on a100-001/3
    assert dict(info[0][1])["rule"] == "xid"
    assert value(found, "gpuobs_finding_info_dropped", cluster="outbound") == firing - 1


def test_failed_notifications_are_counted(world, client, settings) -> None:
    settings.GPUOBS_ALERTMANAGER_URL = "http://127.0.0.1:9"  # refused
    deliver_to_alertmanager(world)
    deliver_to_alertmanager(world)
    token, _ = scraper()
    found = samples(scrape(client, HTTP_AUTHORIZATION=f"Bearer {token}").content)
    labels = {"cluster": "outbound", "channel": "alertmanager"}
    assert value(found, "gpuobs_notification_failures_total", **labels) == 2
    assert value(found, "gpuobs_notification_attempts_total", **labels) == 6  # 1 + 2 retries each
    assert value(found, "gpuobs_notification_consecutive_failures", **labels) == 2
    assert value(found, "gpuobs_notifications_sent_total", **labels) == 0


def test_a_hashed_api_token_scrapes_too(world, client) -> None:
    scraper()
    _, key = ApiToken.issue(User.objects.get(username="prometheus"), "scrape", days=0)
    assert scrape(client, HTTP_AUTHORIZATION=f"Bearer {key}").status_code == 200


def test_the_heartbeats_are_exported(world, client, settings) -> None:
    settings.REDIS_URL = os.environ.get("REDIS_URL") or pytest.skip("needs REDIS_URL")
    token, _ = scraper()
    redis_client(settings.REDIS_URL).delete(HEARTBEAT_KEY.format(component="worker"))
    write_heartbeat("beat")

    found = samples(scrape(client, HTTP_AUTHORIZATION=f"Bearer {token}").content)

    assert value(found, "gpuobs_component_up", component="worker") == 0
    assert value(found, "gpuobs_component_up", component="beat") == 1
    assert 0 <= value(found, "gpuobs_component_heartbeat_age_seconds", component="beat") < 60
