"""Issue #31: the OpenAPI schema describes the API a generated client needs -- the errors of
every operation with their one body, typed answers, every query filter, one operation per
incident action, clusters named by name -- and stays valid under drf-spectacular's own check."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.management import call_command

from diagnosis.api.errors import field_errors, summary
from diagnosis.api.incidents import ACTIONS
from diagnosis.api.urls import INCIDENT_ACTIONS
from tests.support.world import logged_in_client, token_client

pytestmark = pytest.mark.django_db

METHODS = ("get", "post", "put", "patch", "delete")


@pytest.fixture
def schema(bob) -> dict[str, Any]:
    answer = logged_in_client(bob).get("/api/v1/schema?format=json")
    assert answer.status_code == 200
    return answer.json()


def operations(schema: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [
        (method.upper(), path, operation)
        for path, item in schema["paths"].items()
        for method, operation in item.items()
        if method in METHODS
    ]


def resolve(schema: dict[str, Any], node: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in node:
        node = schema["components"]["schemas"][node["$ref"].rsplit("/", 1)[1]]
    return node


def body_of(schema: dict[str, Any], response: dict[str, Any]) -> dict[str, Any] | None:
    content = response.get("content") or {}
    if "application/json" not in content:
        return None
    return resolve(schema, content["application/json"]["schema"])


def query_parameters(schema: dict[str, Any], method: str, path: str) -> dict[str, Any]:
    operation = schema["paths"][path][method.lower()]
    return {p["name"]: p for p in operation.get("parameters", []) if p["in"] == "query"}


def test_the_schema_is_valid_without_a_warning(tmp_path) -> None:
    call_command("spectacular", "--validate", "--fail-on-warn", "--file", str(tmp_path / "s.yml"))
    assert (tmp_path / "s.yml").read_text().startswith("openapi: 3")


def test_every_operation_declares_its_client_errors_with_the_error_body(schema) -> None:
    missing, untyped = [], []
    for method, path, operation in operations(schema):
        codes = set(operation["responses"])
        if not {"401", "403", "429", "503"} <= codes or not any(c.startswith("4") for c in codes):
            missing.append(f"{method} {path}: {sorted(codes)}")
        for code, response in operation["responses"].items():
            body = body_of(schema, response) if code[0] in "45" else None
            if body is not None and "detail" not in body.get("required", []):
                untyped.append(f"{method} {path} {code}")
    assert len(operations(schema)) >= 30
    assert missing == []
    assert untyped == []


def test_an_operation_that_names_an_object_declares_404_and_one_with_input_400(schema) -> None:
    wrong = []
    for method, path, operation in operations(schema):
        codes = set(operation["responses"])
        if "{" in path and "404" not in codes:
            wrong.append(f"{method} {path} lacks 404")
        takes_input = query_parameters(schema, method, path).keys() - {"page"}
        if (takes_input or "requestBody" in operation) and "400" not in codes:
            wrong.append(f"{method} {path} lacks 400")
    assert wrong == []


def test_the_error_body_is_detail_and_errors_by_path(schema) -> None:
    error = schema["components"]["schemas"]["Error"]
    assert error["required"] == ["detail"]
    assert error["properties"]["detail"]["type"] == "string"
    errors = error["properties"]["errors"]
    assert errors["additionalProperties"] == {"type": "array", "items": {"type": "string"}}


def test_no_answer_is_an_untyped_object(schema) -> None:
    untyped = []
    for method, path, operation in operations(schema):
        for code, response in operation["responses"].items():
            body = body_of(schema, response)
            if body is not None and body.get("type") == "array":
                body = resolve(schema, body["items"])
            if body is not None and not body.get("properties"):
                untyped.append(f"{method} {path} {code}")
    assert untyped == []


@pytest.mark.parametrize(
    ("method", "path", "filters"),
    [
        ("GET", "/api/v1/recommendations/", {"state", "kind", "cluster", "awaiting"}),
        ("GET", "/api/v1/clusters/{cluster}/incidents", {"state"}),
        ("GET", "/api/v1/clusters/{cluster}/findings", {"state", "rule", "tenant"}),
        ("GET", "/api/v1/clusters/{cluster}/jobs", {"state", "tenant"}),
        ("GET", "/api/v1/clusters/{cluster}/reports/fairness", {"from", "to", "tenant", "period"}),
        ("GET", "/api/v1/annotations", {"from", "to", "cluster"}),
    ],
)
def test_the_filters_the_api_reads_are_declared(schema, method, path, filters) -> None:
    assert filters <= query_parameters(schema, method, path).keys()


def test_a_filter_of_fixed_words_is_an_enum(schema) -> None:
    recommendations = query_parameters(schema, "GET", "/api/v1/recommendations/")
    assert "approved" in recommendations["state"]["schema"]["enum"]
    assert recommendations["awaiting"]["schema"]["enum"] == ["me"]
    assert "queue-weight" in recommendations["kind"]["schema"]["enum"]
    incidents = query_parameters(schema, "GET", "/api/v1/clusters/{cluster}/incidents")
    assert "acknowledged" in incidents["state"]["schema"]["enum"]
    tenant = query_parameters(schema, "GET", "/api/v1/clusters/{cluster}/jobs")["tenant"]
    assert tenant["schema"]["type"] == "array"  # repeatable: ?tenant=a&tenant=b


def test_each_incident_action_is_its_own_operation(schema) -> None:
    assert set(INCIDENT_ACTIONS) == set(ACTIONS)
    actions = {
        path.rsplit("/", 1)[1]: item["post"]
        for path, item in schema["paths"].items()
        if path.startswith("/api/v1/clusters/{cluster}/incidents/{incident_id}/")
    }
    assert set(actions) == set(ACTIONS)
    assert "requestBody" not in actions["acknowledge"]
    note = actions["note"]["requestBody"]["content"]["application/json"]["schema"]
    assert resolve(schema, note)["required"] == ["text"]
    assert all("409" in operation["responses"] for operation in actions.values())


def test_a_cluster_is_named_the_same_way_in_every_path(schema) -> None:
    for path in schema["paths"]:
        if path.startswith("/api/v1/clusters/{"):
            assert path.startswith("/api/v1/clusters/{cluster}/"), path
    detail = schema["paths"]["/api/v1/clusters/{cluster}/"]["get"]
    (parameter,) = [p for p in detail["parameters"] if p["in"] == "path"]
    assert parameter["schema"]["type"] == "string"
    assert "deprecated" in parameter["description"]


def test_a_cluster_read_by_its_old_integer_id_still_answers_and_says_deprecated(
    bob, make_cluster
) -> None:
    cluster = make_cluster("berlin")
    client = token_client(bob)

    by_name = client.get("/api/v1/clusters/berlin/")
    by_id = client.get(f"/api/v1/clusters/{cluster.pk}/")

    assert by_name.status_code == by_id.status_code == 200
    assert by_id.json() == by_name.json()
    assert by_id["Deprecation"] == "true"
    assert by_id["Link"] == '</api/v1/clusters/berlin/>; rel="alternate"'
    assert "Deprecation" not in by_name
    assert client.get(f"/api/v1/clusters/{cluster.pk + 1}/").status_code == 404


def test_a_name_that_is_all_digits_wins_over_an_id(bob, make_cluster) -> None:
    first = make_cluster("alpha")
    make_cluster(str(first.pk))
    answer = token_client(bob).get(f"/api/v1/clusters/{first.pk}/")
    assert answer.json()["name"] == str(first.pk)
    assert "Deprecation" not in answer


def test_an_unknown_incident_action_is_no_path(bob, make_cluster) -> None:
    make_cluster("oncall")
    answer = token_client(bob).post("/api/v1/clusters/oncall/incidents/1/explode")
    assert answer.status_code == 404


def test_a_bad_filter_answers_the_error_body_naming_the_field(bob, make_cluster) -> None:
    make_cluster("demo")
    client = token_client(bob)
    for url in (
        "/api/v1/recommendations/?state=molten",
        "/api/v1/clusters/demo/findings?state=molten",
        "/api/v1/clusters/demo/jobs?state=molten",
        "/api/v1/clusters/demo/incidents?state=molten",
    ):
        answer = client.get(url)
        assert answer.status_code == 400, url
        assert list(answer.json()["errors"]) == ["state"], url
        assert answer.json()["detail"] == "invalid request: state", url


def test_nested_errors_are_flattened_to_paths() -> None:
    detail = {"events": {1: {"time": ["bad"], "kind": ["worse"]}}, "cursor": ["missing"]}
    assert field_errors(detail) == {
        "events[1].time": ["bad"],
        "events[1].kind": ["worse"],
        "cursor": ["missing"],
    }
    assert field_errors(["not a list of events"]) == {"non_field_errors": ["not a list of events"]}
    assert summary(field_errors(["not a list of events"])) == "not a list of events"
    assert (
        summary(field_errors(detail)) == "invalid request: events[1].time, events[1].kind, cursor"
    )
