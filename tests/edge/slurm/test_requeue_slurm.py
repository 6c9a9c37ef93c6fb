"""``gang-release`` against a real Slurm: ``scontrol requeue`` puts a running job back in the
queue; a dry run shows the command and changes nothing; a release guarded by ``"from":
"partial"`` is refused, since Slurm allocates a job whole and never holds part of one."""

from __future__ import annotations

import pytest

from diagnosis.edge.schedulers.base import SchedulerError

pytestmark = pytest.mark.slurm


def release(job_id: str, **extra) -> dict:
    return {"kind": "gang-release", "target": f"job:{job_id}", "to": "requeued", **extra}


def test_a_dry_run_requeue_shows_the_command_and_changes_nothing(slurm, adapter) -> None:
    job_id = slurm.submit("-A", "team-a", "--gres=gpu:1")
    slurm.wait_job(job_id, "RUNNING")

    result = adapter().apply(release(job_id), dry_run=True)

    assert result.command == f"scontrol requeue {job_id}"
    assert (result.before, result.applied) == ("running", False)
    assert slurm.job_state(job_id) == "RUNNING"


def test_requeue_puts_a_running_job_back_in_the_queue(slurm, adapter) -> None:
    job_id = slurm.submit("-A", "team-a", "--gres=gpu:1")
    slurm.wait_job(job_id, "RUNNING")

    result = adapter().apply(release(job_id), dry_run=False)

    assert result.applied
    assert result.before == "running"
    assert result.after != "running"  # completing on its way back to the queue
    record = slurm.wait_job(job_id, "PENDING")  # requeued: it waits for its begin time
    assert int(record.get("restart_cnt") or 0) == 1


def test_a_release_of_a_partial_gang_is_refused_on_slurm(slurm, adapter) -> None:
    job_id = slurm.submit("-A", "team-a", "--gres=gpu:1")
    slurm.wait_job(job_id, "RUNNING")

    with pytest.raises(SchedulerError, match="expected 'partial'") as raised:
        adapter().apply(release(job_id, **{"from": "partial"}), dry_run=False)

    assert raised.value.conflict
    assert slurm.job_state(job_id) == "RUNNING"
