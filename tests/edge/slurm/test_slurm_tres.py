"""The ``slurm_tres`` source against the real test Slurm: its fake GPUs have no NVML, so
accounting stores no ``gres/gpuutil``, and the source must say so (coverage 0, not judgeable)
instead of reporting idle GPUs."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from diagnosis.actions.records.cycles import run_cluster_cycle
from diagnosis.edge.sources import slurm_tres
from diagnosis.models import Finding

pytestmark = pytest.mark.slurm


@dataclass
class Cluster:
    scheduler_config: dict
    name: str = "tres"
    scheduler_kind: str = "slurm"
    metrics_kind: str = "slurm_tres"
    metrics_config: dict = field(default_factory=dict)
    event_cursor: str = ""


def test_without_gpu_tres_the_running_jobs_are_not_judged(slurm, slurm_config) -> None:
    job_id = slurm.submit("-J", "tres", "-A", "team-a", "--gres=gpu:2", command="srun sleep 600")
    slurm.wait_job(job_id, "RUNNING")

    document = slurm_tres.collect(Cluster(slurm_config))

    collection = document["collection"]
    assert any(c["command"].startswith("sstat -a -n -P -j ") for c in collection["commands"])
    assert (collection["gpus_expected"], collection["gpus_answered"]) == (2, 0)
    assert collection["coverage"] == 0
    assert collection["judgeable"] is False
    assert "gres/gpuutil" in collection["problems"][0]
    assert not [g for g in document["gpus"] if "util" in g]


@pytest.mark.django_db
def test_a_cycle_with_metrics_kind_slurm_tres_says_the_gpu_rules_could_not_judge(
    slurm, slurm_config, make_cluster
) -> None:
    cluster = make_cluster(
        "tres-cycle",
        scheduler_kind="slurm",
        scheduler_config=slurm_config,
        metrics_kind="slurm_tres",
    )
    job_id = slurm.submit("-J", "idle", "-A", "team-a", "--gres=gpu:2", command="srun sleep 600")
    slurm.wait_job(job_id, "RUNNING")

    cycle = run_cluster_cycle(cluster)

    assert (cycle.ok, cycle.error) == (True, "")
    assert (cycle.gpus, cycle.allocated_gpus) == (20, 2)
    assert cycle.source["source"] == "slurm_tres"
    assert cycle.coverage == 0
    assert "idle-allocation" in cycle.not_judged  # no value is no idleness
    assert not Finding.objects.filter(cluster=cluster, rule_id="idle-allocation").exists()
