"""read_state against a real Slurm: nodes, accounts and jobs read back as Slurm holds them."""

from __future__ import annotations

import pytest

from diagnosis.core import snapshot as snapshot_format
from diagnosis.edge.schedulers.base import SchedulerAdapter

pytestmark = pytest.mark.slurm


def jobs_by_id(adapter) -> dict[str, dict]:
    return {job["id"]: job for job in adapter().read_state().jobs}


def test_the_adapter_follows_the_protocol(adapter) -> None:
    assert isinstance(adapter(), SchedulerAdapter)


def test_nodes_read_back_with_pool_gpu_model_gpus_and_state(adapter) -> None:
    nodes = {n["name"]: n for n in adapter().read_state().nodes}

    assert {
        name: (n["pool"], n["gpu_model"], n["gpus"], n["state"]) for name, n in nodes.items()
    } == {
        "n1": ("gpu", "H100-SXM5-80GB", 8, "ready"),
        "n2": ("gpu", "H100-SXM5-80GB", 8, "ready"),
        "s1": ("small", "A100-SXM4-80GB", 4, "ready"),
    }


def test_a_running_job_reads_back_with_its_gpu_indexes(slurm, adapter) -> None:
    job_id = slurm.submit("-J", "single", "-A", "team-a", "--gres=gpu:2")
    slurm.wait_job(job_id, "RUNNING")

    job = jobs_by_id(adapter)[job_id]

    assert (job["state"], job["pods"], job["gpus_per_pod"], job["gang"]) == (
        "running",
        1,
        2,
        False,
    )
    assert (job["tenant"], job["queue"], job["pool"], job["name"]) == (
        "team-a",
        "team-a",
        "gpu",
        "single",
    )
    assert {pod["node"]: pod["gpus"] for pod in job["allocation"]} == slurm.job_gpus(job_id)
    assert job["started"] is not None


def test_a_multi_node_job_is_a_gang_with_a_pod_on_each_node(slurm, adapter) -> None:
    job_id = slurm.submit("-J", "multi", "-A", "team-a", "-N", "2", "--gres=gpu:3")
    slurm.wait_job(job_id, "RUNNING")

    job = jobs_by_id(adapter)[job_id]

    assert (job["pods"], job["gpus_per_pod"], job["gang"], job["min_member"]) == (2, 3, True, 2)
    allocation = {pod["node"]: pod["gpus"] for pod in job["allocation"]}
    assert set(allocation) == {"n1", "n2"}
    assert allocation == slurm.job_gpus(job_id)


def test_a_job_that_cannot_fit_pends_with_reason_resources(slurm, adapter) -> None:
    holder = slurm.submit("-J", "holder", "-A", "team-a", "--gres=gpu:4")
    slurm.wait_job(holder, "RUNNING")
    big = slurm.submit("-J", "big", "-A", "team-a", "-N", "2", "--gres=gpu:8")
    slurm.wait_job(big, "PENDING", reason="Resources")

    job = jobs_by_id(adapter)[big]

    assert (job["state"], job["pending_reason"], job["allocation"]) == ("pending", "Resources", [])
    assert (job["pods"], job["gpus_per_pod"], job["gang"]) == (2, 8, True)


def test_a_job_over_its_accounts_gpu_limit_pends_with_assoc_grp_gres(slurm, adapter) -> None:
    job_id = slurm.submit("-J", "capped", "-A", "team-b", "--gres=gpu:5")
    slurm.wait_job(job_id, "PENDING", reason="AssocGrpGRES")

    job = jobs_by_id(adapter)[job_id]

    assert (job["tenant"], job["pending_reason"]) == ("team-b", "AssocGrpGRES")


def test_pending_array_tasks_expand_into_jobs(slurm, adapter) -> None:
    array = slurm.submit("-J", "arr", "-A", "team-a", "-p", "small", "--array=0-5", "--gres=gpu:1")
    slurm.wait_job(f"{array}_3", "RUNNING")
    slurm.wait_job(array, "PENDING", reason="Resources")  # the meta-record of tasks 4-5

    jobs = jobs_by_id(adapter)

    tasks = {ident: job["state"] for ident, job in jobs.items() if ident.startswith(f"{array}_")}
    assert tasks == {f"{array}_{n}": "running" if n < 4 else "pending" for n in range(6)}
    held = sorted(jobs[f"{array}_{n}"]["allocation"][0]["gpus"][0] for n in range(4))
    assert held == [0, 1, 2, 3]


def test_accounts_are_queues_with_fairshare_as_weight_and_gpu_limit_as_capability(
    adapter,
) -> None:
    queues = {q["name"]: q for q in adapter().read_state().queues}

    assert queues == {
        "team-a": {"name": "team-a", "tenant": "team-a", "weight": 4.0},
        "team-b": {"name": "team-b", "tenant": "team-b", "weight": 1.0, "capability_gpus": 4.0},
    }


def test_the_state_is_a_valid_snapshot(slurm, adapter) -> None:
    slurm.wait_job(slurm.submit("-A", "team-a", "-N", "2", "--gres=gpu:2"), "RUNNING")
    state = adapter().read_state()

    snap = snapshot_format.load(
        {
            "format": snapshot_format.FORMAT,
            "cluster": "slurm-test",
            "as_of": "2026-11-29T09:00:00Z",
            "scheduler": state.scheduler,
            "nodes": state.nodes,
            "queues": state.queues,
            "jobs": state.jobs,
        }
    )

    assert snap.total_gpus == 20
    assert len(snap.allocations) == 4
    assert snap.scheduler == {"kind": "slurm", "placement": {"gpu": "binpack", "small": "binpack"}}
