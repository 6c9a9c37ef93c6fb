"""Pages, the API and the health check: who may see what."""

from __future__ import annotations

import re
from io import StringIO

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.test import Client
from rest_framework.authtoken.models import Token

from tests.support.world import DEFAULT_PASSWORD

pytestmark = pytest.mark.django_db


def test_dashboard_sends_anonymous_visitors_to_login(client: Client) -> None:
    response = client.get("/")

    assert response.status_code == 302
    assert response["Location"] == "/accounts/login/?next=/"


def test_dashboard_says_no_clusters_yet_when_empty(bob_client: Client) -> None:
    response = bob_client.get("/")

    assert response.status_code == 200
    assert b"No clusters yet." in response.content


def test_dashboard_lists_clusters(bob_client: Client, make_cluster) -> None:
    make_cluster("east-a100")
    make_cluster("west-h100", enabled=False)

    response = bob_client.get("/")

    assert response.status_code == 200
    assert b"east-a100" in response.content
    assert b"west-h100" in response.content
    assert b"No clusters yet." not in response.content


def test_login_page_is_public_and_logs_in(client: Client, bob) -> None:
    assert client.get("/accounts/login/").status_code == 200

    response = client.post(
        "/accounts/login/", {"username": "bob", "password": DEFAULT_PASSWORD, "next": "/"}
    )

    assert response.status_code == 302
    assert response["Location"] == "/"
    assert client.get("/").status_code == 200


def test_wrong_password_is_refused(client: Client, bob) -> None:
    response = client.post("/accounts/login/", {"username": "bob", "password": "wrong"})

    assert response.status_code == 200
    assert b"didn't match" in response.content
    assert client.get("/").status_code == 302


def test_logout_takes_a_post_only(bob_client: Client) -> None:
    assert bob_client.get("/accounts/logout/").status_code == 405

    response = bob_client.post("/accounts/logout/")

    assert response.status_code == 302
    assert response["Location"] == "/accounts/login/"
    assert bob_client.get("/").status_code == 302


def test_healthz_is_public_and_reports_the_database(client: Client) -> None:
    response = client.get("/healthz")

    assert response.status_code == 200
    assert response.json() == {"status": "ok", "database": "ok"}


@pytest.mark.parametrize("path", ["/api/", "/api/clusters/"])
def test_api_refuses_anonymous_callers(client: Client, path: str) -> None:
    response = client.get(path)

    assert response.status_code == 401
    assert response["WWW-Authenticate"] == "Token"


def test_api_lists_clusters_to_a_logged_in_viewer(bob_client: Client, make_cluster) -> None:
    make_cluster("east-a100", scheduler_config={"kubeconfig": "/secret/path"})

    assert bob_client.get("/api/").status_code == 200
    response = bob_client.get("/api/clusters/")

    assert response.status_code == 200
    [cluster] = response.json()["results"]
    assert cluster["name"] == "east-a100"
    assert "scheduler_config" not in cluster  # data-source settings are admin-only


def test_api_accepts_a_token(client: Client, bob) -> None:
    token = Token.objects.create(user=bob)

    response = client.get("/api/clusters/", headers={"Authorization": f"Token {token.key}"})

    assert response.status_code == 200


def test_api_is_read_only_for_now(bob_client: Client) -> None:
    response = bob_client.post("/api/clusters/", {"name": "x"}, content_type="application/json")

    assert response.status_code == 405


def test_admin_is_for_staff_only(client: Client, alice_client: Client, bob_client: Client) -> None:
    assert client.get("/admin/").status_code == 302
    assert bob_client.get("/admin/").status_code == 302  # not staff: back to the admin login
    assert alice_client.get("/admin/").status_code == 200


def test_audit_trail_is_read_only_in_the_admin(alice_client: Client) -> None:
    assert alice_client.get("/admin/diagnosis/auditentry/").status_code == 200
    assert alice_client.get("/admin/diagnosis/auditentry/add/").status_code == 403


@pytest.mark.parametrize(
    "model",
    [
        "cluster",
        "node",
        "gpu",
        "tenant",
        "queue",
        "job",
        "schedulerevent",
        "snapshot",
        "finding",
        "ruleoverride",
        "recommendation",
        "incident",
    ],
)
def test_admin_lists_every_model(alice_client: Client, model: str) -> None:
    assert alice_client.get(f"/admin/diagnosis/{model}/").status_code == 200


def test_ensure_admin_prints_a_generated_password_that_logs_in(client: Client, settings) -> None:
    settings.GPUOBS_ADMIN_PASSWORD = None
    out = StringIO()

    call_command("ensure_admin", stdout=out)

    password = re.search(r"password (\S+) \(shown only this once\)", out.getvalue()).group(1)
    assert client.login(username="admin", password=password)
    assert User.objects.get(username="admin").is_superuser


def test_ensure_admin_uses_the_configured_password_and_runs_once(settings) -> None:
    settings.GPUOBS_ADMIN_PASSWORD = "from-the-environment"

    call_command("ensure_admin", stdout=StringIO())
    settings.GPUOBS_ADMIN_PASSWORD = "changed-later"
    second = StringIO()
    call_command("ensure_admin", stdout=second)

    assert "password unchanged" in second.getvalue()
    assert User.objects.get(username="admin").check_password("from-the-environment")
