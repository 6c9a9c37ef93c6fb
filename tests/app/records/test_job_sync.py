"""``sync_jobs`` writes only the jobs that changed (issue #35: compared column by column with the
stored unfinished ones): a steady snapshot writes none, a job that started or was preempted is
written (its preemptions since the last cycle reported), one the scheduler stopped listing is
marked ``unlisted_since``, and one that ended before the previous cycle is not written again."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

import pandas as pd
import pytest

from diagnosis.actions.records.tenancy import sync_jobs, sync_tenants_and_queues
from diagnosis.core import fairness
from diagnosis.models import Cluster, Job, Queue
from tests.support.builders import AS_OF, SnapshotBuilder

pytestmark = pytest.mark.django_db


def snapshot():
    builder = SnapshotBuilder(as_of=AS_OF, cluster="sync")
    builder.node("gpu-001").queue("deep", tenant="team-a")
    builder.job("run-1", queue="deep", node="gpu-001")
    builder.job("wait-1", state="pending", queue="deep")
    builder.job("wait-2", state="pending", tenant="team-b")
    return builder.build()


def sync(cluster, snap, previous=None):
    tenant_ids, _ = sync_tenants_and_queues(cluster, snap)
    queue_ids = dict(Queue.objects.filter(cluster=cluster).values_list("name", "pk"))
    return sync_jobs(cluster, snap, fairness.job_tenants(snap), tenant_ids, queue_ids, previous)


def later(snap, minutes, jobs=None):
    moved = snap.as_of + timedelta(minutes=minutes)
    return dataclasses.replace(snap, as_of=moved, jobs=snap.jobs if jobs is None else jobs)


def stored(cluster):
    return {
        job_id: (state, preemptions, unlisted is not None)
        for job_id, state, preemptions, unlisted in Job.objects.filter(cluster=cluster).values_list(
            "external_id", "state", "preemptions", "unlisted_since"
        )
    }


def test_a_steady_snapshot_writes_no_job_and_a_changed_one_writes_only_the_changes():
    cluster = Cluster.objects.create(name="sync")
    first = snapshot()
    assert sync(cluster, first).written == 3
    steady = later(first, 1)
    again = sync(cluster, steady, first.as_of.to_pydatetime())
    assert (again.written, again.unlisted, again.preemptions) == (0, 0, {})

    jobs = steady.jobs.copy()
    jobs.loc["wait-1", ["state", "started"]] = ["running", steady.as_of]
    jobs.loc["run-1", "preemptions"] = 2
    ended = jobs.loc[["wait-2"]].rename(index={"wait-2": "done-1"})
    ended[["state", "ended"]] = ["succeeded", first.as_of - timedelta(hours=1)]
    jobs = pd.concat([jobs.drop(index="wait-2"), ended])  # wait-2 unlisted; done-1 old news
    synced = sync(cluster, later(first, 2, jobs), steady.as_of.to_pydatetime())

    assert (synced.written, synced.unlisted, synced.preemptions) == (2, 1, {"run-1": 2})
    assert stored(cluster) == {
        "run-1": ("running", 2, False),
        "wait-1": ("running", 0, False),
        "wait-2": ("pending", 0, True),
    }
