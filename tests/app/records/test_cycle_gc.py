"""A cycle runs with one full garbage collection first and none inside it (issue #17)."""

from __future__ import annotations

import gc
import weakref

import pytest

from diagnosis.actions.records import cycles
from diagnosis.actions.records.cycles import full_collections_first, record_cycle
from tests.support.builders import AS_OF, SnapshotBuilder


class _Node:
    def __init__(self) -> None:
        self.partner: _Node | None = None


def _garbage_cycle() -> weakref.ref:
    first, second = _Node(), _Node()
    first.partner, second.partner = second, first
    return weakref.ref(first)


def test_garbage_left_before_the_cycle_is_collected_when_it_starts() -> None:
    gc.disable()  # only the context may collect here
    try:
        left_over = _garbage_cycle()
        with full_collections_first():
            assert left_over() is None
    finally:
        gc.enable()


def test_inside_the_cycle_no_full_collection_is_due_and_afterwards_the_old_thresholds_are_back():
    before = gc.get_threshold()

    with full_collections_first():
        inside = gc.get_threshold()

    assert inside[:2] == before[:2]
    assert inside[2] > 1000 * before[2]
    assert gc.get_threshold() == before


def test_the_thresholds_come_back_when_the_cycle_fails() -> None:
    before = gc.get_threshold()
    try:
        with full_collections_first():
            raise RuntimeError("a step failed")
    except RuntimeError:
        pass
    assert gc.get_threshold() == before


def _cycle_of(make_cluster) -> None:
    snap = SnapshotBuilder(as_of=AS_OF, cluster="gc").node("n1", gpus=8).build()
    record_cycle(make_cluster("gc", metrics_kind="none"), snap)


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("big_from_gpus", "collected"),
    [(8, True), (9, False)],
    ids=["a big cluster's cycle collects what was left", "a small one's leaves the collector"],
)
def test_only_a_big_clusters_cycle_starts_with_a_full_collection(
    make_cluster, monkeypatch, big_from_gpus, collected
):
    monkeypatch.setattr(cycles, "BIG_CYCLE_GPUS", big_from_gpus)  # the cycle has 8 GPUs
    gc.disable()
    try:
        left_over = _garbage_cycle()
        _cycle_of(make_cluster)
        assert (left_over() is None) is collected
    finally:
        gc.enable()
