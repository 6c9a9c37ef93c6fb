"""Issue #12, defect 2: a finding's tenant follows its evidence. An Xid finding first seen on a
GPU only tenant ``hpo`` held must not stay ``hpo``'s once another tenant's job is listed in its
evidence: the ``hpo`` manager then sees it nowhere (findings API, findings page, incidents page).
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from diagnosis.access import incidents_for_user
from diagnosis.actions.records.cycles import record_cycle
from diagnosis.actions.records.findings import tag_finding_tenants
from diagnosis.actions.records.tenancy import sync_cycle_tenants
from diagnosis.core.diagnose import diagnose
from diagnosis.models import Finding, Incident, Tenant
from tests.support.builders import AS_OF, SnapshotBuilder
from tests.support.world import logged_in_client

pytestmark = pytest.mark.django_db


def xid_snapshot(as_of, jobs):
    """Node n1 whose GPU 0 reported Xid 79 a minute ago; ``jobs``: (id, tenant), the first
    holding GPU 0, the next GPU 1 and so on."""
    b = SnapshotBuilder(as_of=as_of, cluster="shared").node("n1", gpus=8)
    b.queue("hpo").queue("vision")
    for index, (job_id, tenant) in enumerate(jobs):
        b.job(job_id, tenant=tenant, allocation=[("n1", [index])], gpus_per_pod=1)
    b.gpu("n1", 0, xid=[(79, "1m")])
    return b.build()


@pytest.fixture
def shared(make_cluster, mallory):
    cluster = make_cluster("shared", metrics_kind="none")
    record_cycle(cluster, xid_snapshot(AS_OF, [("hpo-1", "hpo")]))
    Tenant.objects.get(cluster=cluster, name="hpo").managers.add(mallory)
    return cluster


def xid_finding(cluster) -> Finding:
    return Finding.objects.get(cluster=cluster, rule_id="xid")


def test_a_finding_of_one_tenant_is_theirs(shared):
    assert xid_finding(shared).tenant.name == "hpo"


def test_another_tenants_job_in_the_evidence_hides_the_finding_from_the_manager(shared, mallory):
    # the GPU now serves another tenant's job: the same finding's evidence lists that job
    record_cycle(shared, xid_snapshot(AS_OF + timedelta(minutes=1), [("vision-1", "vision")]))
    finding = xid_finding(shared)
    assert any(j["id"] == "vision-1" for j in finding.evidence["jobs"])

    client = logged_in_client(mallory)
    api = client.get("/api/v1/clusters/shared/findings").json()
    listed = api["results"] if isinstance(api, dict) and "results" in api else api
    assert all("vision-1" not in str(row) for row in listed)
    assert client.get(f"/clusters/shared/findings/{finding.pk}/").status_code == 404
    assert "vision-1" not in client.get("/clusters/shared/incidents/").content.decode()
    assert "vision-1" not in client.get("/clusters/shared/findings/").content.decode()


def test_a_cycle_tags_its_findings_from_the_rows_it_recorded_not_a_second_read(shared):
    # issue #35: the tenancy step took the ~103,000 open findings of a 131,072-GPU cycle from the
    # database again; the findings step hands it each hit's row and tenant
    with CaptureQueriesContext(connection) as queries:
        record_cycle(shared, xid_snapshot(AS_OF + timedelta(minutes=1), [("vision-1", "vision")]))

    tagging_reads = [  # what the tagging read alone: each open row's id, key and tenant
        q["sql"]
        for q in queries
        if '"subject" AS "subject", "diagnosis_finding"."tenant_id" AS "tenant_id" FROM' in q["sql"]
    ]
    assert tagging_reads == []
    assert xid_finding(shared).tenant.name == "vision"


def test_a_new_finding_is_inserted_with_its_tenant_not_tagged_afterwards(make_cluster):
    # issue #35: cycle 1 of a 131,072-GPU cluster rewrote all ~103,000 new findings to tag them
    cluster = make_cluster("fresh", metrics_kind="none")

    with CaptureQueriesContext(connection) as queries:
        record_cycle(cluster, xid_snapshot(AS_OF, [("hpo-1", "hpo")]))

    tags = [q for q in queries if q["sql"].startswith('UPDATE "diagnosis_finding" SET "tenant_id"')]
    assert tags == []
    assert xid_finding(cluster).tenant.name == "hpo"


def test_a_hit_the_findings_step_did_not_hand_over_is_tagged_from_the_database(shared):
    finding = xid_finding(shared)
    snapshot = xid_snapshot(AS_OF + timedelta(minutes=1), [("vision-1", "vision")])
    diagnosis, _ = diagnose(snapshot)
    tenants = sync_cycle_tenants(shared, snapshot)
    vision = Tenant.objects.get(cluster=shared, name="vision")

    tagged = tag_finding_tenants(shared, diagnosis, tenants.finding_tenant_ids, {})

    assert tagged == 1
    finding.refresh_from_db()
    assert finding.tenant == vision


def test_the_tenant_comes_back_when_the_evidence_is_theirs_again(shared):
    record_cycle(shared, xid_snapshot(AS_OF + timedelta(minutes=1), [("vision-1", "vision")]))
    record_cycle(shared, xid_snapshot(AS_OF + timedelta(minutes=2), [("hpo-1", "hpo")]))
    assert xid_finding(shared).tenant.name == "hpo"


PLANTED = {
    "jobs": [{"id": "hpo-1", "tenant": "hpo"}, {"id": "vision-1", "tenant": "vision"}],
    "overtakers": ["vision-1"],
    "members": [{"job": "vision-1", "bound": 1}],
    "job_ids": ["hpo-1", "vision-1"],
    "tenants": ["hpo", "vision"],
    "nested": {"by_job": [{"id": "vision-1"}]},
}


@pytest.fixture
def planted(shared):
    """A finding of hpo's whose evidence names vision's job (and vision) in every shape."""
    record_cycle(
        shared,
        xid_snapshot(AS_OF + timedelta(minutes=1), [("hpo-1", "hpo"), ("vision-1", "vision")]),
    )
    return Finding.objects.create(
        cluster=shared,
        rule_id="starvation",
        subject="job:hpo-1",
        tenant=Tenant.objects.get(cluster=shared, name="hpo"),
        evidence=PLANTED,
        first_seen=AS_OF,
        last_seen=AS_OF,
    )


def test_a_manager_reads_no_other_tenants_job_in_any_evidence_shape(planted, mallory):
    client = logged_in_client(mallory)
    api = client.get("/api/v1/clusters/shared/findings").content.decode()
    page = client.get(f"/clusters/shared/findings/{planted.pk}/").content.decode()
    assert "hpo-1" in api
    assert "hpo-1" in page
    for text in (api, page):
        assert "vision-1" not in text
        assert "vision" not in text.replace("(another tenant", "")


def test_a_viewer_reads_the_whole_evidence(planted, bob):
    api = logged_in_client(bob).get("/api/v1/clusters/shared/findings")
    assert "vision-1" in api.content.decode()


def test_a_job_of_unknown_tenant_never_makes_an_incident_the_managers(shared, mallory):
    Incident.objects.create(
        cluster=shared,
        node="n1",
        fingerprint="alertmanager:test:unknown-job",
        details={"jobs": [{"id": "1234"}], "tenants": []},
    )
    Incident.objects.create(
        cluster=shared,
        node="n1",
        fingerprint="alertmanager:test:theirs",
        details={"jobs": [{"id": "hpo-1", "tenant": "hpo"}, {"id": "1234"}], "tenants": ["hpo"]},
    )
    visible = incidents_for_user(mallory, shared).filter(fingerprint__startswith="alertmanager:")
    assert list(visible.values_list("fingerprint", flat=True)) == ["alertmanager:test:theirs"]
    page = logged_in_client(mallory).get("/clusters/shared/incidents/").content.decode()
    assert "hpo-1" in page
    assert "1234" not in page


def test_a_manager_sees_an_incident_that_hit_their_job_and_another_tenants_scoped(shared, mallory):
    """Issue #32 item 5: an Xid under a gang of two tenants is the hpo manager's incident too;
    she reads it (menu, list, detail, API) with hpo's job and tenant alone."""
    incident = Incident.objects.create(
        cluster=shared,
        node="n1",
        gpu_index=0,
        fingerprint="alertmanager:test:both",
        details={
            "jobs": [{"id": "hpo-1", "tenant": "hpo"}, {"id": "vision-1", "tenant": "vision"}],
            "tenants": ["hpo", "vision"],
        },
    )
    client = logged_in_client(mallory)
    listed = client.get("/clusters/shared/incidents/").content.decode()
    detail = client.get(f"/clusters/shared/incidents/{incident.pk}/").content.decode()
    api = client.get(f"/api/v1/clusters/shared/incidents/{incident.pk}").json()

    assert 'href="/clusters/shared/incidents/"' in listed  # the menu offers Incidents
    assert f'href="/clusters/shared/incidents/{incident.pk}/"' in listed
    for text in (listed, detail, str(api)):
        assert "hpo-1" in text
        assert "vision" not in text
    assert (api["tenants"], [j["id"] for j in api["jobs"]]) == (["hpo"], ["hpo-1"])
