"""Where each role lands after logging in, and what its menu offers (docs/ui.md "Menus";
diagnosis/pages/support/navigation.py). Through the real login form: LoginView, LOGIN_REDIRECT_URL,
the landing view."""

from __future__ import annotations

import pytest
from django.test import Client

from diagnosis.models import Tenant
from tests.support.world import DEFAULT_PASSWORD, logged_in_client

pytestmark = pytest.mark.django_db


@pytest.fixture
def clusters(make_cluster):
    """Two clusters; mallory manages ``hpo`` on the second one only."""
    make_cluster("alpha")
    beta = make_cluster("beta")
    return beta


def log_in(username: str, next_url: str = "") -> str:
    """Log in through the form; the URL the redirects end at."""
    client = Client()
    data = {"username": username, "password": DEFAULT_PASSWORD}
    if next_url:
        data["next"] = next_url
    response = client.post("/accounts/login/", data, follow=True)
    assert response.status_code == 200
    return response.redirect_chain[-1][0]


def test_a_manager_lands_on_their_tenants_fairness_report(clusters, mallory) -> None:
    Tenant.objects.create(cluster=clusters, name="hpo").managers.add(mallory)

    assert log_in("mallory") == "/clusters/beta/fairness/"


def test_a_manager_of_no_tenant_lands_on_the_cluster_list(clusters, mallory) -> None:
    assert log_in("mallory") == "/"


def test_a_viewer_lands_on_the_cluster_list(clusters, bob) -> None:
    assert log_in("bob") == "/"


def test_the_page_asked_for_wins_over_the_landing(clusters, mallory) -> None:
    Tenant.objects.create(cluster=clusters, name="hpo").managers.add(mallory)

    assert log_in("mallory", next_url="/clusters/beta/") == "/clusters/beta/"


def nav_links(client: Client, path: str) -> set[str]:
    html = client.get(path).content.decode()
    nav = html[html.index('<nav class="topnav"') : html.index("</nav>", html.index("topnav"))]
    return {part.split('"')[0] for part in nav.split('href="')[1:]}


def test_a_managers_menu_offers_only_what_a_manager_can_use(clusters, mallory) -> None:
    Tenant.objects.create(cluster=clusters, name="hpo").managers.add(mallory)

    links = nav_links(logged_in_client(mallory), "/clusters/beta/fairness/")

    assert "/clusters/beta/fairness/" in links
    assert "/clusters/beta/findings/" in links  # their tenants' findings
    assert "/clusters/beta/incidents/" in links  # those that hit their tenants' jobs
    assert "/clusters/beta/recommendations/" not in links


def test_an_sres_menu_offers_incidents_and_recommendations(clusters, carol) -> None:
    links = nav_links(logged_in_client(carol), "/clusters/beta/")

    assert {"/clusters/beta/incidents/", "/clusters/beta/recommendations/"} <= links


def test_only_staff_see_the_admin_link(clusters, alice, carol) -> None:
    assert 'href="/admin/"' in logged_in_client(alice).get("/").content.decode()
    assert 'href="/admin/"' not in logged_in_client(carol).get("/").content.decode()


def test_the_cluster_list_links_a_manager_to_incidents_but_no_recommendations(
    clusters, mallory
) -> None:
    Tenant.objects.create(cluster=clusters, name="hpo").managers.add(mallory)

    html = logged_in_client(mallory).get("/").content.decode()

    assert 'href="/clusters/beta/fairness/"' in html
    assert 'href="/clusters/beta/incidents/"' in html  # those that hit hpo's jobs
    assert 'href="/clusters/beta/recommendations/"' not in html
