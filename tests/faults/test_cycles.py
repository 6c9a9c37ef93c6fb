"""Cycles under fault (issue #18, defects 4-6): two beats give one cycle per cluster and
interval; a killed worker's cycle lock frees itself within about one interval; a worker whose
clock runs 10 minutes fast refuses its cycles visibly (a cycle row, the cluster's status, the
API, ``/healthz?deep=1``) instead of silently dropping them."""

from __future__ import annotations

import itertools
import os
import signal
import time
from datetime import timedelta

import pytest
import redis
from django.db import OperationalError

from diagnosis import tasks
from diagnosis.models import Cluster, ClusterCycle
from diagnosis.tasks import cycle_lock_key
from tests.conftest import require_binary
from tests.faults.conftest import (
    CYCLE_SECONDS,
    good_cycles,
    row_counts,
    row_locked,
    someone_waits_on_a_row_lock,
    wait_until,
)
from tests.support.world import logged_in_client

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.lab("lab-faults")]


def test_two_beats_start_one_cycle_per_cluster_and_interval(fault_stack, lab) -> None:
    fault_stack.start_beat()
    fault_stack.start_beat()
    worker = fault_stack.start_worker()
    wait_until(lambda: len(good_cycles(lab)) >= 4, "four cycles under two beats", 40)

    cycles = good_cycles(lab)
    starts = [c.ran_at - timedelta(seconds=c.seconds) for c in cycles]
    gaps = [(b - a).total_seconds() for a, b in itertools.pairwise(starts)]
    window = (starts[-1] - starts[0]).total_seconds()
    print(f"fault matrix: two beats: {len(cycles)} cycles in {window:.1f} s, gaps {gaps}")

    assert min(gaps) >= 0.75 * CYCLE_SECONDS - 0.25, gaps  # never two in one interval
    assert len(cycles) - 1 <= window / (0.75 * CYCLE_SECONDS) + 1
    assert "same-interval" in worker.text()  # the second beat's sends were there, and skipped


def test_a_killed_workers_cycle_lock_frees_itself_within_about_one_interval(
    fault_stack, lab
) -> None:
    fault_stack.start_beat()
    worker = fault_stack.start_worker()
    lock = redis.Redis.from_url(fault_stack.redis.url)
    with row_locked(Cluster, lab.pk):  # the cycle waits to record itself, holding its lock
        wait_until(someone_waits_on_a_row_lock, "a cycle to wait on the cluster's row")
        assert lock.exists(cycle_lock_key(lab.pk))
        before = row_counts(lab)
        for pid in [*worker.pool_child_pids(), worker.pid]:
            os.kill(pid, signal.SIGKILL)
        killed = time.monotonic()
    wait_until(lambda: not lock.exists(cycle_lock_key(lab.pk)), "the lock to lapse", 10)
    freed_s = time.monotonic() - killed
    fault_stack.start_worker()  # what the supervisor does
    wait_until(lambda: len(good_cycles(lab)) > before["cycles"], "a cycle after the kill", 30)
    recovered_s = time.monotonic() - killed
    print(
        f"fault matrix: worker killed mid-cycle: lock freed in {freed_s:.1f} s, "
        f"next cycle {recovered_s:.1f} s after the kill"
    )

    assert freed_s <= 1.5 * CYCLE_SECONDS + 1
    after = row_counts(lab)
    assert after["findings"] >= before["findings"]


def test_a_worker_clock_ten_minutes_fast_refuses_its_cycles_and_says_so(
    fault_stack, lab, alice
) -> None:
    faketime = require_binary("faketime", "apt-get install faketime")
    fault_stack.start_beat()
    fault_stack.start_worker(prefix=[faketime, "-f", "+600s"])
    refused = wait_until(
        lambda: ClusterCycle.objects.filter(cluster=lab, ok=False, error__contains="clock").first(),
        "a refused cycle",
        30,
    )
    client = logged_in_client(alice)
    wait_until(
        lambda: "clock" in (client.get("/healthz?deep=1").json()["worker"]["detail"]),
        "the deep health check to name the clock",
        20,
    )
    deep = client.get("/healthz?deep=1")
    api = client.get(f"/api/clusters/{lab.pk}/").json()
    print(f"fault matrix: worker clock +600 s: {refused.error!r}; healthz {deep.status_code}")

    assert "600 s ahead of the database's" in refused.error
    assert good_cycles(lab) == []  # nothing stamped 10 minutes ahead
    assert deep.status_code == 503
    assert deep.json()["worker"]["status"] == "error"
    assert api["status"] == "error"
    assert "clock" in api["last_attempt_error"]
    assert api["stale"] is True


def test_a_cycle_killed_by_a_lost_database_leaves_a_failed_cycle_row(
    lab, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PostgreSQL restarted mid-cycle (the connection dropped under the cycle): the task still
    fails, and once the database answers a failed row and the cluster's status say why."""

    def cycle_losing_its_database(cluster: Cluster, **options) -> None:
        raise OperationalError("server closed the connection unexpectedly")

    monkeypatch.setattr(tasks, "start_cluster_cycle", cycle_losing_its_database)
    with pytest.raises(OperationalError):
        tasks.run_cycle(lab.pk)

    lost = ClusterCycle.objects.get(cluster=lab, ok=False)
    lab.refresh_from_db()
    assert "database connection was lost mid-cycle (OperationalError)" in lost.error
    assert lab.status == "error"
    assert lab.status_message == lost.error


def test_the_overview_never_prefers_a_cycle_a_fast_clock_stamped_ahead(lab, alice) -> None:
    """Issue #18, defect 5: a cycle stamped 10 minutes ahead (a worker clock before the refusal,
    or restored data) showed "coverage 0.0%" under OK / Fresh for 10 minutes."""
    tasks.run_cycle(lab.pk)
    real = ClusterCycle.objects.get(cluster=lab, ok=True)
    ahead = timedelta(minutes=10)
    ClusterCycle.objects.create(
        cluster=lab, as_of=real.as_of + ahead, ran_at=real.ran_at + ahead, coverage=0.0
    )

    page = logged_in_client(alice).get(f"/clusters/{lab.name}/")

    assert page.status_code == 200
    assert page.context["freshness"].as_of == real.as_of


def test_a_cycle_longer_than_its_locks_life_keeps_the_lock(fault_stack) -> None:
    """A stalled Prometheus made a cycle outlive its lock (issue #18, defect 6): the lock is
    renewed while its holder runs, and freed at once when it ends."""
    client = redis.Redis.from_url(fault_stack.redis.url)
    held = tasks.RenewedLock(client, "gpuobs:cycle:test", ttl_s=0.6)
    assert held.acquire()
    try:
        time.sleep(2.0)  # the fault: the cycle runs three lock lives
        second = tasks.RenewedLock(client, "gpuobs:cycle:test", ttl_s=0.6)
        assert not second.acquire()
        assert held.lock.owned()
    finally:
        held.release()
    assert not client.exists("gpuobs:cycle:test")
    assert not held.lost
