"""Issue #31: the schema's types are what the API answers. Every read operation of the schema is
asked of the live test server, as an admin, about a planted cluster (a cycle with an Xid-79 GPU,
so findings, an incident and a job exist, and a recommendation), and each answer is checked
against the schema by schemathesis's response-conformance check; so is each error body."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import requests
import schemathesis
from schemathesis.specs.openapi.checks import response_schema_conformance, status_code_conformance

from diagnosis.actions.records.cycles import record_cycle
from diagnosis.actions.workflow.review import request_recommendation
from diagnosis.models import ApiToken, Finding, Incident
from tests.support.builders import SnapshotBuilder
from tests.support.records import make_recommendation

pytestmark = pytest.mark.django_db(transaction=True)

CHECKS = [response_schema_conformance, status_code_conformance]


@pytest.fixture
def planted(make_cluster):
    cluster = make_cluster("typed", metrics_kind="none")
    b = SnapshotBuilder(cluster="typed").node("n1", gpus=8).queue("team-a")
    b.job("j1", node="n1", util=0.01, ran="2h").gpu("n1", 0, xid=[(79, "1m")])
    record_cycle(cluster, b.build())
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
    schema, planted, live_server, admin_session
) -> None:
    rec = make_recommendation(planted)
    values = {
        "cluster": "typed",
        "id": rec.pk,
        "incident_id": Incident.objects.get(cluster=planted).pk,
        "finding_id": Finding.objects.filter(cluster=planted).first().pk,
        "job_id": "j1",
    }
    checked = []
    for result in schema.get_all_operations():
        operation = result.ok()
        if operation.method.upper() != "GET":
            continue
        names = [p.name for p in operation.path_parameters]
        case = operation.Case(path_parameters={name: values[name] for name in names})
        response = case.call(base_url=live_server.url, session=admin_session)
        assert response.status_code == 200, (operation.path, response.text[:300])
        case.validate_response(response, checks=CHECKS)
        checked.append(operation.path)
    assert len(checked) >= 14


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
