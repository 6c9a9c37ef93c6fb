"""Identities from the company's IdP (docs/operations.md, "Single sign-on"): a real OpenID
Connect login against the loopback provider of tests/support/oidc_provider.py, through gpuobs's
own login views, gives the mapped role, which reaches a write; roles follow the IdP's groups at
each login; an auth proxy's header is honoured only when turned on and from the proxy."""

from __future__ import annotations

from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest
import requests
from django.contrib.auth.models import User
from django.test import Client, override_settings

from diagnosis.identity import checks, oidc
from diagnosis.models import Tenant
from diagnosis.roles import Role, roles_of
from tests.support.oidc_provider import CLIENT_ID, CLIENT_SECRET, OidcProvider
from tests.support.records import make_recommendation

pytestmark = [pytest.mark.django_db, pytest.mark.lab("lab-sso", dry_run=False)]

ROLE_MAP = "gpu-sre=sre,gpu-watch=viewer,nlp-leads=manager:nlp,gpu-admins=admin"


@pytest.fixture
def provider(monkeypatch: pytest.MonkeyPatch) -> Iterator[OidcProvider]:
    idp = OidcProvider()
    monkeypatch.setenv("GPUOBS_SECRET_OIDC_CLIENT", CLIENT_SECRET)
    with override_settings(
        GPUOBS_OIDC_ISSUER=idp.issuer,
        OIDC_RP_CLIENT_ID=CLIENT_ID,
        GPUOBS_OIDC_CLIENT_SECRET_ENV="GPUOBS_SECRET_OIDC_CLIENT",
        GPUOBS_ROLE_MAP=ROLE_MAP,
    ):
        yield idp
    oidc._discovery.cache_clear()
    idp.close()


def sso_login(client: Client) -> str:
    """The whole code flow: gpuobs sends the browser to the provider, the provider back with a
    code; returns where gpuobs sends the browser after its callback."""
    start = client.get("/oidc/authenticate/")
    assert start.status_code == 302
    assert start["Location"].startswith(oidc.provider()["issuer"])
    at_idp = requests.get(start["Location"], allow_redirects=False, timeout=5)
    back = urlsplit(at_idp.headers["Location"])
    assert back.path == "/oidc/callback/"
    done = client.get(f"{back.path}?{back.query}")
    assert done.status_code == 302
    return done["Location"]


def test_an_oidc_login_makes_the_user_with_the_mapped_role_and_it_reaches_a_write(
    provider, lab, celery_eager, django_capture_on_commit_callbacks
) -> None:
    rec = make_recommendation(lab, "queue-weight", "queue:team-b", {"from": 1, "to": 3})
    provider.sign_in_as("grace", ["gpu-sre", "unrelated"])
    client = Client()

    assert sso_login(client) == "/accounts/landing/"

    grace = User.objects.get(username="grace")
    assert roles_of(grace) == {Role.SRE}
    assert not grace.has_usable_password()
    with django_capture_on_commit_callbacks(execute=True):
        asked = client.post(f"/api/recommendations/{rec.pk}/request/")
    assert asked.status_code == 200, asked.content
    assert asked.json()["requested_by"] == "grace"


def test_roles_are_resynced_at_each_login(provider, lab) -> None:
    Tenant.objects.create(cluster=lab, name="nlp")
    provider.sign_in_as("heidi", ["gpu-sre", "nlp-leads"])
    sso_login(Client())
    heidi = User.objects.get(username="heidi")
    assert roles_of(heidi) == {Role.SRE, Role.MANAGER}
    assert list(heidi.managed_tenants.values_list("name", flat=True)) == ["nlp"]

    provider.sign_in_as("heidi", ["gpu-watch"])  # the IdP took her out of gpu-sre, nlp-leads
    sso_login(Client())

    heidi = User.objects.get(username="heidi")
    assert roles_of(heidi) == {Role.VIEWER}
    assert not heidi.managed_tenants.exists()


def test_an_id_token_for_another_client_is_refused(provider) -> None:
    provider.audience = "some-other-app"
    provider.sign_in_as("ivan", ["gpu-admins"])

    assert sso_login(Client()) == "/accounts/login/?sso=failed"
    assert not User.objects.filter(username="ivan").exists()


def test_the_login_page_offers_sso_and_hides_the_password_form_when_local_login_is_off(
    provider,
) -> None:
    with override_settings(GPUOBS_LOCAL_LOGIN=False):
        page = Client().get("/accounts/login/").content.decode()
        posted = Client().post("/accounts/login/", {"username": "x", "password": "y"})

    assert "/oidc/authenticate/" in page
    assert 'name="password"' not in page
    assert posted.status_code == 405


def test_sso_urls_are_404_when_not_configured() -> None:
    assert Client().get("/oidc/authenticate/").status_code == 404


# -- the auth proxy's header ---------------------------------------------------------------------

PROXY = {
    "GPUOBS_AUTH_PROXY_USER_HEADER": "X-Forwarded-User",
    "GPUOBS_AUTH_PROXY_GROUPS_HEADER": "X-Forwarded-Groups",
    "GPUOBS_AUTH_PROXY_TRUSTED": ["10.0.0.0/24"],
    "GPUOBS_ROLE_MAP": ROLE_MAP,
}
HEADERS = {"HTTP_X_FORWARDED_USER": "judy", "HTTP_X_FORWARDED_GROUPS": "gpu-watch, other"}


def test_the_proxy_header_logs_in_from_a_trusted_address(lab) -> None:
    with override_settings(**PROXY):
        answer = Client().get("/api/v1/clusters/", REMOTE_ADDR="10.0.0.7", **HEADERS)

    assert answer.status_code == 200
    assert [c["name"] for c in answer.json()["results"]] == ["lab-sso"]
    assert roles_of(User.objects.get(username="judy")) == {Role.VIEWER}


def test_the_proxy_header_from_an_untrusted_address_is_refused(lab) -> None:
    with override_settings(**PROXY):
        answer = Client().get("/api/v1/clusters/", REMOTE_ADDR="192.0.2.9", **HEADERS)

    assert answer.status_code == 403
    assert not User.objects.filter(username="judy").exists()


def test_a_forged_header_means_nothing_when_the_proxy_setting_is_off(lab) -> None:
    with override_settings(GPUOBS_ROLE_MAP=ROLE_MAP):
        api = Client().get("/api/v1/clusters/", REMOTE_ADDR="10.0.0.7", **HEADERS)
        page = Client().get("/", REMOTE_ADDR="10.0.0.7", **HEADERS)

    assert api.status_code in (401, 403)
    assert page.status_code == 302
    assert page["Location"].startswith("/accounts/login/")
    assert not User.objects.filter(username="judy").exists()


def test_the_proxy_groups_are_resynced_when_they_change(lab) -> None:
    client = Client()
    with override_settings(**PROXY):
        client.get("/", REMOTE_ADDR="10.0.0.7", **HEADERS)
        client.get(
            "/",
            REMOTE_ADDR="10.0.0.7",
            HTTP_X_FORWARDED_USER="judy",
            HTTP_X_FORWARDED_GROUPS="gpu-sre",
        )

    assert roles_of(User.objects.get(username="judy")) == {Role.SRE}


def test_the_idp_never_signs_in_as_a_local_account_with_a_password(provider, alice) -> None:
    provider.sign_in_as("alice", ["gpu-watch"])  # an IdP user who picked the admin's name

    assert sso_login(Client()) == "/accounts/login/?sso=failed"
    alice = User.objects.get(username="alice")
    assert alice.is_superuser
    assert alice.has_usable_password()
    assert roles_of(alice) == {Role.ADMIN}


def test_an_account_made_without_a_password_is_signed_in_by_the_idp(provider) -> None:
    User.objects.create_user("kim")  # as `manage.py users add kim --role viewer` makes it
    provider.sign_in_as("kim", ["gpu-sre"])

    assert sso_login(Client()) == "/accounts/landing/"
    assert roles_of(User.objects.get(username="kim")) == {Role.SRE}


def test_the_proxy_header_never_signs_in_as_a_local_account_with_a_password(lab, alice) -> None:
    with override_settings(**PROXY):
        answer = Client().get(
            "/api/v1/clusters/", REMOTE_ADDR="10.0.0.7", HTTP_X_FORWARDED_USER="alice"
        )

    assert answer.status_code in (401, 403)


def test_a_bad_role_map_and_a_missing_client_secret_stop_the_checks(monkeypatch) -> None:
    monkeypatch.delenv("GPUOBS_SECRET_MISSING", raising=False)
    with override_settings(GPUOBS_ROLE_MAP="gpu-sre=boss,x=viewer:nlp"):
        (bad_map,) = checks.role_map_parses()
    with override_settings(
        GPUOBS_OIDC_ISSUER="https://idp.example.org",
        GPUOBS_OIDC_CLIENT_SECRET_ENV="GPUOBS_SECRET_MISSING",
    ):
        (no_secret,) = checks.oidc_client_secret_is_set()

    assert "no role 'boss'" in bad_map.msg
    assert "GPUOBS_SECRET_MISSING is not set" in no_secret.msg
