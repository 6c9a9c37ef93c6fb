"""Retention (issue #17): old snapshots, cycles, finding history and cached replays are deleted
in small batches, each its own transaction; each cluster's latest snapshot and latest good cycle
stay however old; old per-cycle rollups become one row per scope and hour with the same sums; a
cycle runs between two batches of a prune in progress."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from diagnosis.actions.records.cycles import run_cluster_cycle
from diagnosis.actions.upkeep.retention import prune
from diagnosis.models import (
    Cluster,
    ClusterCycle,
    Finding,
    FindingEvent,
    PoolRollup,
    ReplayOutcome,
    Snapshot,
)
from gpuobs import celery_app
from gpuobs.celery import queue_for_task

pytestmark = [pytest.mark.django_db]

NOW = timezone.now().replace(minute=30, second=0, microsecond=0)


def ago(**delta: float):
    return NOW - timedelta(**delta)


def snapshot(cluster: Cluster, when) -> Snapshot:
    return Snapshot.store(cluster, {"format": "gpuobs.snapshot/v1", "as_of": when.isoformat()})


def cycle(cluster: Cluster, when, *, ok: bool = True) -> ClusterCycle:
    return ClusterCycle.objects.create(cluster=cluster, as_of=when, ran_at=when, ok=ok)


def rollup(cluster: Cluster, when, pool: str = "a100", **figures: float) -> PoolRollup:
    return PoolRollup.objects.create(
        cluster=cluster, cycle=cycle(cluster, when), as_of=when, interval_s=60.0, pool=pool,
        **figures,
    )  # fmt: skip


@pytest.fixture
def batches() -> list[tuple[str, int]]:
    return []


def record(batches: list[tuple[str, int]]):
    return lambda table, rows: batches.append((table, rows))


def test_old_snapshots_go_in_batches_and_recent_ones_stay(lab, settings, batches) -> None:
    settings.GPUOBS_RETAIN_SNAPSHOTS_DAYS = 7
    old = [snapshot(lab, ago(days=10, minutes=i)) for i in range(5)]
    recent = [snapshot(lab, ago(days=1)), snapshot(lab, ago(minutes=1))]

    done = prune(now=NOW, batch=2, after_batch=record(batches))

    left = set(Snapshot.objects.filter(cluster=lab).values_list("pk", flat=True))
    assert left == {s.pk for s in recent}
    assert done["snapshots"] == len(old)
    assert [rows for table, rows in batches if table == "snapshots"] == [2, 2, 1]


def test_a_clusters_latest_snapshot_and_good_cycle_stay_however_old(settings, make_cluster) -> None:
    settings.GPUOBS_RETAIN_SNAPSHOTS_DAYS = 7
    settings.GPUOBS_RETAIN_CYCLES_DAYS = 30
    quiet = make_cluster("quiet")
    snapshot(quiet, ago(days=20))
    last_snapshot = snapshot(quiet, ago(days=19))
    last_good = cycle(quiet, ago(days=60))
    cycle(quiet, ago(days=70))
    cycle(quiet, ago(days=50), ok=False)

    prune(now=NOW, batch=10)

    assert list(Snapshot.objects.filter(cluster=quiet)) == [last_snapshot]
    assert list(ClusterCycle.objects.filter(cluster=quiet)) == [last_good]


def test_old_cycles_finding_events_and_replays_go_recent_ones_stay(lab, settings) -> None:
    settings.GPUOBS_RETAIN_CYCLES_DAYS = 30
    settings.GPUOBS_RETAIN_FINDING_EVENTS_DAYS = 90
    settings.GPUOBS_RETAIN_REPLAYS_DAYS = 2
    old_cycles = [cycle(lab, ago(days=40, minutes=i)) for i in range(3)]
    kept_cycles = [cycle(lab, ago(days=2)), cycle(lab, ago(minutes=1))]
    finding = Finding.objects.create(
        cluster=lab, rule_id="starvation", subject="job:j1", first_seen=NOW, last_seen=NOW
    )
    FindingEvent.objects.create(finding=finding, time=ago(days=100), to_state="firing")
    recent_event = FindingEvent.objects.create(finding=finding, time=ago(days=3), to_state="firing")
    stale = ReplayOutcome.objects.create(cluster=lab, key="a" * 64, snapshot_digest="d" * 64)
    ReplayOutcome.objects.filter(pk=stale.pk).update(created_at=ago(days=3))
    fresh = ReplayOutcome.objects.create(cluster=lab, key="b" * 64, snapshot_digest="d" * 64)

    done = prune(now=NOW, batch=2)

    assert done["cycles"] == len(old_cycles)
    assert set(ClusterCycle.objects.filter(cluster=lab)) == set(kept_cycles)
    assert list(FindingEvent.objects.filter(finding=finding)) == [recent_event]
    assert list(ReplayOutcome.objects.all()) == [fresh]


def test_old_rollups_become_one_row_per_pool_and_hour_with_the_same_sums(lab, settings) -> None:
    settings.GPUOBS_ROLLUP_HOURLY_AFTER_DAYS = 30
    settings.GPUOBS_RETAIN_CYCLES_DAYS = 0  # keep the cycles: only the rollups are merged here
    hour = ago(days=31).replace(minute=0)
    for minute in range(0, 60, 10):  # six cycles in one old hour, two pools
        rollup(lab, hour + timedelta(minutes=minute), "a100", gpu_s=480.0, idle_gpu_s=60.0)
        rollup(lab, hour + timedelta(minutes=minute), "h100", gpu_s=240.0, idle_gpu_s=6.0)
    rollup(lab, hour + timedelta(hours=1, minutes=5), "a100", gpu_s=480.0)  # the next hour
    recent = rollup(lab, ago(days=1), "a100", gpu_s=480.0)

    prune(now=NOW, batch=1)

    a100 = PoolRollup.objects.filter(cluster=lab, pool="a100").order_by("as_of")
    assert [(r.as_of, r.cycle_id) for r in a100] == [
        (hour + timedelta(minutes=50), None),
        (hour + timedelta(hours=1, minutes=5), None),
        (recent.as_of, recent.cycle_id),
    ]
    merged = a100[0]
    assert (merged.interval_s, merged.gpu_s, merged.idle_gpu_s) == (360.0, 2880.0, 360.0)
    h100 = PoolRollup.objects.get(cluster=lab, pool="h100")
    assert (h100.gpu_s, h100.idle_gpu_s) == (1440.0, 36.0)


@pytest.mark.django_db(transaction=True)
def test_a_cycle_runs_between_two_batches_of_a_prune(lab, settings) -> None:
    settings.GPUOBS_RETAIN_SNAPSHOTS_DAYS = 7
    for i in range(4):
        snapshot(lab, ago(days=10, minutes=i))
    cycles: list[ClusterCycle] = []

    def run_a_cycle_once(table: str, rows: int) -> None:
        if not cycles:  # the prune is half done: old snapshots are still there
            assert Snapshot.objects.filter(cluster=lab, as_of__lt=ago(days=7)).exists()
            cycles.append(run_cluster_cycle(Cluster.objects.get(pk=lab.pk)))

    done = prune(now=NOW, batch=1, after_batch=run_a_cycle_once)

    assert cycles[0].ok, cycles[0].error
    assert done["snapshots"] == 4
    assert not Snapshot.objects.filter(cluster=lab, as_of__lt=ago(days=7)).exists()


def test_beat_prunes_every_retention_period(settings) -> None:
    entry = celery_app.conf.beat_schedule["retention"]

    assert entry["task"] == "diagnosis.tasks.prune_retention"
    assert entry["schedule"] == settings.GPUOBS_RETENTION_SECONDS
    assert queue_for_task(entry["task"]) == "celery"  # not behind the cycles on diagnose
