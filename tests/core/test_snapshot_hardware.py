"""The snapshot's hardware fields (issue 14): unknown topology, NVLink cliques, MIG instances,
guessed indexes, exact devices and shares in allocations."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from diagnosis.core import snapshot as fmt
from diagnosis.core.rules.builtin.idle_allocation import RULE as IDLE
from diagnosis.core.rules.facts import SnapshotFacts
from tests.support.builders import SnapshotBuilder


def round_trip(snap: fmt.ClusterSnapshot) -> fmt.ClusterSnapshot:
    document = fmt.dump(snap)
    again = fmt.load(json.loads(json.dumps(document)))
    assert fmt.dump(again) == document
    pd.testing.assert_frame_equal(snap.gpus, again.gpus)
    pd.testing.assert_frame_equal(snap.allocations, again.allocations)
    return again


def errors_of(document) -> list[str]:
    with pytest.raises(fmt.SnapshotError) as caught:
        fmt.load(document)
    return caught.value.errors


# -- topology ------------------------------------------------------------------------------------


def test_absent_topology_is_unknown_and_dumped_as_absent():
    snap = SnapshotBuilder().node("n1", gpus=2).build()
    assert snap.gpus["nvlink_domain"].tolist() == [-1, -1]
    assert snap.gpus["numa"].tolist() == [-1, -1]
    assert "topology" not in fmt.dump(snap)["nodes"][0]


def test_pcie_only_is_said_with_one_domain_per_gpu():
    snap = SnapshotBuilder().node("n1", gpus=3, nvlink_domains=[[0], [1], [2]]).build()
    assert snap.gpus["nvlink_domain"].tolist() == [0, 1, 2]
    assert round_trip(snap).gpus["nvlink_domain"].tolist() == [0, 1, 2]


def test_gpu_no_domain_lists_stays_unknown():
    snap = SnapshotBuilder().node("n1", gpus=3, nvlink_domains=[[0, 1]]).build()
    assert snap.gpus["nvlink_domain"].tolist() == [0, 0, -1]


def test_numa_may_be_unknown_for_some_gpus():
    snap = SnapshotBuilder().node("n1", gpus=3, numa=[0, None, 1]).build()
    assert snap.gpus["numa"].tolist() == [0, -1, 1]
    assert fmt.dump(snap)["nodes"][0]["topology"]["numa"] == [0, None, 1]
    round_trip(snap)


def test_nvlink_clique_per_gpu():
    builder = SnapshotBuilder().node("t1", gpus=4, clique="cluster-a.7")
    snap = builder.node("t2", gpus=4).build()
    assert snap.gpus["nvlink_clique"].tolist() == ["cluster-a.7"] * 4 + [None] * 4
    assert round_trip(snap).gpus["nvlink_clique"].tolist()[:4] == ["cluster-a.7"] * 4


def test_guessed_index_is_kept():
    snap = SnapshotBuilder().node("n1", gpus=2).gpu("n1", 1, index_guessed=True).build()
    assert snap.gpus["index_guessed"].tolist() == [False, True]
    assert fmt.dump(snap)["gpus"][0]["index_guessed"] is True
    round_trip(snap)


# -- MIG instances ---------------------------------------------------------------------------------


def mig_cluster() -> SnapshotBuilder:
    builder = SnapshotBuilder().node("h1", gpus=2, gpu_model="H100 80GB HBM3")
    builder.mig("h1", 0, 9, profile="1g.10gb", uuid="MIG-a", parent_uuid="GPU-p", util=0.3)
    builder.mig("h1", 0, 1, profile="3g.40gb", uuid="MIG-b", parent_uuid="GPU-p", util=0.9)
    return builder


def test_each_mig_instance_is_its_own_row():
    snap = mig_cluster().build()
    gpus = snap.gpus
    assert gpus[fmt.GPU_KEY].to_numpy().tolist() == [["h1", 0, 1], ["h1", 0, 9], ["h1", 1, -1]]
    assert gpus["uuid"].tolist() == ["MIG-b", "MIG-a", None]
    assert gpus["mig_profile"].tolist() == ["3g.40gb", "1g.10gb", None]
    assert gpus["capacity"].tolist() == pytest.approx([3 / 7, 1 / 7, 1.0])
    assert gpus["util_mean"].tolist()[:2] == [0.9, 0.3]
    round_trip(snap)


def test_compute_fraction_given_wins_over_the_profile():
    builder = SnapshotBuilder().node("a30", gpus=1)
    snap = builder.mig("a30", 0, 1, profile="1g.6gb", compute_fraction=0.25).build()
    assert snap.gpus["capacity"].tolist() == [0.25]


def test_allocation_by_uuid_names_the_instance():
    snap = (
        mig_cluster()
        .job("small", gpus_per_pod=1, allocation=[("h1", [0])], uuids=[["MIG-a"]])
        .job("big", gpus_per_pod=1, allocation=[("h1", [0])], uuids=[["MIG-b"]])
        .build()
    )
    alloc = snap.allocations.set_index("job")
    assert alloc.loc["small", "mig_instance"] == 9
    assert alloc.loc["big", "mig_instance"] == 1
    again = round_trip(snap)
    assert fmt.dump(again)["jobs"][0]["allocation"] == [
        {"node": "h1", "gpus": [0], "uuids": ["MIG-a"]}
    ]


@pytest.mark.parametrize(
    ("uuids", "message"),
    [
        (None, "GPU h1/0 is split into MIG instances: name the instance's UUID"),
        (["MIG-zz"], "'MIG-zz' names no reported MIG instance of GPU h1/0"),
        (["MIG-a", "MIG-b"], "lists 2 devices for 1 GPUs"),
    ],
)
def test_allocation_of_a_split_gpu_must_name_a_reported_instance(uuids, message):
    builder = mig_cluster()
    builder.job("j", gpus_per_pod=1, allocation=[("h1", [0])])
    if uuids is not None:
        builder.doc["jobs"][0]["allocation"][0]["uuids"] = uuids
    assert any(message in error for error in errors_of(builder.document()))


def test_uuid_of_another_gpu_is_refused():
    builder = mig_cluster().job("j", gpus_per_pod=1, allocation=[("h1", [1])], uuids=[["MIG-a"]])
    assert any("'MIG-a' is GPU h1/0, not h1/1" in e for e in errors_of(builder.document()))


def test_gpu_reported_both_whole_and_split_is_refused():
    builder = mig_cluster().gpu("h1", 0, util=0.5)
    assert any(
        "GPU h1/0 is reported both whole and as MIG instances" in e
        for e in errors_of(builder.document())
    )


def test_duplicate_mig_instance_is_refused():
    builder = mig_cluster().mig("h1", 0, 9, uuid="MIG-c")
    assert any(
        "duplicate entry for MIG instance 9 of GPU h1/0" in e for e in errors_of(builder.document())
    )


# -- shares -------------------------------------------------------------------------------------


def test_shares_of_one_gpu_may_add_up_to_one():
    builder = SnapshotBuilder().node("n1", gpus=1)
    builder.job("a", gpus_per_pod=1, allocation=[("n1", [0])], share=0.5)
    snap = builder.job("b", gpus_per_pod=1, allocation=[("n1", [0])], share=0.5).build()
    assert snap.allocations["share"].tolist() == [0.5, 0.5]
    round_trip(snap)


@pytest.mark.parametrize(("second", "refused"), [(0.5, False), (0.51, True), (None, True)])
def test_shares_beyond_one_gpu_are_refused(second, refused):
    builder = SnapshotBuilder().node("n1", gpus=1)
    builder.job("a", gpus_per_pod=1, allocation=[("n1", [0])], share=0.5)
    builder.job("b", gpus_per_pod=1, allocation=[("n1", [0])], share=second)
    document = builder.document()
    if refused:
        assert any("GPU n1/0 is already allocated to job a" in e for e in errors_of(document))
    else:
        fmt.load(document)


@pytest.mark.parametrize("share", [0, 1.5, "half"])
def test_bad_share_is_refused(share):
    builder = SnapshotBuilder().node("n1", gpus=1)
    builder.job("a", gpus_per_pod=1, allocation=[("n1", [0])], share=share)
    assert any("allocation[0].share" in e for e in errors_of(builder.document()))


def test_idle_evidence_says_which_gpu_indexes_were_guessed():
    builder = SnapshotBuilder().node("n1", gpus=2)
    builder.job("j", gpus_per_pod=2, node="n1", ran="2h", util=0.0)
    snap = builder.gpu("n1", 1, index_guessed=True).build()
    (finding,) = IDLE.evaluate(snap, IDLE.resolve(), SnapshotFacts(snap)).findings
    assert [g.get("index_guessed", False) for g in finding.evidence["per_gpu"]] == [False, True]
