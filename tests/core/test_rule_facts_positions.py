"""The facts' lookups by position give what the joins and maps they replace gave (issue #35)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest

from bench.rules import build_document
from diagnosis.core import snapshot as snapshot_format
from diagnosis.core.rules.facts import SnapshotFacts
from diagnosis.core.snapshot import GPU_KEY
from tests.support.builders import SnapshotBuilder


def shared_and_split() -> SnapshotBuilder:
    """A GPU split in MIG instances (one held), a time-sliced GPU held by two jobs, a whole
    GPU job, and a job bound to a GPU the snapshot does not list."""
    builder = SnapshotBuilder().node("h1", gpus=4, gpu_model="H100 80GB HBM3")
    for gi in range(3):
        builder.mig("h1", 0, gi, uuid=f"MIG-{gi}", util=0.5)
    builder.job("mig", gpus_per_pod=1, allocation=[("h1", [0])], uuids=[["MIG-1"]], pool=None)
    builder.job("slice-a", gpus_per_pod=1, allocation=[("h1", [1])], share=0.5, pool=None)
    builder.job("slice-b", gpus_per_pod=1, allocation=[("h1", [1])], share=0.5, pool=None)
    builder.job("whole", gpus_per_pod=2, allocation=[("h1", [2, 3])], pool=None)
    return builder


SNAPSHOTS = {
    "bench-256": lambda: snapshot_format.load(build_document(256)),
    "shared-and-split": lambda: shared_and_split().build(),
}


@pytest.mark.parametrize("name", list(SNAPSHOTS))
def test_allocations_with_gpu_columns_are_the_merge(name):
    snap = SNAPSHOTS[name]()
    facts = SnapshotFacts(snap)
    gpus = facts.gpu_state[[*GPU_KEY, "uuid", "util_mean", "pool", "health"]]
    rows = (np.arange(len(snap.allocations)) % 3 != 1) if len(snap.allocations) else None

    joined = facts.allocations_with(rows, gpus)

    expected = snap.allocations[rows].merge(gpus, on=GPU_KEY, how="left")
    pd.testing.assert_frame_equal(joined, expected)


def test_an_allocation_of_a_gpu_not_listed_is_joined_as_the_merge_joins_it():
    snap = shared_and_split().build()
    listed = snap.gpus[snap.gpus["index"] != 2].reset_index(drop=True)
    facts = SnapshotFacts(dataclasses.replace(snap, gpus=listed))
    gpus = listed[[*GPU_KEY, "uuid", "util_mean"]]

    joined = facts.allocations_with(None, gpus)

    assert (facts.allocation_gpu_position == -1).sum() == 1
    pd.testing.assert_frame_equal(joined, snap.allocations.merge(gpus, on=GPU_KEY, how="left"))


@pytest.mark.parametrize("name", list(SNAPSHOTS))
def test_each_gpu_is_held_by_its_first_allocation_row(name):
    snap = SNAPSHOTS[name]()
    alloc = snap.allocations
    first = alloc[~alloc[GPU_KEY].duplicated().to_numpy()].set_index(GPU_KEY)["job"]
    keys = pd.MultiIndex.from_arrays([snap.gpus[c] for c in GPU_KEY])

    state = SnapshotFacts(snap).gpu_state

    assert state["job"].tolist() == pd.Series(first.reindex(keys).to_numpy()).tolist()
    assert state["node_state"].tolist() == snap.gpus["node"].map(snap.nodes["state"]).tolist()


def test_the_holder_position_is_the_holders_row_in_the_jobs():
    snap = shared_and_split().build()
    facts = SnapshotFacts(snap)

    holders = [None if p < 0 else snap.jobs.index[p] for p in facts.holder_position]

    assert holders == [j if isinstance(j, str) else None for j in facts.gpu_state["job"]]
