"""Issue #19, item 4: the finding list, a tenant's page and the overview's findings behind a
bucket show a finding's subject with its job, tenant, queue, node and GPU names linked to their
pages (``links.subject_link``), and the finding itself through its summary (or rule). A
tenant-scoped manager never gets another tenant's job named or linked in a subject.

The world of diagnosis/tests/app/test_security_tenants.py: cluster ``shared``, tenants ``hpo``
(managed by mallory) and ``vision``; node n1 whose GPU 0 reported Xid 79."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.urls import reverse

from diagnosis.actions.records.cycles import record_cycle
from diagnosis.models import Finding, Tenant
from tests.support.builders import AS_OF, SnapshotBuilder
from tests.support.world import logged_in_client

pytestmark = pytest.mark.django_db

CLUSTER = "shared"
PERIOD = {"from": (AS_OF - timedelta(days=1)).isoformat(), "to": AS_OF.isoformat()}


def snapshot():
    b = SnapshotBuilder(as_of=AS_OF, cluster=CLUSTER).node("n1", gpus=8)
    b.queue("hpo").queue("vision")
    b.job("hpo-1", tenant="hpo", allocation=[("n1", [0])], gpus_per_pod=1)
    b.job("vision-1", tenant="vision", allocation=[("n1", [1])], gpus_per_pod=1)
    b.gpu("n1", 0, xid=[(79, "1m")])
    return b.build()


@pytest.fixture
def shared(make_cluster, mallory):
    cluster = make_cluster(CLUSTER, metrics_kind="none")
    record_cycle(cluster, snapshot())
    Tenant.objects.get(cluster=cluster, name="hpo").managers.add(mallory)
    return cluster


def plant(cluster, rule_id: str, subject: str, tenant: str | None = "hpo") -> Finding:
    return Finding.objects.create(
        cluster=cluster,
        rule_id=rule_id,
        subject=subject,
        summary=f"{rule_id} finding",
        tenant=Tenant.objects.get(cluster=cluster, name=tenant) if tenant else None,
        first_seen=AS_OF - timedelta(hours=1),
        last_seen=AS_OF,
    )


def url(kind: str, **kwargs) -> str:
    return reverse(f"diagnosis:{kind}", kwargs={"name": CLUSTER, **kwargs})


def findings_page(user) -> str:
    return logged_in_client(user).get(f"/clusters/{CLUSTER}/findings/").content.decode()


def test_the_finding_list_links_a_job_subject_to_the_job_and_the_summary_to_the_finding(
    shared, bob
):
    finding = plant(shared, "starvation", "job:hpo-1")
    html = findings_page(bob)
    assert f'job:<a class="ref ref-job" href="{url("job", job_id="hpo-1")}">hpo-1</a>' in html
    assert (
        f'<a class="finding-link" href="{url("finding", finding_id=finding.pk)}">'
        "starvation finding</a>" in html
    )


def test_the_finding_list_links_gpu_node_queue_and_tenant_subjects(shared, bob):
    plant(shared, "idle-quota", "queue:hpo")
    plant(shared, "cpu-bottleneck", "node:n1", tenant=None)
    plant(shared, "fairness", "tenant:vision", tenant="vision")
    html = findings_page(bob)
    gpu = reverse("diagnosis:gpu", kwargs={"name": CLUSTER, "node": "n1", "index": 0})
    assert f'gpu:<a class="ref ref-gpu" href="{gpu}">n1/0</a>' in html  # the recorded xid
    assert f'href="{url("queue", queue="hpo")}">hpo</a>' in html
    assert f'href="{url("node", node="n1")}">n1</a>' in html
    assert f'href="{url("tenant", tenant="vision")}">vision</a>' in html


def test_a_gang_subject_links_each_member(shared, bob):
    plant(shared, "gang-deadlock", "jobs:hpo-1+vision-1")
    html = findings_page(bob)
    assert f'href="{url("job", job_id="hpo-1")}">hpo-1</a>+<a' in html
    assert f'href="{url("job", job_id="vision-1")}">vision-1</a>' in html


def test_the_tenant_page_links_its_findings_subjects(shared, bob):
    finding = plant(shared, "starvation", "job:hpo-1")
    response = logged_in_client(bob).get(url("tenant", tenant="hpo"), PERIOD)
    html = response.content.decode()
    assert response.status_code == 200
    assert f'job:<a class="ref ref-job" href="{url("job", job_id="hpo-1")}">hpo-1</a>' in html
    assert f'class="finding-link" href="{url("finding", finding_id=finding.pk)}"' in html


def test_the_overview_links_the_subject_of_a_finding_behind_a_bucket(shared, bob):
    xid = Finding.objects.get(cluster=shared, rule_id="xid")
    html = logged_in_client(bob).get(f"/clusters/{CLUSTER}/").content.decode()
    gpu = reverse("diagnosis:gpu", kwargs={"name": CLUSTER, "node": "n1", "index": 0})
    finding = url("finding", finding_id=xid.pk)
    assert f'<a class="finding-link" href="{finding}"><code>xid</code></a> gpu:<a' in html
    assert f'href="{gpu}">n1/0</a>' in html


def test_a_manager_gets_no_other_tenants_job_in_a_subject(shared, mallory):
    """A finding of hpo's whose subject (planted) names vision's job too: hpo's job is linked,
    vision's is the placeholder, as text, on the finding list and on hpo's page."""
    plant(shared, "gang-deadlock", "jobs:hpo-1+vision-1")
    client = logged_in_client(mallory)
    pages = [
        findings_page(mallory),
        client.get(url("tenant", tenant="hpo"), PERIOD).content.decode(),
    ]
    for html in pages:
        assert f'href="{url("job", job_id="hpo-1")}">hpo-1</a>+(another tenant&#x27;s job)' in html
        assert "vision-1" not in html


def test_a_manager_gets_no_other_tenants_job_in_a_summary(shared, mallory):
    """The summary of hpo's finding names vision's job: a manager of hpo reads the placeholder
    on the finding list, the finding's page, hpo's page and the API."""
    finding = plant(shared, "gang-deadlock", "jobs:hpo-1+vision-1")
    finding.summary = "hpo-1 and vision-1 each hold part of n1 and wait for the rest."
    finding.save(update_fields=["summary"])
    client = logged_in_client(mallory)
    pages = [
        findings_page(mallory),
        client.get(url("finding", finding_id=finding.pk)).content.decode(),
        client.get(url("tenant", tenant="hpo"), PERIOD).content.decode(),
        client.get(f"/api/v1/clusters/{CLUSTER}/findings").content.decode(),
    ]
    for text in pages:
        assert "hpo-1 and " in text
        assert "vision-1" not in text


def test_a_reading_role_gets_the_whole_summary(shared, bob):
    finding = plant(shared, "gang-deadlock", "jobs:hpo-1+vision-1")
    finding.summary = "hpo-1 and vision-1 each hold part of n1 and wait for the rest."
    finding.save(update_fields=["summary"])
    assert "hpo-1 and vision-1 each hold" in findings_page(bob)
