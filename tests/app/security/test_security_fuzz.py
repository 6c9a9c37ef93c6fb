"""Issue #12, "Done when": Schemathesis against the published OpenAPI schema, with request
bodies, as every person of the world (and anonymously), under a fixed example budget -- and no
answer is a 5xx. Requests go through Django's test client (no network); a drawn case is aimed at
the planted cluster half of the time, so the views get past their 404s."""

from __future__ import annotations

import json
import re
from typing import Any
from urllib.parse import urlencode

import pytest
import schemathesis
from django.conf import settings as django_settings
from django.contrib.auth.models import User
from django.test import Client, override_settings
from django.urls import URLResolver, resolve
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from diagnosis.actions.records.cycles import record_cycle
from diagnosis.api import urls as api_urls
from tests.support.builders import SnapshotBuilder
from tests.support.records import make_recommendation
from tests.support.world import WORLD, create_person, logged_in_client

pytestmark = pytest.mark.django_db

# The fixed budget: every operation of the schema, 3 cases each, for each of 8 callers (with 23
# operations: 552 requests). Each operation gets its share, so none goes unfuzzed.
EXAMPLES_PER_OPERATION = 3


@pytest.fixture
def planted(make_cluster):
    cluster = make_cluster("fuzz", metrics_kind="none")
    b = SnapshotBuilder(cluster="fuzz").node("n1", gpus=8).queue("team-a")
    b.job("j1", node="n1", util=0.01, ran="2h").gpu("n1", 0, xid=[(79, "1m")])
    record_cycle(cluster, b.build())
    make_recommendation(cluster)
    return cluster


@pytest.fixture
def api_schema(planted):
    admin = create_person("alice")
    raw = logged_in_client(admin).get("/api/v1/schema?format=json")
    assert raw.status_code == 200
    return schemathesis.openapi.from_dict(json.loads(raw.content))


def _routes(patterns: list[Any]) -> set[str]:
    names: set[str] = set()
    for pattern in patterns:
        if isinstance(pattern, URLResolver):
            names |= _routes(pattern.url_patterns)
        elif pattern.name:
            names.add(pattern.name)
    return names


def test_the_schema_describes_every_api_route(api_schema):
    """What the schema leaves out, the fuzzer never reaches (issue #28: the annotations)."""
    described = set()
    for path in api_schema.raw_schema["paths"]:
        concrete = re.sub(r"\{[^}]*\}", "1", path.removeprefix("/api/v1/"))
        described.add(resolve("/api/v1/" + concrete).url_name)
    assert _routes(api_urls.urlpatterns) - {"schema", "api-root"} == described


def send(client: Client, case: Any):
    headers = {k: v for k, v in (case.headers or {}).items() if k.lower() != "content-type"}
    kwargs: dict[str, Any] = {"data": case.query or {}}
    if case.method.upper() in ("POST", "PUT", "PATCH"):
        body = case.body if case.body is not None else {}
        kwargs = {"data": json.dumps(body, default=str), "content_type": "application/json"}
        path = case.formatted_path
        if case.query:
            path += "?" + "&".join(f"{k}={v}" for k, v in case.query.items())
        return client.generic(case.method.upper(), path, **kwargs, headers=headers)
    return client.generic(
        case.method.upper(), case.formatted_path, headers=headers, **_query(case.query)
    )


def _query(query: dict | None) -> dict[str, Any]:
    return {"QUERY_STRING": urlencode(query or {}, doseq=True)}


@pytest.mark.parametrize("person", [*WORLD, None], ids=[*WORLD, "anonymous"])
def test_no_api_answer_is_a_server_error(api_schema, planted, person):
    user = None
    if person is not None:  # alice exists already: she read the schema
        user = User.objects.filter(username=person).first() or create_person(person)
    client = logged_in_client(user) if user else Client()
    if person == "mallory":
        planted.tenants.get(name="team-a").managers.add(user)
    failures: list[str] = []

    def check(case, aim):
        if aim and "cluster" in (case.path_parameters or {}):
            case.path_parameters["cluster"] = "fuzz"
        response = send(client, case)
        if response.status_code >= 500:
            failures.append(f"{case.method} {case.formatted_path} -> {response.status_code}")

    fuzz = settings(
        max_examples=EXAMPLES_PER_OPERATION,
        deadline=None,
        database=None,
        derandomize=True,
        suppress_health_check=list(HealthCheck),
    )
    framework = {**django_settings.REST_FRAMEWORK, "DEFAULT_THROTTLE_RATES": {}}
    with override_settings(REST_FRAMEWORK=framework):  # the throttles are not under test here
        for operation in api_schema.get_all_operations():
            fuzz(given(case=operation.ok().as_strategy(), aim=st.booleans())(check))()
    assert failures == []
