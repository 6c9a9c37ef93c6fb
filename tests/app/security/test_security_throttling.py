"""Issue #12, defect 5: 50 wrong passwords lock the name out (the right one then fails too), each
failure is logged, and the API throttles its clients."""

from __future__ import annotations

import logging

import pytest
from django.core.cache import cache
from django.test import Client
from rest_framework.throttling import UserRateThrottle

from tests.support.world import DEFAULT_PASSWORD, logged_in_client

pytestmark = pytest.mark.django_db

LOGIN = "/accounts/login/"


def attempt(client: Client, password: str):
    return client.post(LOGIN, {"username": "bob", "password": password})


def test_fifty_wrong_passwords_lock_the_name_out_and_are_logged(bob, caplog):
    client = Client()
    with caplog.at_level(logging.INFO):
        for n in range(50):
            attempt(client, f"guess-{n}")
    response = attempt(client, DEFAULT_PASSWORD)
    assert response.status_code == 429
    assert "_auth_user_id" not in client.session
    assert any("bob" in r.getMessage() and r.name.startswith("axes") for r in caplog.records)


def test_the_right_password_before_the_limit_logs_in(bob):
    client = Client()
    attempt(client, "one-wrong-guess")
    assert attempt(client, DEFAULT_PASSWORD).status_code == 302
    assert client.session["_auth_user_id"] == str(bob.pk)


def test_an_api_client_beyond_its_rate_gets_429(bob, monkeypatch):
    monkeypatch.setattr(UserRateThrottle, "THROTTLE_RATES", {"user": "3/min"})
    cache.clear()
    client = logged_in_client(bob)
    codes = [client.get("/api/v1/clusters/").status_code for _ in range(4)]
    assert codes == [200, 200, 200, 429]
