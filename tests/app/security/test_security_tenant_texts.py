"""Issue #28, item 3: tenant scope covers every text. After a drain that evicted another tenant's
job, preemptions, evictions and notes naming other tenants' jobs, a manager crawls every page of
the URLconf, every GET operation of the API schema and the fairness CSV and PDF, and reads no
other tenant's job id, job name or tenant name anywhere (docs/architecture.md, "Roles and
security"). The world: tests/app/oncall/test_incidents.py's ``oncall`` cluster (hpo's ``victim``
hit by an Xid on n1; vision's ``latecomer`` placed there afterwards and ``bystander`` on n2)."""

from __future__ import annotations

import io
import itertools
import re
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import URLPattern, URLResolver, get_resolver
from pypdf import PdfReader

from diagnosis.access import evidence_for_user, scope_for_user, text_for_user
from diagnosis.actions.oncall.drain import drain_for_incident
from diagnosis.actions.oncall.incidents import add_incident_note
from diagnosis.actions.records.cycles import record_cycle
from diagnosis.models import (
    Finding,
    InboundClusterBatch,
    Incident,
    Job,
    Recommendation,
    RemediationPolicy,
    SchedulerEvent,
    Tenant,
)
from tests.app.oncall.test_incidents import (  # noqa: F401 (oncall: the fixture)
    after_the_xid,
    oncall,
    store_now,
    the_incident,
)
from tests.support.builders import AS_OF
from tests.support.world import logged_in_client

pytestmark = pytest.mark.django_db

FOREIGN = ("latecomer", "bystander", "vision", "research", "research-0323", "research-tp")
NOTE = "latecomer (vision) moved off n1; bystander and research/research-tp left alone"


@pytest.fixture
def after_a_drain(oncall, erin, mallory):  # noqa: F811 (the imported fixture)
    """The drain of n1 applied and its eviction of latecomer seen, a preemption of victim by
    another tenant's job, on-call's note naming other tenants' jobs; mallory manages hpo."""
    Tenant.objects.get(cluster=oncall, name="hpo").managers.add(mallory)
    research = Tenant.objects.create(cluster=oncall, name="research")
    for job in ("research-0323", "research-tp"):  # jobs of earlier cycles, named in messages
        Job.objects.create(
            cluster=oncall, external_id=job, name=job, tenant=research, submitted_at=AS_OF
        )
    # past the hit window (diagnosis/core/incident_hits.py): the eviction is the drain's doing
    record_cycle(oncall, after_the_xid(as_of=AS_OF + timedelta(minutes=6)).build())
    store_now(oncall, [("latecomer", [3])], minutes=7)
    incident = the_incident(oncall)
    rec = drain_for_incident(incident, erin)
    Recommendation.objects.filter(pk=rec.pk).update(state="applied")
    evicting = after_the_xid(as_of=AS_OF + timedelta(minutes=9))
    evicting.event("evicted", ago="1m", job="latecomer", node="n1", message="node n1 drained")
    record_cycle(oncall, evicting.build())
    for minutes, message in ((1, "Preempted by vision/latecomer"), (2, "by research-0323")):
        SchedulerEvent.objects.create(
            cluster=oncall,
            time=AS_OF - timedelta(minutes=30 + minutes),
            kind="preempted",
            job_external_id="victim",
            node="n1",
            reason="Preempted by vision/research-tp",
            message=message,
            dedup_key=f"victim-preempted-{minutes}",
        )
    add_incident_note(the_incident(oncall), erin, NOTE)
    return oncall


def _leaks(text: str) -> list[str]:
    return [name for name in FOREIGN if re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", text)]


def _values(cluster: Any) -> dict[str, list[Any]]:
    """Every value each URL parameter of the pages and the API may take in the world."""
    return {
        "name": [cluster.name],
        "cluster": [cluster.name],
        "finding_id": list(Finding.objects.filter(cluster=cluster).values_list("pk", flat=True)),
        "incident_id": list(Incident.objects.filter(cluster=cluster).values_list("pk", flat=True)),
        "job_id": list(Job.objects.filter(cluster=cluster).values_list("external_id", flat=True)),
        "tenant": list(Tenant.objects.filter(cluster=cluster).values_list("name", flat=True)),
        "queue": ["hpo", "vision"],
        "node": ["n1", "n2"],
        "index": [3],
        "uuid": ["GPU-n1-3"],
        "recommendation_id": list(
            Recommendation.objects.filter(cluster=cluster).values_list("pk", flat=True)
        ),
        "id": [cluster.pk],
        "policy_id": list(RemediationPolicy.objects.values_list("pk", flat=True)),  # autopilot
        "batch_id": list(InboundClusterBatch.objects.values_list("pk", flat=True)),  # inbound
    }


def _page_routes(patterns: list[Any], prefix: str = "") -> list[str]:
    """Every page route of the URLconf as written ("clusters/<slug:name>/jobs/<path:job_id>/");
    the API is crawled from its schema, the admin is not a manager's."""
    routes: list[str] = []
    for pattern in patterns:
        route = prefix + str(pattern.pattern)
        if isinstance(pattern, URLResolver):
            if not route.startswith(("admin/", "api/")):
                routes += _page_routes(pattern.url_patterns, route)
        elif isinstance(pattern, URLPattern) and "<slug:action>" not in route:  # POST only
            routes.append(route)
    return routes


def _filled(route: str, values: dict[str, list[Any]], parameter: str) -> list[str]:
    """``route`` with each of its parameters (matched by ``parameter``) given every value."""
    names = re.findall(parameter, route)
    urls = []
    for combination in itertools.product(*(values[name] for name in names)):
        url = route
        for name, value in zip(names, combination, strict=True):
            url = re.sub(parameter.replace(r"(\w+)", name, 1), str(value), url, count=1)
        urls.append(url)
    return urls


def _page_urls(cluster: Any) -> list[str]:
    values = _values(cluster)
    return [
        "/" + url
        for route in _page_routes(get_resolver().url_patterns)
        for url in _filled(route, values, r"<(?:\w+:)?(\w+)>")
    ]


def _api_urls(client: Any, cluster: Any) -> list[str]:
    schema = client.get("/api/v1/schema?format=json").json()
    values = _values(cluster)
    return [
        url
        for path, operations in schema["paths"].items()
        if "get" in operations
        for url in _filled(path, values, r"\{(\w+)\}")
    ]


def _text_of(response: Any) -> str:
    if response["Content-Type"].startswith("application/pdf"):
        return "\n".join(
            page.extract_text() for page in PdfReader(io.BytesIO(response.content)).pages
        )
    return response.content.decode()


def test_a_manager_reads_no_other_tenants_name_on_any_page_api_answer_or_export(
    after_a_drain, mallory, erin
):
    client = logged_in_client(mallory)
    urls = [*_page_urls(after_a_drain), *_api_urls(client, after_a_drain)]
    urls.append("/api/v1/annotations?from=0")  # the world's times are in the past
    read, leaks = set(), {}
    for url in urls:
        response = client.get(url)
        assert response.status_code < 500, url
        if response.status_code == 200:
            read.add(url)
            found = _leaks(_text_of(response))
            if found:
                leaks[url] = found
    assert leaks == {}
    incident = the_incident(after_a_drain).pk
    assert {  # the crawl read the texts in question (and on-call reads them whole)
        f"/clusters/oncall/incidents/{incident}/",
        "/clusters/oncall/jobs/victim/",
        "/clusters/oncall/fairness.csv",
        "/clusters/oncall/fairness.pdf",
        f"/api/v1/clusters/oncall/incidents/{incident}",
        "/api/v1/annotations?from=0",
    } <= read
    whole = logged_in_client(erin).get(f"/api/v1/clusters/oncall/incidents/{incident}").json()
    assert any("latecomer" in entry["text"] for entry in whole["history"])


def test_the_manager_reads_their_own_jobs_and_the_drained_node_in_the_timeline(
    after_a_drain, mallory
):
    incident = the_incident(after_a_drain)
    page = logged_in_client(mallory).get(f"/clusters/oncall/incidents/{incident.pk}/")
    text = page.content.decode()
    assert "victim" in text
    assert "preempted by the drain of n1" in text


def test_on_the_job_page_the_preempting_job_is_hidden(after_a_drain, mallory):
    page = logged_in_client(mallory).get("/clusters/oncall/jobs/victim/").content.decode()
    assert "Preempted by (another tenant)/(another tenant&#x27;s job)" in page


def test_a_plain_word_or_number_that_is_another_tenants_job_is_hidden(after_a_drain, mallory):
    Job.objects.filter(cluster=after_a_drain, external_id="bystander").update(external_id="4711")
    text = "Xid 79 x3 on n1/3 at 2026-11-29T08:00:00Z: victim, latecomer, 4711 of vision"
    assert text_for_user(mallory, after_a_drain.pk, text) == (
        "Xid 79 x3 on n1/3 at 2026-11-29T08:00:00Z: victim, (another tenant's job), "
        "(another tenant's job) of (another tenant)"
    )


def test_a_reading_role_reads_every_text_whole(bob):
    assert text_for_user(bob, 1, "job latecomer of vision") == "job latecomer of vision"


def test_an_evidence_is_looked_up_in_one_query(after_a_drain, mallory, django_assert_num_queries):
    evidence = {"jobs": [{"id": f"job-{n}", "tenant": "hpo"} for n in range(20)], "by": "latecomer"}
    scope_for_user(mallory, after_a_drain.pk)  # the allowlist, read once a request
    with django_assert_num_queries(1):
        shown = evidence_for_user(mallory, after_a_drain.pk, evidence)
    assert shown["by"] == "(another tenant's job)"


def test_a_name_of_the_managers_job_is_shown_though_another_tenants_job_has_it_too(
    after_a_drain, mallory
):
    victim = Job.objects.get(cluster=after_a_drain, external_id="victim")
    bystander = Job.objects.get(cluster=after_a_drain, external_id="bystander")
    assert victim.tenant.managers.filter(pk=mallory.pk).exists()
    assert not bystander.tenant.managers.filter(pk=mallory.pk).exists()
    Job.objects.filter(pk=bystander.pk).update(name="shared-name")
    Job.objects.filter(pk=victim.pk).update(name="shared-name")
    assert text_for_user(mallory, after_a_drain.pk, "shared-name and bystander") == (
        "shared-name and (another tenant's job)"
    )


def test_the_scope_reads_none_of_the_managers_jobs_before_a_text_names_them(after_a_drain, mallory):
    """Their tenants' jobs are looked up by the words a text holds, not all read for the
    allowlist (issue #35: 3,000 jobs of 30 days on every request before)."""
    with CaptureQueriesContext(connection) as captured:
        scope = scope_for_user(mallory, after_a_drain.pk)
    assert captured.captured_queries  # the scope was read here
    assert not any("diagnosis_job" in query["sql"] for query in captured.captured_queries)
    assert scope.text("victim") == "victim"  # looked up now: theirs
