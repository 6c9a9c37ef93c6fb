"""read_events against a real Slurm: pending reasons, drains and job ends become normalized
events with Slurm's own reason kept, stored once each with the cursor."""

from __future__ import annotations

import pytest

from diagnosis.actions.records.events import record_scheduler_events
from diagnosis.models import Cluster, SchedulerEvent

pytestmark = pytest.mark.slurm


def events_of(batch, kind: str) -> list[dict]:
    return [event for event in batch.events if event["kind"] == kind]


def test_a_pending_reason_becomes_a_failed_scheduling_event_with_the_original_reason(
    slurm, adapter
) -> None:
    first = slurm.submit("-A", "team-a", "--gres=gpu:1")
    waiting = slurm.submit("-A", "team-a", f"--dependency=afterok:{first}", "--gres=gpu:1")
    slurm.wait_job(waiting, "PENDING", reason="Dependency")

    batch = adapter().read_events(None)

    [event] = [e for e in events_of(batch, "failed_scheduling") if e["job"] == waiting]
    assert (event["reason"], event["node"]) == ("Dependency", None)
    assert event["message"] == f"job {waiting} pending: Dependency"


def test_a_qos_gpu_limit_per_user_pends_with_qos_max_gres_per_user(slurm, adapter) -> None:
    first = slurm.submit("-A", "team-a", "--qos=gpu2", "--gres=gpu:2")
    slurm.wait_job(first, "RUNNING")
    over = slurm.submit("-A", "team-a", "--qos=gpu2", "--gres=gpu:1")
    slurm.wait_job(over, "PENDING", reason="QOSMaxGRESPerUser")

    batch = adapter().read_events(None)

    [event] = [e for e in events_of(batch, "failed_scheduling") if e["job"] == over]
    assert event["reason"] == "QOSMaxGRESPerUser"


def test_req_node_not_avail_keeps_slurms_description(slurm, adapter) -> None:
    slurm.run("scontrol", "update", "NodeName=s1", "State=DRAIN", "Reason=gpuobs test")
    pinned = slurm.submit("-A", "team-a", "-p", "small", "-w", "s1", "--gres=gpu:1")
    slurm.wait_job(pinned, "PENDING", reason="ReqNodeNotAvail")

    batch = adapter().read_events(None)

    [event] = [e for e in events_of(batch, "failed_scheduling") if e["job"] == pinned]
    assert event["reason"] == "ReqNodeNotAvail"
    assert event["message"] == "ReqNodeNotAvail, UnavailableNodes:s1"


def test_the_same_reason_is_not_reported_twice(slurm, adapter) -> None:
    capped = slurm.submit("-A", "team-b", "--gres=gpu:5")
    slurm.wait_job(capped, "PENDING", reason="AssocGrpGRES")
    first = adapter().read_events(None)

    second = adapter().read_events(first.cursor)

    assert [e["reason"] for e in events_of(first, "failed_scheduling")] == ["AssocGrpGRES"]
    assert events_of(second, "failed_scheduling") == []


def test_a_drain_shows_in_the_node_state_and_as_a_node_drained_event(slurm, adapter) -> None:
    slurm.run("scontrol", "update", "NodeName=n2", "State=DRAIN", "Reason=Xid 79 on GPU 3")
    reading = adapter()

    nodes = {node["name"]: node["state"] for node in reading.read_state().nodes}
    batch = reading.read_events(None)

    assert nodes == {"n1": "ready", "n2": "drained", "s1": "ready"}
    [event] = events_of(batch, "node_drained")
    assert (event["node"], event["reason"]) == ("n2", "Xid 79 on GPU 3")
    assert event["time"] is not None


def test_a_drain_with_jobs_running_is_cordoned_until_they_end(slurm, adapter) -> None:
    job_id = slurm.submit("-A", "team-a", "-p", "small", "--gres=gpu:1")
    slurm.wait_job(job_id, "RUNNING")
    slurm.run("scontrol", "update", "NodeName=s1", "State=DRAIN", "Reason=maintenance")

    draining = {n["name"]: n["state"] for n in adapter().read_state().nodes}["s1"]
    slurm.cancel([job_id])
    slurm.wait_until_node("s1", "idle")
    drained = {n["name"]: n["state"] for n in adapter().read_state().nodes}["s1"]

    assert (draining, drained) == ("cordoned", "drained")


def test_ended_jobs_become_completed_and_failed_events(slurm, adapter) -> None:
    done = slurm.submit("-A", "team-a", command="true")
    broken = slurm.submit("-A", "team-a", command="exit 3")
    slurm.wait_job(done, "COMPLETED")
    slurm.wait_job(broken, "FAILED")

    batch = adapter().read_events(None)

    ended = {
        e["job"]: (e["kind"], e["reason"])
        for e in batch.events
        if e["job"] in {done, broken} and e["kind"] in {"completed", "failed"}
    }
    assert ended == {done: ("completed", "COMPLETED"), broken: ("failed", "FAILED")}
    started = {e["job"] for e in events_of(batch, "started")}
    assert {done, broken} <= started


@pytest.mark.django_db
def test_events_are_stored_once_and_the_cursor_is_kept(slurm, adapter, make_cluster) -> None:
    cluster = make_cluster("slurm-test", scheduler_kind="slurm")
    first = slurm.submit("-A", "team-a", "--gres=gpu:1")
    waiting = slurm.submit("-A", "team-a", f"--dependency=afterok:{first}", "--gres=gpu:1")
    slurm.wait_job(first, "RUNNING")  # started before the first read: no event comes in between
    slurm.wait_job(waiting, "PENDING", reason="Dependency")
    stored = record_scheduler_events(cluster, adapter().read_events(None))
    count = SchedulerEvent.objects.filter(cluster=cluster).count()

    again = record_scheduler_events(
        cluster, adapter().read_events(Cluster.objects.get(pk=cluster.pk).event_cursor)
    )

    assert stored.stored == count >= 4  # two submitted, one started, one failed_scheduling
    assert again.stored == 0
    assert SchedulerEvent.objects.filter(cluster=cluster).count() == count
    assert (
        SchedulerEvent.objects.get(
            cluster=cluster, job_external_id=waiting, kind="failed_scheduling"
        ).reason
        == "Dependency"
    )
    assert Cluster.objects.get(pk=cluster.pk).event_cursor == again.cursor
