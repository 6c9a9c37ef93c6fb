"""apply against a real Slurm: drain, resume, placement and fairshare written with
scontrol/sacctmgr, dry runs that change nothing, and errors that say whether to retry."""

from __future__ import annotations

import pytest

from diagnosis.edge.schedulers.base import SchedulerError
from tests.support.slurm_cluster import wait_until

pytestmark = pytest.mark.slurm

DRAIN = {"kind": "drain-node", "target": "node:n2", "reason": "gpuobs: Xid 79 on GPU 3"}


def node_flags(slurm, name: str) -> list[str]:
    return slurm.node(name).get("state_flags") or []


def test_a_dry_run_drain_shows_the_command_and_changes_nothing(slurm, adapter) -> None:
    result = adapter().apply(DRAIN, dry_run=True)

    assert (
        result.command == "scontrol update NodeName=n2 State=DRAIN 'Reason=gpuobs: Xid 79 on GPU 3'"
    )
    assert (result.applied, result.dry_run) == (False, True)
    assert result.before == {"state": "ready", "slurm_state": "IDLE", "reason": ""}
    assert result.after == {"state": "drained", "reason": "gpuobs: Xid 79 on GPU 3"}
    assert node_flags(slurm, "n2") == []


def test_drain_then_resume_for_real(slurm, adapter) -> None:
    drained = adapter().apply(DRAIN, dry_run=False)
    record = slurm.node("n2")
    resumed = adapter().apply({"kind": "resume-node", "target": "node:n2"}, dry_run=False)

    assert drained.applied
    assert drained.after == {
        "state": "drained",
        "slurm_state": "IDLE+DRAIN",
        "reason": "gpuobs: Xid 79 on GPU 3",
    }
    assert (record["state_flags"], record["reason"]) == (["DRAIN"], "gpuobs: Xid 79 on GPU 3")
    assert resumed.before["state"] == "drained"
    assert resumed.after["state"] == "ready"
    assert "DRAIN" not in node_flags(slurm, "n2")


def test_draining_a_busy_node_leaves_it_cordoned_until_its_jobs_end(slurm, adapter) -> None:
    job_id = slurm.submit("-A", "team-a", "-w", "n2", "--gres=gpu:1")
    slurm.wait_job(job_id, "RUNNING")

    result = adapter().apply(DRAIN, dry_run=False)

    assert result.after["state"] == "cordoned"
    assert slurm.job_state(job_id) == "RUNNING"


def test_placement_policy_sets_the_partitions_lln(slurm, adapter) -> None:
    result = adapter().apply(
        {"kind": "placement-policy", "target": "pool:gpu", "to": "spread"}, dry_run=False
    )

    assert result.command == "scontrol update PartitionName=gpu LLN=YES"
    assert (result.before, result.after) == ("binpack", "spread")
    assert "LLN=YES" in slurm.run("scontrol", "show", "partition", "gpu", "-o")
    assert adapter().read_state().scheduler["placement"]["gpu"] == "spread"


def test_queue_weight_sets_the_accounts_fairshare(slurm, adapter) -> None:
    change = {"kind": "queue-weight", "target": "queue:team-b", "to": 3}
    try:
        result = adapter().apply(change, dry_run=False)

        assert result.command == "sacctmgr -i modify account name=team-b set fairshare=3"
        assert (result.before, result.after) == (1, 3)
        wait_until(
            lambda: (
                {q["name"]: q for q in adapter().read_state().queues}["team-b"]["weight"] == 3.0
            ),
            what="sshare to show team-b's new fairshare",
        )
    finally:
        slurm.run("sacctmgr", "-i", "modify", "account", "name=team-b", "set", "fairshare=1")


def test_a_change_whose_target_moved_is_refused(slurm, adapter) -> None:
    change = {"kind": "placement-policy", "target": "pool:gpu", "to": "spread", "from": "spread"}

    with pytest.raises(SchedulerError, match="the target changed") as caught:
        adapter().apply(change, dry_run=False)

    assert caught.value.permanent
    assert "LLN=NO" in slurm.run("scontrol", "show", "partition", "gpu", "-o")


def test_an_unknown_partition_is_a_permanent_error_with_slurms_words(adapter) -> None:
    change = {"kind": "placement-policy", "target": "pool:nope", "to": "binpack"}

    with pytest.raises(SchedulerError) as caught:
        adapter().apply(change, dry_run=True)

    assert caught.value.permanent
    assert "Partition nope not found" in str(caught.value)


def test_an_unknown_node_is_a_permanent_error(adapter) -> None:
    with pytest.raises(SchedulerError, match="Node zz9 not found") as caught:
        adapter().apply({"kind": "drain-node", "target": "node:zz9"}, dry_run=False)

    assert caught.value.permanent


def test_a_controller_that_cannot_be_reached_is_a_transient_error(slurm, adapter) -> None:
    unreachable = slurm.unreachable_conf()

    with pytest.raises(SchedulerError) as caught:
        adapter(slurm_conf=str(unreachable), timeout_s=30).read_state()

    assert not caught.value.permanent
    assert "sinfo --json reported" in str(caught.value)


def test_a_command_that_times_out_is_a_transient_error(adapter) -> None:
    with pytest.raises(SchedulerError, match=r"sinfo --json timed out after 0.001 s") as caught:
        adapter(timeout_s=0.001).read_state()

    assert not caught.value.permanent


def test_queue_weight_needs_accounting(adapter) -> None:
    change = {"kind": "queue-weight", "target": "queue:team-a", "to": 2}

    with pytest.raises(SchedulerError, match="needs Slurm accounting") as caught:
        adapter(accounting=False).apply(change, dry_run=True)

    assert caught.value.permanent
