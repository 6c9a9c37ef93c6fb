"""Redis lost as a cycle commits (issue #29, item 5): the cycle's notify step cannot be sent.
Before, the refused send raised out of the committed cycle and the cycle was recorded twice,
once good and once "recording the cycle failed: OperationalError" (same ``as_of``), and its
notifications were never sent. Now the cycle is one good row, the cluster keeps an outbox mark
(``notify_pending_since``), and once Redis is back the next beat fan-out sends the notify step
again: a worker delivers the cycle's alerts to a real Alertmanager."""

from __future__ import annotations

import time

import pytest

from diagnosis.actions.notify.alertmanager import send_pending_notifications
from diagnosis.actions.records.cycles import run_cluster_cycle
from diagnosis.models import Cluster, ClusterCycle, DeliveryState
from tests.faults.conftest import row_counts, wait_until
from tests.support.alertmanager_server import started_alertmanager
from tests.support.records import make_finding, run_cycles

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.lab("lab-commit")]


def test_redis_lost_at_commit_gives_one_row_and_the_notifications_later(
    fault_stack, lab, settings, tmp_path
) -> None:
    run_cycles(lab, 2)  # no notifications wanted yet
    make_finding(lab, "fragmentation", "pool:a100", "firing")  # its resolution: an alert to send
    with started_alertmanager(tmp_path / "alertmanager") as alertmanager:
        settings.GPUOBS_ALERTMANAGER_URL = alertmanager.url
        before = row_counts(lab)
        fault_stack.redis.stop()

        cycle = run_cluster_cycle(Cluster.objects.get(pk=lab.pk))  # its notify send is refused

        after = row_counts(lab)
        pending = Cluster.objects.get(pk=lab.pk).notify_pending_since
        fault_stack.redis.start()
        back = time.monotonic()
        fault_stack.start_worker(extra={"GPUOBS_ALERTMANAGER_URL": alertmanager.url})
        # what beat's next fan-out does first (run_cycles), once the mark is a period old
        wait_until(
            lambda: send_pending_notifications() == [lab.pk], "the notify step sent again", 30
        )
        delivered = wait_until(
            lambda: DeliveryState.objects.filter(
                cluster=lab, channel="alertmanager", last_success_at__isnull=False
            ).first(),
            "the worker to deliver the cycle's alerts",
            60,
        )
        delivered_s = time.monotonic() - back
        print(
            f"fault matrix: redis lost at a cycle's commit: one good row (rows before {before}, "
            f"after {after}); notify mark set; alerts delivered {delivered_s:.1f} s after Redis "
            f"was back ({delivered.alerts_sent_total} alerts)"
        )

    assert cycle.ok
    assert after["cycles"] == before["cycles"] + 1
    assert after["skipped or failed cycles"] == before["skipped or failed cycles"]
    assert ClusterCycle.objects.filter(cluster=lab, as_of=cycle.as_of).count() == 1
    assert pending is not None
    assert Cluster.objects.get(pk=lab.pk).notify_pending_since is None
    assert delivered.deliveries_total == 1  # the cycle's one notify step, delivered once
    assert delivered.alerts_sent_total >= 1
