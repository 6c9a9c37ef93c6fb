"""Issue #28, item 1: whatever the input, a cycle ends in a row. A stored topology the loader
would refuse is named and skipped (the cluster's cycle goes on); any other exception while
loading is a failed cycle with its reason, and the cluster's status says so."""

from __future__ import annotations

import pytest
from django.utils import timezone

from diagnosis.actions.records import cycles
from diagnosis.actions.records.cycles import run_cluster_cycle
from diagnosis.choices import DataSourceStatus
from diagnosis.models import ClusterCycle, NodeTopology, Snapshot

pytestmark = pytest.mark.django_db


def first_node(lab) -> str:
    run_cluster_cycle(lab)
    return Snapshot.objects.filter(cluster=lab).latest().load_document()["nodes"][0]["name"]


def store(lab, node: str, **fields) -> None:
    NodeTopology.objects.create(
        cluster=lab, node=node, gpus=8, raw_text="", uploaded_at=timezone.now(), **fields
    )


def test_a_stored_numa_of_4000_nines_is_named_and_skipped(lab):
    node = first_node(lab)
    store(lab, node, nvlink_domains=[list(range(8))], numa=[0] * 7 + [int("9" * 4000)])

    cycle = run_cluster_cycle(lab)

    assert cycle.ok, cycle.error
    notes = cycle.source["notes"]
    assert any(f"uploaded topology of {node} is invalid" in n and "numa[7]" in n for n in notes)


def test_a_stored_topology_of_the_wrong_shape_is_named_and_skipped(lab):
    node = first_node(lab)
    store(lab, node, nvlink_domains=[5], numa=None)

    cycle = run_cluster_cycle(lab)

    assert cycle.ok, cycle.error
    assert any(f"uploaded topology of {node} is invalid" in n for n in cycle.source["notes"])


def test_any_exception_while_loading_is_a_failed_cycle_with_its_reason(lab, monkeypatch):
    def broken(document):
        raise OverflowError("Python int too large to convert to C long")

    monkeypatch.setattr(cycles, "clean_document", broken)

    cycle = run_cluster_cycle(lab)

    assert ClusterCycle.objects.filter(cluster=lab).count() == 1
    assert not cycle.ok
    assert "OverflowError" in cycle.error
    lab.refresh_from_db()
    assert lab.status == DataSourceStatus.ERROR
    assert lab.status_message == "loading the snapshot failed: OverflowError"
