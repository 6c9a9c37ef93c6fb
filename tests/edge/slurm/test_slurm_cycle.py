"""A cluster with scheduler_kind "slurm" and no metrics source runs the full cycle against a
real Slurm: snapshot from the adapter, rules, GPU-hour rollup, events stored with the cursor."""

from __future__ import annotations

import pytest

from diagnosis.actions.records.cycles import run_cluster_cycle
from diagnosis.models import Cluster, ClusterCycle, SchedulerEvent, Snapshot

pytestmark = [pytest.mark.slurm, pytest.mark.django_db]


@pytest.fixture
def cluster(make_cluster, slurm_config) -> Cluster:
    return make_cluster(
        "slurm-test", scheduler_kind="slurm", scheduler_config=slurm_config, metrics_kind="none"
    )


def test_a_slurm_cluster_runs_the_full_cycle(slurm, cluster) -> None:
    running = slurm.submit("-J", "multi", "-A", "team-a", "-N", "2", "--gres=gpu:3")
    slurm.wait_job(running, "RUNNING")
    waiting = slurm.submit("-J", "capped", "-A", "team-b", "--gres=gpu:5")
    slurm.wait_job(waiting, "PENDING", reason="AssocGrpGRES")

    cycle = run_cluster_cycle(cluster)

    assert (cycle.ok, cycle.error, cycle.rule_errors) == (True, "", [])
    assert (cycle.gpus, cycle.allocated_gpus) == (20, 6)
    assert cycle.allocation_utilization == pytest.approx(6 / 20)
    document = Snapshot.objects.get(cluster=cluster).load_document()
    assert {job["id"]: job["state"] for job in document["jobs"]} == {
        running: "running",
        waiting: "pending",
    }
    event = SchedulerEvent.objects.get(cluster=cluster, kind="failed_scheduling")
    assert (event.job_external_id, event.reason) == (waiting, "AssocGrpGRES")
    assert Cluster.objects.get(pk=cluster.pk).event_cursor
    commands = [c["command"] for c in cycle.source["commands"]]
    assert commands[:3] == ["sinfo --json", "squeue --json", "scontrol show partition -o"]


def test_a_second_cycle_stores_no_event_twice(slurm, cluster) -> None:
    job_id = slurm.submit("-A", "team-a", "--gres=gpu:1")
    slurm.wait_job(job_id, "RUNNING")
    run_cluster_cycle(cluster)
    first = set(SchedulerEvent.objects.filter(cluster=cluster).values_list("dedup_key", flat=True))

    cycle = run_cluster_cycle(Cluster.objects.get(pk=cluster.pk))

    assert cycle.ok
    kinds = SchedulerEvent.objects.filter(cluster=cluster, job_external_id=job_id)
    assert sorted(kinds.values_list("kind", flat=True)) == ["started", "submitted"]
    again = set(SchedulerEvent.objects.filter(cluster=cluster).values_list("dedup_key", flat=True))
    assert again == first
    assert ClusterCycle.objects.filter(cluster=cluster, ok=True).count() == 2


def test_an_unreachable_slurm_fails_the_cycle_and_says_why(slurm, cluster) -> None:
    cluster.scheduler_config = {**cluster.scheduler_config, "timeout_s": 0.001}
    cluster.save()

    cycle = run_cluster_cycle(cluster)

    assert not cycle.ok
    assert "sinfo --json timed out" in cycle.error
    cluster.refresh_from_db()
    assert (cluster.status, "timed out" in cluster.status_detail) == ("error", True)
