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


def test_a_window_snapshot_not_read_yet_is_read_from_its_index_not_decoded(
    make_cluster, monkeypatch
):
    cluster = make_cluster("windows", metrics_kind="none")
    record_cycle(cluster, at(0, xid=True))
    record_cycle(cluster, at(2, xid=False))
    incident_windows._reads.clear()  # as on a worker that did not run those cycles (#35)
    decoded = counting_decodes(monkeypatch)
    record_cycle(cluster, at(4, xid=False))
    assert decoded == []
    incident = Incident.objects.get(cluster=cluster)
    assert [job["id"] for job in incident.details["jobs"]] == ["train"]


def test_a_window_snapshot_stored_without_an_index_is_decoded_once(make_cluster, monkeypatch):
    cluster = make_cluster("windows", metrics_kind="none")
    record_cycle(cluster, at(0, xid=True))
    record_cycle(cluster, at(2, xid=False))
    Snapshot.objects.filter(cluster=cluster).update(index_header=None, index_body=None)
    incident_windows._reads.clear()
    decoded = counting_decodes(monkeypatch)
    record_cycle(cluster, at(4, xid=False))
    older = Snapshot.objects.filter(cluster=cluster).order_by("as_of")
    assert sorted(decoded) == sorted(s.pk for s in older[:2])
    incident = Incident.objects.get(cluster=cluster)
    assert [job["id"] for job in incident.details["jobs"]] == ["train"]


def with_events(minutes: int, *, xid: bool):
    """The window world with a second job on the node and scheduler events in a window
    snapshot's document: one naming the node, one naming none, one naming another node."""
    builder = SnapshotBuilder(as_of=AS_OF + timedelta(minutes=minutes), cluster="windows")
    builder.node("n1", gpus=8).node("n2", gpus=8).queue("hpo")
    builder.job("train", node="n1", gpus_per_pod=4, tenant="hpo", ran="2h", util=0.9)
    builder.job("tune", node="n1", gpus_per_pod=4, tenant="hpo", ran="1h", util=0.8)
    builder.gpu("n1", 3, health="unhealthy", **({"xid": [(79, "1m")]} if xid else {}))
    if minutes == 2:
        builder.event("failed", ago="30s", job="train", node="n1")
        builder.event("evicted", ago="20s", job="train")
        builder.event("preempted", ago="10s", job="train", node="n2")
    return builder.build()


def incidents_read_fresh(make_cluster, name: str, *, indexed: bool) -> list[dict]:
    cluster = make_cluster(name, metrics_kind="none")
    record_cycle(cluster, with_events(0, xid=True))
    record_cycle(cluster, with_events(2, xid=False))
    if not indexed:
        Snapshot.objects.filter(cluster=cluster).update(index_header=None, index_body=None)
    incident_windows._reads.clear()
    record_cycle(cluster, with_events(4, xid=False))
    return [i.details for i in Incident.objects.filter(cluster=cluster).order_by("opened_at")]


def test_the_jobs_hit_read_from_the_indexes_are_those_the_documents_give(make_cluster):
    from_indexes = incidents_read_fresh(make_cluster, "from-indexes", indexed=True)
    from_documents = incidents_read_fresh(make_cluster, "from-documents", indexed=False)
    assert from_indexes == from_documents
    (train,) = from_indexes[0]["jobs"]
    assert train["id"] == "train"
    assert [event["kind"] for event in train["events"]] == ["failed", "evicted"]  # not n2's
    assert train["why"].startswith("evicted")  # the document's last event on the node or none
