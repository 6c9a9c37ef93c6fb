"""Alertmanager in high availability (docs/integrations.md "Findings and incidents to
Alertmanager"): ``GPUOBS_ALERTMANAGER_URL`` names two real Alertmanagers (Debian's 0.25, each
with its own webhook), each gets every alert; one that is down is recorded by URL and gets the
alerts once it is back, and one that hangs does not hold up the other."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.db import connection
from django.urls import reverse

from diagnosis.actions.notify.alertmanager import deliver_to_alertmanager
from diagnosis.models import Cluster, DeliveryState
from tests.support.alertmanager_server import AlertmanagerServer, started_alertmanager
from tests.support.notify_world import open_xid_incident, record_cycles
from tests.support.processes import wait_until

pytestmark = [pytest.mark.alertmanager, pytest.mark.django_db]


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[tuple[AlertmanagerServer, AlertmanagerServer]]:
    with (
        started_alertmanager(tmp_path / "am-a") as first,
        started_alertmanager(tmp_path / "am-b") as second,
    ):
        yield first, second


def with_an_incident(make_cluster, name: str) -> Cluster:
    """A cluster with one recorded cycle and an open Xid incident (recorded before any
    Alertmanager is configured: no notify step is started by it)."""
    cluster = make_cluster(name)
    record_cycles(cluster, ["idle"])
    open_xid_incident(cluster)
    return cluster


def incident_alerts(server: AlertmanagerServer) -> list[dict]:
    return [a for a in server.alerts() if a["labels"]["alertname"] == "GpuobsIncident"]


def test_each_alertmanager_gets_the_alert_and_a_dead_one_gets_it_once_back(
    pair, settings, make_cluster, client, alice, bob
) -> None:
    first, second = pair
    cluster = with_an_incident(make_cluster, "am-ha")
    settings.GPUOBS_ALERTMANAGER_URL = f"{first.url}, {second.url}"
    settings.GPUOBS_ALERTMANAGER_TIMEOUT_SECONDS = 2
    second.stop()

    state = deliver_to_alertmanager(cluster)

    assert [a["labels"]["xid"] for a in incident_alerts(first)] == ["79"]
    assert (state.deliveries_total, state.failures_total, state.pending) == (1, 0, 0)
    assert second.url in state.last_error
    assert "unreachable" in state.last_error
    assert first.url not in state.last_error
    client.force_login(alice)  # an admin sees which member failed
    page = client.get(reverse("diagnosis:cluster", args=[cluster.name])).content.decode()
    assert "delivered, not to every Alertmanager" in page
    assert second.url in page
    client.force_login(bob)  # a viewer sees that, not where
    page = client.get(reverse("diagnosis:cluster", args=[cluster.name])).content.decode()
    assert "delivered, not to every Alertmanager" in page
    assert second.url not in page

    second.start()
    state = deliver_to_alertmanager(cluster)

    assert [a["labels"]["xid"] for a in incident_alerts(second)] == ["79"]
    wait_until(lambda: second.webhook.alerts("firing"), what="the second receiver's page")
    assert first.webhook.alerts("firing")
    assert (state.deliveries_total, state.last_error) == (2, "")


def test_every_alertmanager_down_is_a_failed_delivery(settings, make_cluster) -> None:
    cluster = with_an_incident(make_cluster, "am-ha-dead")
    dead = [socket.socket() for _ in range(2)]
    for sock in dead:
        sock.bind(("127.0.0.1", 0))  # bound, never listening: connection refused
    settings.GPUOBS_ALERTMANAGER_URL = ",".join(
        f"http://127.0.0.1:{s.getsockname()[1]}" for s in dead
    )
    try:
        state = deliver_to_alertmanager(cluster)
    finally:
        for sock in dead:
            sock.close()

    assert (state.deliveries_total, state.failures_total) == (0, 1)
    assert state.pending > 0  # the incident (and the cycle's findings) still to send
    assert state.last_error.count("unreachable") == 2


@pytest.mark.django_db(transaction=True)  # the send runs in a thread of its own
def test_a_hanging_alertmanager_does_not_hold_up_the_other(pair, settings, make_cluster) -> None:
    first, _ = pair
    cluster = with_an_incident(make_cluster, "am-ha-hang")
    hanging = socket.socket()
    hanging.bind(("127.0.0.1", 0))
    hanging.listen(8)  # accepts into the backlog, never answers: every try times out
    hung_url = f"http://127.0.0.1:{hanging.getsockname()[1]}"
    settings.GPUOBS_ALERTMANAGER_URL = f"{hung_url},{first.url}"
    settings.GPUOBS_ALERTMANAGER_TIMEOUT_SECONDS = 2  # 3 tries and 2 pauses: about 7.5 s

    def send() -> None:
        try:
            deliver_to_alertmanager(cluster)
        finally:
            connection.close()

    sending = threading.Thread(target=send)
    try:
        sending.start()
        wait_until(lambda: incident_alerts(first), what="the live Alertmanager's alert")
        still_retrying = sending.is_alive()
        sending.join(timeout=60)
    finally:
        hanging.close()

    assert still_retrying
    state = DeliveryState.objects.get(cluster=cluster, channel="alertmanager")
    assert state.deliveries_total == 1
    assert hung_url in state.last_error
