"""Issue #17: a cycle that follows many incidents decodes each stored snapshot of their hit
window once, not once per incident (at 16,384 GPUs the incidents step took 16-98 s while ~85 Xid
incidents each re-read their window's snapshots)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from diagnosis.actions.records.cycles import record_cycle
from diagnosis.models import Incident, Snapshot
from tests.support.builders import AS_OF, SnapshotBuilder
from tests.support.records import counting_decodes

pytestmark = pytest.mark.django_db

FAULTY_GPUS = (1, 3, 5, 7)


def at(minutes: int, *, xid: bool):
    builder = SnapshotBuilder(as_of=AS_OF + timedelta(minutes=minutes), cluster="hits")
    builder.node("n1", gpus=8).queue("hpo")
    for index in range(8):
        builder.gpu("n1", index, util=0.0)
    for index in FAULTY_GPUS:
        builder.gpu("n1", index, health="unhealthy", **({"xid": [(79, "1m")]} if xid else {}))
    return builder.build()


def test_each_window_snapshot_is_decoded_once_per_cycle(make_cluster, monkeypatch):
    cluster = make_cluster("hits", metrics_kind="none")
    record_cycle(cluster, at(0, xid=True))
    record_cycle(cluster, at(2, xid=False))
    assert Incident.objects.filter(cluster=cluster).count() == len(FAULTY_GPUS)

    decoded = counting_decodes(monkeypatch)
    record_cycle(cluster, at(4, xid=False))

    in_window = Snapshot.objects.filter(cluster=cluster).count()
    assert len(decoded) == len(set(decoded)) <= in_window
    hit_lists = [i.details.get("jobs") for i in Incident.objects.filter(cluster=cluster)]
    assert all(jobs is not None for jobs in hit_lists)
