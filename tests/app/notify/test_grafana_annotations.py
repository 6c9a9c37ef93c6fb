"""GET /api/v1/annotations: applied recommendations, drains and incidents with their times, for a
Grafana annotation query through the Infinity datasource (deploy/grafana/annotations-infinity.json
reads the fields this endpoint returns)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from diagnosis.models import Incident, Tenant
from tests.conftest import REPO_ROOT
from tests.support.notify_world import open_xid_incident, record_cycles, scraper
from tests.support.records import make_recommendation
from tests.support.world import create_user

pytestmark = pytest.mark.django_db

NOW = datetime.now(UTC).replace(microsecond=0)
PANEL = REPO_ROOT / "deploy" / "grafana" / "annotations-infinity.json"


def ms(moment: datetime) -> str:
    return str(int(moment.timestamp() * 1000))


@pytest.fixture
def changes(make_cluster):
    cluster = make_cluster("anno")
    record_cycles(cluster, ["idle"], end=NOW)
    incident = open_xid_incident(cluster)
    applied = make_recommendation(cluster, state="applied", applied_at=NOW - timedelta(minutes=30))
    drain = make_recommendation(
        cluster,
        "drain-node",
        "node:a100-001",
        {"from": "ready", "to": "drained"},
        state="verified",
        applied_at=NOW - timedelta(minutes=5),
    )
    old = make_recommendation(
        cluster,
        "queue-weight",
        "queue:team-a",
        state="verified",
        applied_at=NOW - timedelta(days=3),
    )
    make_recommendation(
        cluster, "placement-policy", "pool:a100", {"from": "spread", "to": "binpack"}
    )
    return cluster, incident, applied, drain, old


def client_for(token: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return client


def test_lists_changes_drains_and_incidents_in_the_range(changes) -> None:
    _, incident, applied, drain, _ = changes
    token, _ = scraper()
    response = client_for(token).get(
        "/api/v1/annotations",
        {
            "from": ms(NOW - timedelta(hours=6)),
            "to": ms(NOW + timedelta(minutes=1)),
            "cluster": "anno",
        },
    )
    assert response.status_code == 200
    items = response.json()
    kinds = [(i["kind"], i["time"]) for i in items]
    assert kinds == sorted(kinds, key=lambda k: -k[1])  # newest first
    by_kind = {i["kind"]: i for i in items}
    assert set(by_kind) == {"change", "drain", "incident"}
    # the proposed one and the one of three days ago are not listed; every open incident of the
    # cluster is (Alertmanager's, and the xid rule's own where the cycle opens one: issue #16)
    changes_listed = [i for i in items if i["kind"] != "incident"]
    assert len(changes_listed) == 2
    incidents = Incident.objects.filter(cluster=changes[0])
    assert len(items) - len(changes_listed) == incidents.count()
    alerted = int(incident.opened_at.timestamp() * 1000)
    by_kind["incident"] = next(i for i in items if i["kind"] == "incident" and i["time"] == alerted)
    assert by_kind["drain"]["time"] == int(drain.applied_at.timestamp() * 1000)
    assert "drain" in by_kind["drain"]["tags"]
    assert by_kind["change"]["title"] == f"queue-weight queue:team-b: {applied.state}"
    assert by_kind["change"]["url"].endswith(f"/recommendations/{applied.pk}/")
    assert by_kind["incident"]["time"] == int(incident.opened_at.timestamp() * 1000)
    assert by_kind["incident"]["timeEnd"] is None
    assert by_kind["incident"]["title"].startswith("Xid 79 incident on a100-001/3")


def test_accepts_rfc3339_and_refuses_nonsense(changes) -> None:
    token, _ = scraper()
    client = client_for(token)
    response = client.get("/api/v1/annotations", {"from": "2026-01-01T00:00:00Z"})
    assert response.status_code == 200
    listed = response.json()
    assert sum(1 for i in listed if i["kind"] != "incident") == 3  # the three-day-old change too
    refused = client.get("/api/v1/annotations", {"from": "yesterday"})
    assert refused.status_code == 400
    assert "from" in refused.json()["errors"]


def test_needs_a_login_and_scopes_a_manager(changes, client) -> None:
    assert client.get("/api/v1/annotations").status_code in (401, 403)
    cluster = changes[0]
    manager = create_user("mgr", roles=("manager",))
    Tenant.objects.get(cluster=cluster, name="team-a").managers.add(manager)
    items = client_for(Token.objects.create(user=manager).key).get("/api/v1/annotations").json()
    assert items == []  # no recommendations for a manager; the incident hit team-b's job


def test_the_shipped_infinity_query_reads_the_endpoint_fields(changes) -> None:
    panel = json.loads(PANEL.read_text(encoding="utf-8"))
    assert panel["datasource"]["type"] == "yesoreyeram-infinity-datasource"
    assert panel["target"]["url"] == "/api/v1/annotations"
    token, _ = scraper()
    (item, *_) = client_for(token).get("/api/v1/annotations").json()
    for column in panel["target"]["columns"]:
        assert column["selector"] in item
    assert {p["key"] for p in panel["target"]["url_options"]["params"]} == {"from", "to", "cluster"}


@pytest.mark.parametrize(
    ("selection", "clusters"),
    [
        (".*", {"anno", "other"}),  # the dashboard's allValue
        ("$__all", {"anno", "other"}),  # Grafana's own "All"
        ("anno,other", {"anno", "other"}),  # ${cluster:csv}
        ("{anno,other}", {"anno", "other"}),  # a multi-value variable's default (glob) format
        ("other", {"other"}),
    ],
)
def test_all_and_multi_value_cluster_selections(changes, make_cluster, selection, clusters) -> None:
    other = make_cluster("other")
    record_cycles(other, ["idle"], end=NOW)
    open_xid_incident(other)
    token, _ = scraper()
    items = client_for(token).get("/api/v1/annotations", {"cluster": selection}).json()
    assert {i["cluster"] for i in items} == clusters


def test_the_shipped_query_sends_the_cluster_selection_as_csv() -> None:
    panel = json.loads(PANEL.read_text(encoding="utf-8"))
    params = {p["key"]: p["value"] for p in panel["target"]["url_options"]["params"]}
    assert params["cluster"] == "${cluster:csv}"


@pytest.mark.parametrize(
    "moment", ["99999999999999999999", "²", "-1", "1e3", "0001-01-01T00:00:00Z"]
)
def test_a_time_out_of_range_or_not_ascii_digits_is_a_400(changes, moment) -> None:
    token, _ = scraper()
    refused = client_for(token).get("/api/v1/annotations", {"from": moment})
    assert refused.status_code == 400
    assert "from" in refused.json()["errors"]
