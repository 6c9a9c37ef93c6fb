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
    request_recommendation,
    request_rollback,
)
from diagnosis.models import AuditEntry, Cluster, Recommendation
from tests.support.records import make_recommendation
from tests.support.slurm_cluster import free_port

pytestmark = [pytest.mark.slurm, pytest.mark.django_db]

REASON = "gpuobs: Xid 79 (GPU has fallen off the bus) on n2/3"


@pytest.fixture
def cluster(make_cluster, slurm_config) -> Cluster:
    return make_cluster(
        "slurm-workflow",
        scheduler_kind="slurm",
        scheduler_config=slurm_config,
        metrics_kind="none",
        dry_run=False,
    )


@pytest.fixture
def run_tasks(celery_eager, django_capture_on_commit_callbacks):
    def run(action, *args) -> Recommendation:
        with django_capture_on_commit_callbacks(execute=True):
            result = action(*args)
        result.refresh_from_db()
        return result

    return run


def approved(cluster, kind, target, change, requester, approver, run_tasks) -> Recommendation:
    rec = make_recommendation(cluster, kind, target, change)
    if requester is not None:
        request_recommendation(rec, requester)
    return run_tasks(approve_recommendation, rec, approver)


def partition_line(slurm) -> str:
    return slurm.run("scontrol", "show", "partition", "gpu", "-o")


def test_approving_binpack_sets_the_partitions_lln(slurm, cluster, carol, dave, run_tasks) -> None:
    slurm.run("scontrol", "update", "PartitionName=gpu", "LLN=YES")
    rec = approved(
        cluster,
        "placement-policy",
        "pool:gpu",
        {"from": "spread", "to": "binpack"},
        carol,
        dave,
        run_tasks,
    )
    assert rec.dry_run_result["command"] == "scontrol update PartitionName=gpu LLN=NO"
    assert "LLN=YES" in partition_line(slurm)  # the dry run changed nothing

    rec = run_tasks(request_apply, rec, dave)

    assert rec.state == "applied", rec.status_message
    assert "LLN=NO" in partition_line(slurm)
    entry = AuditEntry.objects.get(recommendation=rec, action="apply")
    assert (entry.before, entry.after["value"]) == ("spread", "binpack")  # read back
    assert entry.after["command"] == "scontrol update PartitionName=gpu LLN=NO"


def test_a_cluster_in_dry_run_only_shows_the_exact_command(
    slurm, cluster, carol, dave, run_tasks
) -> None:
    Cluster.objects.filter(pk=cluster.pk).update(dry_run=True)
    slurm.run("scontrol", "update", "PartitionName=gpu", "LLN=YES")
    rec = approved(
        cluster,
        "placement-policy",
        "pool:gpu",
        {"from": "spread", "to": "binpack"},
        carol,
        dave,
        run_tasks,
    )

    rec = run_tasks(request_apply, rec, dave)

    assert rec.state == "approved"
    assert "LLN=YES" in partition_line(slurm)
    entry = AuditEntry.objects.get(recommendation=rec, action="apply-dry-run")
    assert entry.after["command"] == "scontrol update PartitionName=gpu LLN=NO"


def test_oncall_drains_a_node_with_gpuobs_reason(slurm, cluster, erin, run_tasks) -> None:
    rec = approved(
        cluster,
        "drain-node",
        "node:n2",
        {"from": "ready", "to": "drained", "reason": REASON},
        None,  # an on-call drain needs no second person
        erin,
        run_tasks,
    )

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


def test_rolling_back_a_drain_resumes_the_node(slurm, cluster, erin, carol, run_tasks) -> None:
    rec = approved(
        cluster,
        "drain-node",
        "node:n2",
        {"from": "ready", "to": "drained", "reason": REASON},
        None,
        erin,
        run_tasks,
    )
    rec = run_tasks(request_apply, rec, erin)

    undo = run_tasks(request_rollback, rec, erin)
    undo = run_tasks(approve_recommendation, undo, carol)  # a second person (issue #12)
    undo = run_tasks(request_apply, undo, carol)

    assert undo.state == "applied", undo.status_message
    assert undo.apply_result["command"] == "scontrol update NodeName=n2 State=RESUME"
    assert "DRAIN" not in (slurm.node("n2").get("state_flags") or [])
    rec.refresh_from_db()
    assert rec.state == "rolled-back"


def test_a_queue_weight_sets_the_accounts_fairshare(slurm, cluster, carol, dave, run_tasks):
    try:
        rec = approved(
            cluster,
            "queue-weight",
            "queue:team-b",
            {"from": 1, "to": 2},
            carol,
            dave,
            run_tasks,
        )
        rec = run_tasks(request_apply, rec, dave)

        assert rec.state == "applied", rec.status_message
        assert rec.apply_result["command"] == (
            "sacctmgr -i modify account name=team-b set fairshare=2"
        )
        assert (rec.apply_result["before"], rec.apply_result["after"]) == (1, 2)
        shares = slurm.run(
            "sacctmgr",
            "-P",
            "-n",
            "show",
            "associations",
            "where",
            "account=team-b",
            "format=Account,User,Share",
        )
        assert "team-b||2" in shares.splitlines()
    finally:
        slurm.run("sacctmgr", "-i", "modify", "account", "name=team-b", "set", "fairshare=1")


def test_a_fairshare_changed_by_hand_stops_the_apply(slurm, cluster, carol, dave, run_tasks):
    rec = approved(
        cluster, "queue-weight", "queue:team-b", {"from": 2, "to": 3}, carol, dave, run_tasks
    )

    rec = run_tasks(request_apply, rec, dave)

    assert rec.state == "proposed"
    assert "now 1" in rec.status_message
    assert (
        "team-b||1"
        in slurm.run(
            "sacctmgr",
            "-P",
            "-n",
            "show",
            "associations",
            "where",
            "account=team-b",
            "format=Account,User,Share",
        ).splitlines()
    )


def test_an_unreachable_controller_is_retried_then_fails(slurm, cluster, carol, dave) -> None:
    unreachable = slurm.base / "etc" / "unreachable-workflow.conf"
    text = slurm.conf.read_text().replace(
        f"SlurmctldPort={slurm.ports['slurmctld']}", f"SlurmctldPort={free_port()}"
    )
    unreachable.write_text(text + "MessageTimeout=2\n")
    Cluster.objects.filter(pk=cluster.pk).update(
        scheduler_config={**cluster.scheduler_config, "slurm_conf": str(unreachable)}
    )
    rec = make_recommendation(
        cluster,
        "placement-policy",
        "pool:gpu",
        {"from": "spread", "to": "binpack"},
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
