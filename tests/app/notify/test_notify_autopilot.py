"""On-call is told what a policy applied (docs/autopilot.md "On-call is told"): the autopilot step
sends the notify step at once, and a real Alertmanager (Debian's prometheus-alertmanager on
loopback, tests/support/alertmanager_server.py) holds a ``GpuobsAutopilotAction`` alert naming
the policy, its approver and how to undo the change."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.alertmanager_server import AlertmanagerServer, started_alertmanager
from tests.support.autopilot import approved_policy, step, xid_drain
from tests.support.processes import wait_until
from tests.support.records import run_cycles

pytestmark = [pytest.mark.django_db, pytest.mark.lab("lab-autopilot-am", dry_run=False)]


@pytest.fixture
def alertmanager(tmp_path: Path) -> Iterator[AlertmanagerServer]:
    with started_alertmanager(tmp_path / "alertmanager") as server:
        yield server


@pytest.mark.alertmanager
def test_an_applied_drain_reaches_alertmanager_with_its_approver_and_undo(
    settings, alertmanager, lab, celery_eager, carol, dave, django_capture_on_commit_callbacks
) -> None:
    settings.GPUOBS_ALERTMANAGER_URL = alertmanager.url
    settings.GPUOBS_ALERTMANAGER_TIMEOUT_SECONDS = 2
    run_cycles(lab, 1)
    policy = approved_policy(carol, dave)
    node = lab.snapshots.latest("as_of").load_document()["nodes"][0]["name"]
    rec = xid_drain(lab, node)

    step(lab, django_capture_on_commit_callbacks)

    def autopilot_alerts() -> list[dict]:
        return [
            a
            for a in alertmanager.alerts()
            if a["labels"].get("alertname") == "GpuobsAutopilotAction"
        ]

    (alert,) = wait_until(autopilot_alerts, what="the autopilot alert in Alertmanager")
    assert alert["labels"]["policy"] == "xid-drain"
    assert (alert["labels"]["outcome"], alert["labels"]["subject"]) == ("applied", f"node:{node}")
    assert "approved by dave" in alert["annotations"]["summary"]
    assert f"Roll back recommendation #{rec.pk}" in alert["annotations"]["description"]
    assert alert["generatorURL"].endswith(f"/autopilot/{policy.pk}/")
