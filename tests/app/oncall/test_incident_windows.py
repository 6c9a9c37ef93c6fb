"""Issue #17: a stored snapshot an incident's hit window has read for its node is not decoded
again by the next cycles, the cycle's own snapshot is read from memory (so a cycle decodes no
stored snapshot at all), and the jobs hit stay what the whole window gives."""

from __future__ import annotations

from datetime import timedelta

import pytest

from diagnosis.actions.oncall import windows as incident_windows
from diagnosis.actions.records.cycles import record_cycle
from diagnosis.models import Incident, Snapshot
from tests.support.builders import AS_OF, SnapshotBuilder
from tests.support.records import counting_decodes

pytestmark = pytest.mark.django_db


def at(minutes: int, *, xid: bool):
    builder = SnapshotBuilder(as_of=AS_OF + timedelta(minutes=minutes), cluster="windows")
    builder.node("n1", gpus=8).queue("hpo")
    builder.job("train", node="n1", gpus_per_pod=8, tenant="hpo", ran="2h", util=0.9)
    builder.gpu("n1", 3, health="unhealthy", **({"xid": [(79, "1m")]} if xid else {}))
    return builder.build()


def test_a_cycle_decodes_no_stored_window_snapshot(make_cluster, monkeypatch):
    cluster = make_cluster("windows", metrics_kind="none")
    record_cycle(cluster, at(0, xid=True))
    record_cycle(cluster, at(2, xid=False))
    decoded = counting_decodes(monkeypatch)
    record_cycle(cluster, at(4, xid=False))
    assert decoded == []
    incident = Incident.objects.get(cluster=cluster)
    assert [job["id"] for job in incident.details["jobs"]] == ["train"]


def test_a_window_snapshot_stored_before_and_not_read_yet_is_decoded_once(
    make_cluster, monkeypatch
):
    cluster = make_cluster("windows", metrics_kind="none")
    record_cycle(cluster, at(0, xid=True))
    record_cycle(cluster, at(2, xid=False))
    incident_windows._reads.clear()  # as on a worker that did not run those cycles
    decoded = counting_decodes(monkeypatch)
    record_cycle(cluster, at(4, xid=False))
    older = Snapshot.objects.filter(cluster=cluster).order_by("as_of")
    assert sorted(decoded) == sorted(s.pk for s in older[:2])
    incident = Incident.objects.get(cluster=cluster)
    assert [job["id"] for job in incident.details["jobs"]] == ["train"]
