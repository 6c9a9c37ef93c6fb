"""Issue #31: the schema's types are what the API answers. Every read operation of the schema is
asked of the live test server, as an admin, about a planted cluster (a cycle with an Xid-79 GPU,
so findings, an incident and a job exist, and a recommendation), and each answer is checked
against the schema by schemathesis's response-conformance check; so is each error body. The
autopilot's reads ask about a planted policy, the job forecast about a planted pending job's."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import pytest
import requests
import schemathesis
from schemathesis.specs.openapi.checks import response_schema_conformance, status_code_conformance

from diagnosis.actions.records.cycles import record_cycle
from diagnosis.actions.workflow.review import request_recommendation
from diagnosis.models import ApiToken, Finding, Incident, Job, JobForecast
from tests.support.autopilot import approved_policy
from tests.support.builders import SnapshotBuilder
from tests.support.records import make_recommendation
from tests.support.world import create_machine_user, sender_token

pytestmark = pytest.mark.django_db(transaction=True)

CHECKS = [response_schema_conformance, status_code_conformance]


@pytest.fixture
def planted(make_cluster):
    cluster = make_cluster("typed", metrics_kind="none")
    b = SnapshotBuilder(cluster="typed").node("n1", gpus=8).queue("team-a")
    b.job("j1", node="n1", util=0.01, ran="2h").gpu("n1", 0, xid=[(79, "1m")])
    b.job("j2", state="pending", gpus_per_pod=16, waited="30m")
    record_cycle(cluster, b.build())
    as_of = b.as_of
    JobForecast.objects.create(  # as the forecast task stores one (tests/app/records/...)
        cluster=cluster,
        job=Job.objects.get(cluster=cluster, external_id="j2"),
        as_of=as_of,
        start_at=as_of + timedelta(hours=2),
        low_at=as_of + timedelta(hours=1),
        high_at=as_of + timedelta(hours=3),
        horizon_s=6 * 3600,
        seeds=5,
        started_in=5,
        cause="too-big",
    )
    return cluster


@pytest.fixture
def admin_session(alice) -> Iterator[requests.Session]:
    with requests.Session() as session:  # closed: the server's thread lets its connection go
        session.headers["Authorization"] = "Token " + ApiToken.issue(alice, "typed", days=None)[1]
        yield session


@pytest.fixture
def schema(live_server, admin_session):
    raw = admin_session.get(f"{live_server.url}/api/v1/schema?format=json", timeout=30)
    assert raw.status_code == 200
    return schemathesis.openapi.from_dict(raw.json())


def test_every_read_answers_what_the_schema_says(
    schema, planted, live_server, admin_session, carol, dave
) -> None:
    rec = make_recommendation(planted)
    values = {
        "cluster": "typed",
        "id": rec.pk,
        "incident_id": Incident.objects.get(cluster=planted).pk,
        "finding_id": Finding.objects.filter(cluster=planted).first().pk,
        "job_id": "j1",
        "policy_id": approved_policy(carol, dave).pk,
    }
    # the job with a forecast is the pending one
    forecast = {"job_id": "j2"}
    # a received batch is read by the token that sent it (one that may send events there)
    sender = requests.Session()
    key = sender_token(create_machine_user("typed-sender"), "events", planted)
    sender.headers["Authorization"] = "Token " + key
    event = {"time": "2026-11-29T07:59:00Z", "kind": "failed_scheduling", "job": "j2"}
    posted = sender.post(
        f"{live_server.url}/api/v1/clusters/typed/events", json={"events": [event]}, timeout=30
    )
    assert posted.status_code == 202, posted.text[:300]
    values["batch_id"] = posted.json()["batch"]
    checked = []
    for result in schema.get_all_operations():
        operation = result.ok()
        if operation.method.upper() != "GET":
            continue
        names = [p.name for p in operation.path_parameters]
        known = {**values, **forecast} if operation.path.endswith("/forecast") else values
        case = operation.Case(path_parameters={name: known[name] for name in names})
        session = sender if "batch_id" in names else admin_session
        response = case.call(base_url=live_server.url, session=session)
        assert response.status_code == 200, (operation.path, response.text[:300])
        case.validate_response(response, checks=CHECKS)
        checked.append(operation.path)
    assert len(checked) >= 14
    for path in (
        "/api/v1/autopilot/policies/{policy_id}",
        "/api/v1/autopilot/policies/{policy_id}/replay",
        "/api/v1/clusters/{cluster}/jobs/{job_id}/forecast",
        "/api/v1/fleet/tenants",
        "/api/v1/clusters/{cluster}/inbound/{batch_id}",
    ):
        assert path in checked
    sender.close()
    # the replay's rows were checked too: it found the drain the Xid 79 proposed (held: the
    # node is all of its pool)
    policy = values["policy_id"]
    replay = admin_session.get(f"{live_server.url}/api/v1/autopilot/policies/{policy}/replay")
    rows = replay.json()["would_apply"] + replay.json()["held"]
    assert [row["target"] for row in rows] == ["node:n1"]


def test_the_error_bodies_are_what_the_schema_says(
    schema, planted, live_server, admin_session, carol
) -> None:
    harmful = make_recommendation(  # as tests/app/workflow/test_harm_confirmation.py plants it
        planted,
        "placement-policy",
        "pool:a100",
        {"from": "spread", "to": "binpack"},
        impact={"verdict": "harms", "harm": ["hpo's share 44.2% → 45.1%"], "summary": "Binpack."},
    )
    request_recommendation(harmful, carol)
    refusals = {
        ("GET", "/api/v1/clusters/{cluster}/findings"): ({"cluster": "typed"}, {"state": "x"}),
        ("GET", "/api/v1/recommendations/{id}/"): ({"id": 999_999}, {}),
        ("POST", "/api/v1/clusters/{cluster}/size"): ({"cluster": "typed"}, {}),  # none held
        ("POST", "/api/v1/recommendations/{id}/approve/"): ({"id": harmful.pk}, {}),  # harm
    }
    answers = []
    for (method, path), (parameters, query) in refusals.items():
        case = schema[path][method].Case(path_parameters=parameters, query=query)
        response = case.call(base_url=live_server.url, session=admin_session)
        assert 400 <= response.status_code < 500, (path, response.status_code)
        assert response.json()["detail"]
        case.validate_response(response, checks=CHECKS)
        answers.append(response.status_code)
    assert answers == [400, 404, 409, 409]
