"""Issue #12, defect 8: API tokens are stored hashed, expire, record their last use; DRF's plain
tokens of existing clients are moved to hashed ones without the client changing anything."""

from __future__ import annotations

from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
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


# -- issue #28: scoped sender tokens, revoking one token -------------------------------------


def create_token(*args: str) -> str:
    out = StringIO()
    call_command("api_token", "create", *args, stdout=out)
    return out.getvalue().rsplit(" ", 1)[-1].strip()


def test_create_with_cluster_and_kind_issues_a_token_that_uploads_there_only(make_cluster):
    make_cluster("dgx-pod")
    make_cluster("other")
    key = create_token(
        "--user", "topology-dgx-pod", "--cluster", "dgx-pod", "--kind", "topology", "--days", "0"
    )
    row = ApiToken.objects.get(user__username="topology-dgx-pod")
    assert row.kinds == ["topology"]
    assert [c.name for c in row.clusters.all()] == ["dgx-pod"]
    assert not row.user.has_usable_password()

    def upload(cluster: str) -> int:
        return (
            Client()
            .post(
                f"/api/v1/clusters/{cluster}/nodes/n1/topology",
                "GPU0\tGPU1\nGPU0\tX\tNV4\nGPU1\tNV4\tX\n",
                content_type="text/plain",
                HTTP_AUTHORIZATION=f"Token {key}",
            )
            .status_code
        )

    assert upload("dgx-pod") == 202
    assert upload("other") == 404


def test_create_refuses_an_unknown_cluster(db):
    with pytest.raises(CommandError, match="no cluster nope"):
        create_token("--user", "machine", "--cluster", "nope", "--kind", "events")


def test_revoke_by_a_short_prefix_revokes_nobody(bob, carol):
    ApiToken.issue(bob, "script", key="abcd1111" + "0" * 32)
    ApiToken.issue(carol, "script", key="abcd2222" + "0" * 32)
    with pytest.raises(CommandError):
        call_command("api_token", "revoke", "--prefix", "abcd", stdout=StringIO())
    assert ApiToken.objects.count() == 2


def test_revoke_of_a_prefix_two_users_share_needs_the_user(bob, carol):
    ApiToken.issue(bob, "script", key="abcd1111" + "0" * 32)
    ApiToken.issue(carol, "script", key="abcd1111" + "1" * 32)
    with pytest.raises(CommandError, match="matches several tokens"):
        call_command("api_token", "revoke", "--prefix", "abcd1111", stdout=StringIO())
    call_command("api_token", "revoke", "--prefix", "abcd1111", "--user", "bob", stdout=StringIO())
    assert list(ApiToken.objects.values_list("user__username", flat=True)) == ["carol"]


def test_scope_gives_a_migrated_token_its_cluster_and_kind(make_cluster, make_user):
    make_cluster("prod")
    sender = make_user("alertmanager")
    legacy = Token.objects.create(user=sender)
    call_command("api_token", "migrate-legacy", stdout=StringIO())
    prefix = legacy.key[:8]
    call_command(
        "api_token", "scope", "--prefix", prefix, "--cluster", "prod", "--kind", "alerts",
        stdout=StringIO(),
    )  # fmt: skip
    row = ApiToken.objects.get(prefix=prefix)
    assert row.may_send("alerts")
    assert [c.name for c in row.clusters.all()] == ["prod"]
