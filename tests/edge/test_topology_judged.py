"""Parsed ``nvidia-smi topo -m`` output through the snapshot into ``topology-misplacement``: a
whole DGX A100 (the real matrix, all NV12) holds a tp=8 job without a finding; a node of two
NVLink islands splits a TP group; a node with no topology data is not judged."""

from __future__ import annotations

from diagnosis.core.rules.builtin.topology_misplacement import NUMA_UNKNOWN, NVLINK_UNKNOWN, RULE
from diagnosis.core.rules.facts import SnapshotFacts
from diagnosis.edge.topology import parse_topo_matrix
from tests.edge.test_topology_nvidia_smi import matrix, real_file
from tests.support.builders import SnapshotBuilder


def judge(snap):
    return RULE.evaluate(snap, RULE.resolve(), SnapshotFacts(snap))


def node_with(builder, name, text):
    topology = parse_topo_matrix(text).snapshot_topology()
    return builder.node(
        name, gpus=8, nvlink_domains=topology["nvlink_domains"], numa=topology.get("numa")
    )


def two_islands_of_four() -> str:
    island = [0, 0, 0, 0, 1, 1, 1, 1]
    cells = [
        ["X" if a == b else ("NV4" if island[a] == island[b] else "SYS") for b in range(8)]
        for a in range(8)
    ]
    return matrix(cells, numa=[str(i) for i in island])


def test_tp8_on_a_whole_dgx_a100_has_no_finding():
    text = real_file("dgx_a100_sxm4_80gb_topo_m__DeepEP_issue13.txt").read_text()
    builder = node_with(SnapshotBuilder(), "dgx-01", text)
    judgement = judge(builder.job("j1", gpus_per_pod=8, tp=8, node="dgx-01").build())
    assert not judgement.findings
    assert judgement.not_judged == {NUMA_UNKNOWN: 0, NVLINK_UNKNOWN: 0}


def test_tp_group_split_across_two_islands_has_one_finding():
    builder = node_with(SnapshotBuilder(), "n1", two_islands_of_four())
    snap = builder.job("j1", gpus_per_pod=8, tp=4, allocation=[("n1", [0, 1, 2, 4, 3, 5, 6, 7])])
    (finding,) = judge(snap.build()).findings
    assert finding.evidence["kinds"] == ["tp-cross-nvlink"]
    assert finding.evidence["tp_groups_crossing_count"] == 2


def test_tp_groups_inside_the_islands_are_fine():
    builder = node_with(SnapshotBuilder(), "n1", two_islands_of_four())
    snap = builder.job("j1", gpus_per_pod=8, tp=4, node="n1")
    assert not judge(snap.build()).findings


def test_node_without_topology_data_is_not_judged():
    snap = SnapshotBuilder().node("n1", gpus=8).job("j1", gpus_per_pod=8, tp=8, node="n1")
    judgement = judge(snap.build())
    assert not judgement.findings
    assert judgement.not_judged == {NUMA_UNKNOWN: 1, NVLINK_UNKNOWN: 1}
