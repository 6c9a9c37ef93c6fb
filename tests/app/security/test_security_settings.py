"""Issue #12, defects 1 and 3: cluster settings are the gpuobs admin role's alone, and a failed
collection tells readers what failed, never where (no host, port, remote answer or userinfo)."""

from __future__ import annotations

import json
import socket

import pytest
from django.contrib.auth.models import Permission

from diagnosis.actions.notify.alertmanager import NotifyConfigError, alertmanager_targets
from diagnosis.actions.records.cycles import run_cluster_cycle
from diagnosis.models import ClusterCycle
from tests.support.world import create_user, logged_in_client

pytestmark = pytest.mark.django_db

SIM = {"scenario": "small", "seed": 1, "clock": "step", "step_s": 900}


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def staff_with_change_cluster():
    user = create_user("stan", staff=True)
    user.user_permissions.add(
        *Permission.objects.filter(codename__in=["change_cluster", "view_cluster"])
    )
    return user


def test_a_staff_user_without_the_admin_role_cannot_change_a_cluster_in_the_admin(
    make_cluster, staff_with_change_cluster
):
    cluster = make_cluster("target", metrics_kind="none")
    client = logged_in_client(staff_with_change_cluster)
    page = client.get(f"/admin/diagnosis/cluster/{cluster.pk}/change/")
    posted = client.post(
        f"/admin/diagnosis/cluster/{cluster.pk}/change/",
        {
            "name": "target",
            "scheduler_kind": "sim",
            "scheduler_config": "{}",
            "metrics_kind": "prometheus",
            "metrics_config": json.dumps(
                {"url": "http://evil.example", "bearer_token_file": "/proc/self/environ"}
            ),
            "status": "unknown",
        },
    )
    assert (page.status_code, posted.status_code) == (403, 403)
    cluster.refresh_from_db()
    assert cluster.metrics_kind == "none"


def test_the_admin_role_sees_clusters_in_the_admin(make_cluster, alice_client):
    cluster = make_cluster("target", metrics_kind="none")
    assert alice_client.get(f"/admin/diagnosis/cluster/{cluster.pk}/change/").status_code == 200


def test_a_row_saved_past_the_admin_with_a_forbidden_secret_fails_its_cycle(make_cluster):
    cluster = make_cluster(
        "sneaky",
        scheduler_kind="sim",
        scheduler_config=SIM,
        metrics_kind="prometheus",
        metrics_config={"url": "http://127.0.0.1:9", "bearer_token_env": "DJANGO_SECRET_KEY"},
    )
    cycle = run_cluster_cycle(cluster)
    assert cycle.ok is False
    cluster.refresh_from_db()
    assert "settings are invalid" in cluster.status_message
    assert "bearer_token_env" in cluster.status_detail


def test_a_failed_collection_tells_viewers_what_failed_not_where(make_cluster, bob_client):
    port = closed_port()
    cluster = make_cluster(
        "dark",
        scheduler_kind="sim",
        scheduler_config=SIM,
        metrics_kind="prometheus",
        metrics_config={"url": f"http://127.0.0.1:{port}", "retries": 0, "backoff_s": 0},
    )
    run_cluster_cycle(cluster)
    cluster.refresh_from_db()
    assert ClusterCycle.objects.get(cluster=cluster).ok is False
    assert str(port) in cluster.status_detail  # admins (and the log) get the whole story
    shown = [
        bob_client.get("/").content.decode(),
        bob_client.get(f"/clusters/{cluster.name}/").content.decode(),
        bob_client.get("/api/v1/clusters/").content.decode(),
    ]
    assert "metrics source (prometheus) failed" in cluster.status_message
    for text in shown:
        assert str(port) not in text
        assert "refused" not in text.lower()
        assert "unreachable" not in text.lower()


# -- issue #28, item 6: every *_ENV setting names a GPUOBS_SECRET_* variable ----------------------


@pytest.mark.parametrize(
    ("setting", "extra"),
    [
        ("GPUOBS_ALERTMANAGER_TOKEN_ENV", {}),
        ("GPUOBS_ALERTMANAGER_PASSWORD_ENV", {"GPUOBS_ALERTMANAGER_USERNAME": "gpuobs"}),
    ],
)
def test_an_env_setting_naming_the_django_secret_key_is_refused(
    settings, monkeypatch, setting, extra
):
    monkeypatch.setenv("DJANGO_SECRET_KEY", "the-key-itself")
    settings.GPUOBS_ALERTMANAGER_URL = "http://127.0.0.1:9/"
    for name, value in {setting: "DJANGO_SECRET_KEY", **extra}.items():
        setattr(settings, name, value)
    with pytest.raises(NotifyConfigError, match=f"{setting}: must name an environment variable"):
        alertmanager_targets()[0]


def test_an_env_setting_naming_a_gpuobs_secret_is_read(settings, monkeypatch):
    monkeypatch.setenv("GPUOBS_SECRET_AM_TOKEN", "t0ken")
    settings.GPUOBS_ALERTMANAGER_URL = "http://127.0.0.1:9/"
    settings.GPUOBS_ALERTMANAGER_TOKEN_ENV = "GPUOBS_SECRET_AM_TOKEN"
    assert alertmanager_targets()[0].bearer_token == "t0ken"
