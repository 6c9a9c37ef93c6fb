"""The recommendation workflow against a real Slurm (the session cluster of tests/edge/slurm): an
approved binpack sets the partition's ``LLN=NO``, a drain drains the node with gpuobs' reason,
a queue weight sets the account's fairshare; each is read back and audited with the exact
command. A cluster in dry-run only shows the command; a target changed by hand stops the apply;
an unreachable controller is retried, then fails.

(Beside the adapter's own tests, so that both share one Slurm per session.)
"""

from __future__ import annotations

import pytest

from diagnosis.actions.workflow.apply import perform_apply
from diagnosis.actions.workflow.base import TransientApplyError
from diagnosis.actions.workflow.review import (
    approve_recommendation,
    request_apply,
    request_rollback,
)
from diagnosis.models import AuditEntry, Cluster
from tests.support.records import make_recommendation

pytestmark = [pytest.mark.slurm, pytest.mark.django_db]

REASON = "gpuobs: Xid 79 (GPU has fallen off the bus) on n2/3"
BINPACK = {"from": "spread", "to": "binpack"}
DRAIN = {"from": "ready", "to": "drained", "reason": REASON}


@pytest.fixture
def cluster(make_cluster, slurm_config) -> Cluster:
    return make_cluster(
        "slurm-workflow",
        scheduler_kind="slurm",
        scheduler_config=slurm_config,
        metrics_kind="none",
        dry_run=False,
    )


def partition_line(slurm) -> str:
    return slurm.run("scontrol", "show", "partition", "gpu", "-o")


def shares(slurm, account: str) -> list[str]:
    """The account's associations as ``account|user|share`` lines."""
    return slurm.associations(f"account={account}", "Account,User,Share").splitlines()


def test_approving_binpack_sets_the_partitions_lln(slurm, cluster, approve, dave, run_tasks):
    slurm.run("scontrol", "update", "PartitionName=gpu", "LLN=YES")
    rec = approve(cluster, "placement-policy", "pool:gpu", BINPACK)
    assert rec.dry_run_result["command"] == "scontrol update PartitionName=gpu LLN=NO"
    assert "LLN=YES" in partition_line(slurm)  # the dry run changed nothing

    rec = run_tasks(request_apply, rec, dave)

    assert rec.state == "applied", rec.status_message
    assert "LLN=NO" in partition_line(slurm)
    entry = AuditEntry.objects.get(recommendation=rec, action="apply")
    assert (entry.before, entry.after["value"]) == ("spread", "binpack")  # read back
    assert entry.after["command"] == "scontrol update PartitionName=gpu LLN=NO"


def test_a_cluster_in_dry_run_only_shows_the_exact_command(
    slurm, cluster, approve, dave, run_tasks
) -> None:
    Cluster.objects.filter(pk=cluster.pk).update(dry_run=True)
    slurm.run("scontrol", "update", "PartitionName=gpu", "LLN=YES")
    rec = approve(cluster, "placement-policy", "pool:gpu", BINPACK)

    rec = run_tasks(request_apply, rec, dave)

    assert rec.state == "approved"
    assert "LLN=YES" in partition_line(slurm)
    entry = AuditEntry.objects.get(recommendation=rec, action="apply-dry-run")
    assert entry.after["command"] == "scontrol update PartitionName=gpu LLN=NO"


def test_oncall_drains_a_node_with_gpuobs_reason(slurm, cluster, approve, erin, run_tasks):
    rec = approve(cluster, "drain-node", "node:n2", DRAIN)  # erin (on-call) alone

    rec = run_tasks(request_apply, rec, erin)

    assert rec.state == "applied", rec.status_message
    node = slurm.node("n2")
    assert (node["state_flags"], node["reason"]) == (["DRAIN"], REASON)
    assert rec.apply_result["after"] == {
        "state": "drained",
        "slurm_state": "IDLE+DRAIN",
        "reason": REASON,
    }
    assert rec.apply_result["command"] == (
        f"scontrol update NodeName=n2 State=DRAIN 'Reason={REASON}'"
    )


def test_rolling_back_a_drain_resumes_the_node(
    slurm, cluster, approve, erin, carol, run_tasks
) -> None:
    rec = approve(cluster, "drain-node", "node:n2", DRAIN)
    rec = run_tasks(request_apply, rec, erin)

    undo = run_tasks(request_rollback, rec, erin)
    undo = run_tasks(approve_recommendation, undo, carol)  # a second person (issue #12)
    undo = run_tasks(request_apply, undo, carol)

    assert undo.state == "applied", undo.status_message
    assert undo.apply_result["command"] == "scontrol update NodeName=n2 State=RESUME"
    assert "DRAIN" not in (slurm.node("n2").get("state_flags") or [])
    rec.refresh_from_db()
    assert rec.state == "rolled-back"


def test_a_queue_weight_sets_the_accounts_fairshare(slurm, cluster, approve, dave, run_tasks):
    try:
        rec = approve(cluster, "queue-weight", "queue:team-b", {"from": 1, "to": 2})
        rec = run_tasks(request_apply, rec, dave)

        assert rec.state == "applied", rec.status_message
        assert rec.apply_result["command"] == (
            "sacctmgr -i modify account name=team-b set fairshare=2"
        )
        assert (rec.apply_result["before"], rec.apply_result["after"]) == (1, 2)
        assert "team-b||2" in shares(slurm, "team-b")
    finally:
        slurm.run("sacctmgr", "-i", "modify", "account", "name=team-b", "set", "fairshare=1")


def test_a_fairshare_changed_by_hand_stops_the_apply(slurm, cluster, approve, dave, run_tasks):
    rec = approve(cluster, "queue-weight", "queue:team-b", {"from": 2, "to": 3})

    rec = run_tasks(request_apply, rec, dave)

    assert rec.state == "proposed"
    assert "now 1" in rec.status_message
    assert "team-b||1" in shares(slurm, "team-b")


def test_an_unreachable_controller_is_retried_then_fails(slurm, cluster) -> None:
    unreachable = slurm.unreachable_conf("unreachable-workflow")
    Cluster.objects.filter(pk=cluster.pk).update(
        scheduler_config={**cluster.scheduler_config, "slurm_conf": str(unreachable)}
    )
    rec = make_recommendation(
        cluster,
        "placement-policy",
        "pool:gpu",
        BINPACK,
        state="applying",
        apply_key="k1",
    )

    with pytest.raises(TransientApplyError):
        perform_apply(rec.pk, "k1", final_attempt=False)
    rec.refresh_from_db()
    assert (rec.state, rec.apply_claimed_at) == ("applying", None)  # free for the retry
    assert rec.status_message.startswith("retrying: the dry run failed")

    outcome = perform_apply(rec.pk, "k1", final_attempt=True)

    rec.refresh_from_db()
    assert outcome.outcome == "failed"
    assert rec.state == "failed"
