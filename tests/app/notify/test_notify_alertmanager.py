"""Findings and incidents to a real Alertmanager (Debian's 0.25, v2 API): the cycle's notify step
posts the firing findings and the open Xid incident with their labels, annotations and links;
a resolved finding gets its endsAt (Alertmanager notifies the resolution); an Alertmanager that is
down for cycles loses nothing once it is back; failures are counted."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
import requests

from diagnosis.actions.notify.alertmanager import deliver_to_alertmanager
from diagnosis.actions.notify.owner_notices import send_owner_notices
from diagnosis.edge.notify.alertmanager import (
    AlertmanagerTarget,
    NotifyError,
    PostableAlert,
    post_alerts,
)
from diagnosis.models import Cluster, DeliveryState, Finding, FindingEvent, OwnerNoticePolicy
from tests.support.alertmanager_server import AlertmanagerServer, Webhook, started_alertmanager
from tests.support.notify_world import STEP, open_xid_incident, record_cycles
from tests.support.processes import wait_until

pytestmark = [pytest.mark.alertmanager, pytest.mark.django_db]

EXTERNAL = "https://gpuobs.example.org"


@pytest.fixture
def alertmanager(tmp_path: Path) -> Iterator[AlertmanagerServer]:
    with started_alertmanager(tmp_path / "alertmanager") as server:
        yield server


@pytest.fixture
def notifying(settings, alertmanager, celery_eager) -> AlertmanagerServer:
    settings.GPUOBS_ALERTMANAGER_URL = alertmanager.url
    settings.GPUOBS_EXTERNAL_URL = EXTERNAL
    settings.GPUOBS_ALERTMANAGER_TIMEOUT_SECONDS = 2
    return alertmanager


@pytest.fixture
def cycles(django_capture_on_commit_callbacks):
    """``cycles(cluster, states, end)``: record cycles through the real path; their notify step
    runs once each commits."""

    def record(cluster: Cluster, states: list[str], end: datetime) -> None:
        with django_capture_on_commit_callbacks(execute=True):
            record_cycles(cluster, states, end=end)

    return record


def by_subject(alerts, name: str) -> dict[str, dict]:
    return {a["labels"]["subject"]: a for a in alerts if a["labels"]["alertname"] == name}


def notified(webhook: Webhook, status: str, subject: str) -> list[dict]:
    return [a for a in webhook.alerts(status) if a["labels"].get("subject") == subject]


def test_firing_findings_and_an_xid_incident_reach_alertmanager(
    notifying, make_cluster, cycles
) -> None:
    cluster = make_cluster("am-out")
    now = datetime.now(UTC).replace(microsecond=0)
    cycles(cluster, ["idle"], now - STEP)
    incident = open_xid_incident(cluster)
    cycles(cluster, ["idle"], now)

    alerts = wait_until(notifying.alerts, what="alerts in Alertmanager")
    findings = by_subject(alerts, "GpuobsFinding")
    idle = Finding.objects.get(cluster=cluster, rule_id="idle-allocation")
    assert idle.state == "firing"
    sent = findings["job:idle-1"]
    assert sent["labels"] == {
        "alertname": "GpuobsFinding",
        "rule": "idle-allocation",
        "severity": idle.severity,
        "cluster": "am-out",
        "pool": "a100",
        "tenant": "team-a",
        "subject": "job:idle-1",
    }
    assert sent["generatorURL"] == f"{EXTERNAL}/clusters/am-out/findings/{idle.pk}/"
    assert sent["annotations"]["summary"] == idle.summary
    assert sent["annotations"]["runbook_url"].endswith(f"/findings/{idle.pk}/#rule-title")
    assert sent["annotations"]["description"]
    assert sent["status"]["state"] == "active"
    ends = datetime.fromisoformat(sent["endsAt"].replace("Z", "+00:00"))
    assert ends > datetime.now(UTC)  # valid for a few cycles, re-sent each one
    assert findings["gpu:a100-001/3"]["labels"]["severity"] == "critical"

    (xid,) = by_subject(alerts, "GpuobsIncident").values()
    assert xid["labels"]["xid"] == "79"
    assert xid["labels"]["subject"] == f"gpu:{incident.node}/{incident.gpu_index}"
    assert xid["labels"]["severity"] == "critical"
    assert xid["labels"]["tenant"] == "team-b"  # train-2 runs on a100-001
    assert "fallen off the bus" in xid["annotations"]["description"]
    state = DeliveryState.objects.get(cluster=cluster, channel="alertmanager")
    assert (state.deliveries_total, state.failures_total, state.last_error) == (2, 0, "")


def test_a_resolved_finding_gets_its_end_time(notifying, make_cluster, cycles) -> None:
    cluster = make_cluster("am-resolve")
    now = datetime.now(UTC).replace(microsecond=0)
    cycles(cluster, ["idle", "idle"], now - 2 * STEP)
    wait_until(
        lambda: "job:idle-1" in by_subject(notifying.alerts(), "GpuobsFinding"),
        what="the idle-allocation alert",
    )
    cycles(cluster, ["busy", "busy"], now)
    idle = Finding.objects.get(cluster=cluster, rule_id="idle-allocation")
    assert idle.state == "resolved"
    resolved_at = FindingEvent.objects.get(finding=idle, to_state="resolved").time

    # Alertmanager no longer holds it as active and tells its receivers it resolved, at our time
    assert "job:idle-1" not in by_subject(notifying.alerts(), "GpuobsFinding")
    (notice,) = wait_until(
        lambda: notified(notifying.webhook, "resolved", "job:idle-1"),
        what="Alertmanager's resolved notification",
    )
    ends = datetime.fromisoformat(notice["endsAt"].replace("Z", "+00:00"))
    assert abs((ends - resolved_at).total_seconds()) < 1.5


def test_alertmanager_down_for_cycles_loses_nothing_once_back(
    notifying, make_cluster, cycles
) -> None:
    cluster = make_cluster("am-down")
    now = datetime.now(UTC).replace(microsecond=0)
    cycles(cluster, ["idle", "idle"], now - 3 * STEP)
    open_xid_incident(cluster)
    deliver_to_alertmanager(cluster)
    wait_until(
        lambda: notified(notifying.webhook, "firing", "job:idle-1"),
        what="the firing notification",
    )

    notifying.stop()
    cycles(cluster, ["busy", "busy"], now - STEP)
    state = DeliveryState.objects.get(cluster=cluster, channel="alertmanager")
    assert state.consecutive_failures == 2
    assert "unreachable" in state.last_error
    assert Finding.objects.get(cluster=cluster, rule_id="idle-allocation").state == "resolved"

    notifying.start()  # same storage: its notification log remembers what it notified
    cycles(cluster, ["busy"], now)
    alerts = notifying.alerts()
    assert set(by_subject(alerts, "GpuobsIncident")) == {"gpu:a100-001/3"}  # still open
    assert "job:idle-1" not in by_subject(alerts, "GpuobsFinding")
    wait_until(
        lambda: notified(notifying.webhook, "resolved", "job:idle-1"),
        what="the resolution that happened while Alertmanager was down",
    )
    state.refresh_from_db()
    assert (state.consecutive_failures, state.failures_total, state.last_error) == (0, 2, "")


def test_the_client_retries_with_backoff_then_gives_up(alertmanager) -> None:
    pauses: list[float] = []
    target = AlertmanagerTarget(url="http://127.0.0.1:9", retries=3, backoff_s=0.5)
    with pytest.raises(NotifyError) as caught:
        post_alerts(target, [PostableAlert(labels={"alertname": "X"})], sleep=pauses.append)
    assert pauses == [0.5, 1.0, 2.0]
    assert not caught.value.permanent
    # an alert without labels is refused with 400: permanent, not retried
    bad = AlertmanagerTarget(url=alertmanager.url, retries=3)
    with pytest.raises(NotifyError) as refused:
        post_alerts(bad, [PostableAlert(labels={})], sleep=pauses.append)
    assert refused.value.permanent
    assert "400" in str(refused.value)
    assert len(pauses) == 3
    assert requests.get(f"{alertmanager.url}/api/v2/alerts", timeout=5).json() == []


def test_severity_threshold_per_rule(notifying, make_cluster, settings) -> None:
    settings.GPUOBS_ALERTMANAGER_RULE_SEVERITY = ["idle-allocation=critical"]
    cluster = make_cluster("am-threshold")
    record_cycles(cluster, ["idle", "idle"])
    deliver_to_alertmanager(cluster)
    subjects = set(by_subject(notifying.alerts(), "GpuobsFinding"))
    assert "gpu:a100-001/3" in subjects  # xid: critical
    assert "job:idle-1" not in subjects  # below its rule's threshold
    assert Finding.objects.get(cluster=cluster, rule_id="idle-allocation").state == "firing"


def test_an_owner_notice_as_an_alert_with_an_owner_label(notifying, make_cluster) -> None:
    cluster = make_cluster("am-owner")
    OwnerNoticePolicy.objects.create(
        cluster=cluster, enabled=True, grace_s=600, channel="owner-alertmanager"
    )
    record_cycles(cluster, ["idle"] * 4)
    assert send_owner_notices(cluster) == 1
    (alert,) = [a for a in notifying.alerts() if a["labels"]["alertname"] == "GpuobsOwnerNotice"]
    assert alert["labels"]["owner"] == "team-a"
    assert alert["labels"]["job"] == "idle-1"
    assert alert["labels"]["rule"] == "idle-allocation"
    assert "GPU-hours" in alert["annotations"]["description"]
    assert send_owner_notices(cluster) == 0  # once a day
