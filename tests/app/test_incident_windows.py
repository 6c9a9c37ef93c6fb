"""Issue #17: a stored snapshot an incident's hit window has read for its node is not decoded
again by the next cycles (each cycle decodes only the snapshots new to the window), and the
jobs hit stay what the whole window gives."""

from __future__ import annotations

from datetime import timedelta

import pytest

from diagnosis.actions.cycles import record_cycle
from diagnosis.models import Incident, Snapshot
from tests.support.builders import AS_OF, SnapshotBuilder

pytestmark = pytest.mark.django_db


def at(minutes: int, *, xid: bool):
    builder = SnapshotBuilder(as_of=AS_OF + timedelta(minutes=minutes), cluster="windows")
    builder.node("n1", gpus=8).queue("hpo")
    builder.job("train", node="n1", gpus_per_pod=8, tenant="hpo", ran="2h", util=0.9)
    builder.gpu("n1", 3, health="unhealthy", **({"xid": [(79, "1m")]} if xid else {}))
    return builder.build()


def counting_decodes(monkeypatch) -> list[int]:
    decoded: list[int] = []
    original = Snapshot.load_document

    def counting(snapshot: Snapshot):
        decoded.append(snapshot.pk)
        return original(snapshot)

    monkeypatch.setattr(Snapshot, "load_document", counting)
    return decoded


def test_a_cycle_decodes_only_the_window_snapshots_new_to_it(make_cluster, monkeypatch):
    cluster = make_cluster("windows", metrics_kind="none")
    record_cycle(cluster, at(0, xid=True))
    record_cycle(cluster, at(2, xid=False))
    decoded = counting_decodes(monkeypatch)
    record_cycle(cluster, at(4, xid=False))
    newest = Snapshot.objects.filter(cluster=cluster).latest("as_of")
    assert decoded == [newest.pk]
    incident = Incident.objects.get(cluster=cluster)
    assert [job["id"] for job in incident.details["jobs"]] == ["train"]
