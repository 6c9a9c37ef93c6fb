"""Who reads what (diagnosis.access; docs/fairness.md "Access"): a matrix over the named world's
roles and two tenants. ``mallory`` manages ``alpha`` of cluster ``idle``; ``bravo`` is someone
else's. Viewers, SREs, on-call and admins read everything; a user without a role reads nothing;
mallory reads alpha's rows only, and every attempt at bravo's -- by id, by URL or by a crafted
filter -- is a 404, never an empty answer that confirms it exists."""

from __future__ import annotations

import io

import pypdf
import pytest
from django.contrib.auth.models import User
from django.test import Client

from diagnosis.access import incidents_for_user
from diagnosis.models import Cluster, Finding, Incident, Tenant
from tests.support.fairness_world import PERIOD, record_two_tenant_cycles
from tests.support.world import create_person, logged_in_client

pytestmark = pytest.mark.django_db
QUERY = f"from={PERIOD['from']}&to={PERIOD['to']}"
READERS = ["alice", "bob", "carol", "erin"]
EVERYONE = [*READERS, "mallory", "nobody"]


@pytest.fixture(scope="module")
def world(django_db_setup, django_db_blocker):
    """The named world (tests/support/world.py) and the clusters, made once for the module
    (committed; removed after the module)."""
    with django_db_blocker.unblock():
        users = {name: create_person(name) for name in EVERYONE}
        cluster = record_two_tenant_cycles("idle", idle=True)
        Tenant.objects.get(cluster=cluster, name="alpha").managers.add(users["mallory"])
        elsewhere = Cluster.objects.create(name="elsewhere", enabled=False)
    yield cluster, users
    with django_db_blocker.unblock():
        Cluster.objects.filter(pk__in=[cluster.pk, elsewhere.pk]).delete()
        User.objects.filter(pk__in=[u.pk for u in users.values()]).delete()


def client_of(world, name: str) -> Client:
    return logged_in_client(world[1][name])


def finding_of(cluster: Cluster, job: str) -> Finding:
    return Finding.objects.get(cluster=cluster, subject=f"job:{job}")


# -- pages and API that everyone with a role reads ------------------------------------------------


@pytest.mark.parametrize("user", EVERYONE)
@pytest.mark.parametrize(
    "path",
    [
        "/clusters/idle/",
        f"/clusters/idle/fairness/?{QUERY}",
        f"/clusters/idle/fairness.csv?{QUERY}",
        f"/clusters/idle/fairness.pdf?{QUERY}",
        "/clusters/idle/tenants/alpha/",
        "/clusters/idle/jobs/alpha-1/",
        f"/api/v1/clusters/idle/reports/fairness?{QUERY}",
        "/api/v1/clusters/idle/jobs/alpha-1",
        "/api/v1/clusters/idle/jobs?tenant=alpha",
    ],
)
def test_alphas_rows_are_read_by_every_role_and_the_manager_but_not_by_nobody(world, user, path):
    status = client_of(world, user).get(path).status_code

    assert status == (404 if user == "nobody" else 200)


@pytest.mark.parametrize("user", EVERYONE)
@pytest.mark.parametrize(
    "path",
    [
        "/clusters/idle/tenants/bravo/",
        "/clusters/idle/jobs/bravo-1/",
        f"/clusters/idle/fairness/?{QUERY}&tenant=bravo",
        f"/clusters/idle/fairness.csv?{QUERY}&tenant=bravo",
        f"/clusters/idle/fairness.pdf?{QUERY}&tenant=bravo",
        f"/api/v1/clusters/idle/reports/fairness?{QUERY}&tenant=bravo",
        f"/api/v1/clusters/idle/reports/fairness?{QUERY}&tenant=alpha&tenant=bravo",
        "/api/v1/clusters/idle/jobs/bravo-1",
        "/api/v1/clusters/idle/jobs?tenant=bravo",
        "/api/v1/clusters/idle/findings?tenant=bravo",
    ],
)
def test_bravos_rows_are_a_404_for_the_manager_of_alpha(world, user, path):
    status = client_of(world, user).get(path).status_code

    assert status == (404 if user in ("mallory", "nobody") else 200)


@pytest.mark.parametrize("user", EVERYONE)
def test_another_tenants_finding_by_id_is_a_404_for_the_manager(world, user):
    finding = finding_of(world[0], "bravo-idle")

    status = client_of(world, user).get(f"/clusters/idle/findings/{finding.pk}/").status_code

    assert status == (404 if user in ("mallory", "nobody") else 200)


@pytest.mark.parametrize("user", EVERYONE)
def test_a_cluster_without_the_managers_tenants_is_a_404_for_her(world, user):
    status = client_of(world, user).get(f"/clusters/elsewhere/fairness/?{QUERY}").status_code

    assert status == (404 if user in ("mallory", "nobody") else 200)


# -- what each role's lists contain -----------------------------------------------------------


@pytest.mark.parametrize(
    ("user", "tenants"),
    [(u, ["alpha", "bravo"]) for u in READERS] + [("mallory", ["alpha"])],
)
def test_the_report_lists_the_tenants_the_reader_may_see(world, user, tenants):
    report = client_of(world, user).get(f"/api/v1/clusters/idle/reports/fairness?{QUERY}").json()

    assert [row["tenant"] for row in report["tenants"]] == tenants


def test_the_managers_csv_and_pdf_hold_only_her_tenants(world):
    client = client_of(world, "mallory")
    csv_text = client.get(f"/clusters/idle/fairness.csv?{QUERY}").content.decode()
    pdf = pypdf.PdfReader(io.BytesIO(client.get(f"/clusters/idle/fairness.pdf?{QUERY}").content))
    pdf_text = "\n".join(page.extract_text() for page in pdf.pages)

    assert [line.split(",")[3] for line in csv_text.splitlines()[1:]] == ["alpha"]
    assert "alpha" in pdf_text
    assert "bravo" not in pdf_text


def test_the_managers_page_shows_no_other_tenant(world):
    page = client_of(world, "mallory").get(f"/clusters/idle/fairness/?{QUERY}").content.decode()

    assert 'data-tenant="alpha"' in page
    assert "bravo" not in page


@pytest.mark.parametrize(("user", "jobs"), [("bob", 5), ("mallory", 2)])
def test_the_jobs_api_lists_the_jobs_the_reader_may_see(world, user, jobs):
    body = client_of(world, user).get("/api/v1/clusters/idle/jobs").json()

    assert body["count"] == jobs
    assert {row["tenant"] for row in body["results"]} <= (
        {"alpha"} if user == "mallory" else {"alpha", "bravo"}
    )


def test_the_manager_sees_her_tenants_findings_and_no_pool_finding(world):
    cluster = world[0]
    Finding.objects.create(
        cluster=cluster,
        rule_id="fragmentation",
        subject="pool:a100",
        first_seen=cluster.cycles.latest().as_of,
        last_seen=cluster.cycles.latest().as_of,
    )

    body = client_of(world, "mallory").get("/api/v1/clusters/idle/findings").json()
    everything = client_of(world, "bob").get("/api/v1/clusters/idle/findings").json()

    assert {row["subject"] for row in body["results"]} == {"job:alpha-idle"}
    assert "pool:a100" in {row["subject"] for row in everything["results"]}


def test_the_findings_page_lists_only_the_managers_findings(world):
    page = client_of(world, "mallory").get("/clusters/idle/findings/?state=all").content.decode()

    assert "alpha-idle" in page
    assert "bravo-idle" not in page


@pytest.mark.parametrize(("user", "clusters"), [("bob", 2), ("mallory", 1), ("nobody", 0)])
def test_the_clusters_api_lists_the_clusters_the_reader_may_see(world, user, clusters):
    body = client_of(world, user).get("/api/clusters/").json()

    assert body["count"] == clusters


def test_a_user_without_a_role_sees_no_cluster_on_the_dashboard(world):
    page = client_of(world, "nobody").get("/").content.decode()

    assert "No clusters yet" in page
    assert "idle" not in page


def test_incidents_that_hit_the_managers_tenants_are_hers(world):
    cluster, users = world
    for number, tenants in enumerate((["alpha"], ["bravo"], ["alpha", "bravo"], [])):
        Incident.objects.create(
            cluster=cluster, node="a100-000", fingerprint=f"f{number}", details={"tenants": tenants}
        )

    mine = incidents_for_user(users["mallory"], cluster)

    assert sorted(i.details["tenants"] for i in mine) == [["alpha"], ["alpha", "bravo"]]
    assert incidents_for_user(users["erin"], cluster).count() == 4
    assert incidents_for_user(users["nobody"], cluster).count() == 0
