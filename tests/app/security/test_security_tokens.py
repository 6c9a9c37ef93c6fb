"""Issue #12, defect 8: API tokens are stored hashed, expire, record their last use; DRF's plain
tokens of existing clients are moved to hashed ones without the client changing anything."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.management import call_command
from django.test import Client
from django.utils import timezone
from rest_framework.authtoken.models import Token

from diagnosis.models import ApiToken

pytestmark = pytest.mark.django_db

CLUSTERS = "/api/v1/clusters/"


def call(key: str, keyword: str = "Token"):
    return Client().get(CLUSTERS, HTTP_AUTHORIZATION=f"{keyword} {key}")


def test_a_token_is_stored_as_a_hash_only(bob):
    row, key = ApiToken.issue(bob, "script")
    assert key not in str(ApiToken.objects.filter(pk=row.pk).values().get())
    assert call(key).status_code == 200
    assert call(key, "Bearer").status_code == 200


def test_a_use_is_recorded(bob):
    row, key = ApiToken.issue(bob, "script")
    call(key)
    row.refresh_from_db()
    assert row.last_used_at is not None


def test_an_expired_token_is_refused(bob):
    row, key = ApiToken.issue(bob, "script")
    ApiToken.objects.filter(pk=row.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    assert call(key).status_code == 401


def test_legacy_plain_tokens_move_to_hashed_ones_and_keep_working(bob):
    legacy = Token.objects.create(user=bob)
    call_command("api_token", "migrate-legacy")
    assert not Token.objects.exists()
    assert ApiToken.objects.get(user=bob).prefix == legacy.key[:8]
    assert call(legacy.key).status_code == 200
