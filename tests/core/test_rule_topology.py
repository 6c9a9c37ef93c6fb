"""``topology-misplacement``: TP groups, pods and jobs placed across NVLink / NUMA / nodes."""

from __future__ import annotations

from functools import partial

import numpy as np
import pytest

from diagnosis.core.recommend.builtin.advisory import JOB_ADVICE
from diagnosis.core.rules.builtin.topology_misplacement import (
    NUMA_UNKNOWN,
    NVLINK_UNKNOWN,
    RULE,
    _distinct_pairs,
)
from tests.support.builders import SnapshotBuilder
from tests.support.rules import judge_rule

TWO_DOMAINS = [[0, 1, 2, 3], [4, 5, 6, 7]]
ONE_DOMAIN = [list(range(8))]
SPLIT_NUMA = [0, 0, 0, 0, 1, 1, 1, 1]


judge = partial(judge_rule, RULE)


def one(snap):
    (finding,) = judge(snap).findings
    return finding


def node(builder, name, *, domains=ONE_DOMAIN, numa=None, gpus=8):
    return builder.node(name, gpus=gpus, nvlink_domains=domains, numa=numa)


# -- (a) TP groups ------------------------------------------------------------------------------


def test_tp_group_across_nodes():
    builder = SnapshotBuilder()
    node(builder, "n1")
    node(builder, "n2")
    snap = builder.job(
        "j1", pods=2, gpus_per_pod=4, tp=8, allocation=[("n1", [0, 1, 2, 3]), ("n2", [0, 1, 2, 3])]
    ).build()
    finding = one(snap)
    assert finding.subject == "job:j1"
    assert finding.severity == "warning"
    assert finding.evidence["kind"] == "tp-cross-node"
    assert finding.evidence["kinds"] == ["tp-cross-node", "spread-across-nodes"]
    assert finding.evidence["tp_groups_crossing"][0]["nodes"] == ["n1", "n2"]
    assert finding.evidence["allocation"] == {"n1": [0, 1, 2, 3], "n2": [0, 1, 2, 3]}


def test_tp_groups_follow_allocation_order_across_nvlink_domains():
    builder = SnapshotBuilder()
    node(builder, "n1", domains=TWO_DOMAINS)
    snap = builder.job("j1", gpus_per_pod=8, tp=4, allocation=[("n1", [0, 4, 1, 5, 2, 6, 3, 7])])
    finding = one(snap.build())
    assert finding.evidence["kinds"] == ["tp-cross-nvlink"]
    assert finding.evidence["tp_groups"] == 2
    assert finding.evidence["tp_groups_crossing_count"] == 2
    assert finding.evidence["tp_groups_crossing"][0]["gpus"] == [
        "n1/0",
        "n1/4",
        "n1/1",
        "n1/5",
    ]
    assert "TP groups of 4 within one NVLink domain" in finding.evidence["better_placement"]


def test_tp_groups_in_domain_order_are_fine():
    builder = SnapshotBuilder()
    node(builder, "n1", domains=TWO_DOMAINS)
    snap = builder.job("j1", gpus_per_pod=8, tp=4, allocation=[("n1", [0, 1, 2, 3, 4, 5, 6, 7])])
    assert not judge(snap.build()).findings


def test_tp_given_but_job_in_one_nvlink_domain_is_fine():
    builder = SnapshotBuilder()
    node(builder, "n1")
    assert not judge(builder.job("j1", gpus_per_pod=8, tp=8, node="n1").build()).findings


def test_tp_larger_than_any_domain_says_no_placement_keeps_it_inside():
    builder = SnapshotBuilder()
    node(builder, "n1", domains=TWO_DOMAINS)
    finding = one(builder.job("j1", gpus_per_pod=8, tp=8, node="n1").build())
    assert finding.evidence["kinds"] == ["tp-cross-nvlink"]
    assert "larger than the biggest NVLink domain" in finding.evidence["better_placement"]


PCIE_ONLY = [[g] for g in range(8)]  # said explicitly: every GPU is its own domain


def test_tp_on_pcie_only_gpus_spans_domains():
    builder = SnapshotBuilder()
    node(builder, "n1", domains=PCIE_ONLY)
    finding = one(builder.job("j1", gpus_per_pod=2, tp=2, node="n1").build())
    assert finding.evidence["kinds"] == ["tp-cross-nvlink"]


def test_tp_on_a_node_without_topology_is_not_judged():
    builder = SnapshotBuilder()
    node(builder, "n1", domains=None)  # no topology known: not "PCIe only"
    judgement = judge(builder.job("j1", gpus_per_pod=2, tp=2, node="n1").build())
    assert not judgement.findings
    assert judgement.not_judged[NVLINK_UNKNOWN] == 1
    assert judgement.not_judged[NUMA_UNKNOWN] == 1


# -- (b) pods across NVLink domains -------------------------------------------------------------


def test_pod_across_domains_when_one_domain_could_hold_it():
    builder = SnapshotBuilder()
    node(builder, "n1", domains=TWO_DOMAINS)
    finding = one(builder.job("j1", gpus_per_pod=2, allocation=[("n1", [3, 4])]).build())
    assert finding.severity == "warning"
    assert finding.evidence["kinds"] == ["pod-cross-nvlink"]
    assert finding.evidence["pods_crossing_nvlink"][0]["node"] == "n1"
    assert [g["nvlink_domain"] for g in finding.evidence["pods_crossing_nvlink"][0]["gpus"]] == [
        0,
        1,
    ]


def test_pod_inside_one_domain_is_fine():
    builder = SnapshotBuilder()
    node(builder, "n1", domains=TWO_DOMAINS)
    assert not judge(
        builder.job("j1", gpus_per_pod=2, allocation=[("n1", [2, 3])]).build()
    ).findings


def test_busy_gpus_of_the_domain_still_count():
    builder = SnapshotBuilder()
    node(builder, "n1", domains=TWO_DOMAINS)
    builder.job("other", gpus_per_pod=6, allocation=[("n1", [0, 1, 2, 5, 6, 7])])
    snap = builder.job("j1", gpus_per_pod=2, allocation=[("n1", [3, 4])]).build()
    (finding,) = [f for f in judge(snap).findings if f.subject == "job:j1"]
    assert finding.evidence["kinds"] == ["pod-cross-nvlink"]


def test_pod_larger_than_every_domain_is_not_blamed():
    builder = SnapshotBuilder()
    node(builder, "n1", domains=TWO_DOMAINS)
    assert not judge(builder.job("j1", gpus_per_pod=8, node="n1").build()).findings


def test_pcie_only_node_with_two_gpu_pod_is_fine():
    builder = SnapshotBuilder()
    node(builder, "n1", domains=PCIE_ONLY)
    assert not judge(builder.job("j1", gpus_per_pod=2, node="n1").build()).findings


# -- (c) spread across nodes --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pods", "nodes", "fires"),
    [
        (2, ["n1", "n2"], True),  # 2 pods of 4 fit one 8-GPU node
        (2, ["n1"], False),
        (3, ["n1", "n2"], False),  # ceil(3 / 2) = 2
        (3, ["n1", "n2", "n3"], True),
    ],
)
def test_spread_across_more_nodes_than_needed(pods, nodes, fires):
    builder = SnapshotBuilder()
    for name in ("n1", "n2", "n3"):
        node(builder, name)
    snap = builder.job("j1", pods=pods, gpus_per_pod=4, nodes=nodes).build()
    findings = judge(snap).findings
    assert bool(findings) is fires
    if fires:
        assert findings[0].severity == "info"
        assert findings[0].evidence["kinds"] == ["spread-across-nodes"]
        assert findings[0].evidence["min_nodes"] == -(-pods // 2)
        assert "Pack the" in findings[0].evidence["better_placement"]


def test_spread_of_mixed_node_sizes_uses_the_largest_node():
    builder = SnapshotBuilder()
    node(builder, "big", gpus=8)
    node(builder, "small", gpus=4, domains=[[0, 1, 2, 3]])
    finding = one(builder.job("j1", pods=2, gpus_per_pod=4, nodes=["big", "small"]).build())
    assert finding.evidence["gpus_per_node"] == 8
    assert finding.evidence["min_nodes"] == 1


def test_whole_node_pods_on_separate_nodes_are_fine():
    builder = SnapshotBuilder()
    node(builder, "n1")
    node(builder, "n2")
    snap = builder.job("j1", pods=2, gpus_per_pod=8, nodes=["n1", "n2"]).build()
    assert not judge(snap).findings


# -- (d) NUMA -----------------------------------------------------------------------------------


def test_pod_across_numa_nodes_when_one_could_hold_it():
    builder = SnapshotBuilder()
    node(builder, "n1", numa=SPLIT_NUMA)
    finding = one(builder.job("j1", gpus_per_pod=2, allocation=[("n1", [3, 4])]).build())
    assert finding.severity == "info"
    assert finding.evidence["kinds"] == ["cross-numa"]
    assert finding.evidence["pods_crossing_numa_count"] == 1


def test_pod_on_one_numa_node_is_fine():
    builder = SnapshotBuilder()
    node(builder, "n1", numa=SPLIT_NUMA)
    assert not judge(
        builder.job("j1", gpus_per_pod=2, allocation=[("n1", [4, 5])]).build()
    ).findings


def test_pod_larger_than_a_numa_node_is_not_blamed():
    builder = SnapshotBuilder()
    node(builder, "n1", numa=SPLIT_NUMA)
    assert not judge(builder.job("j1", gpus_per_pod=8, node="n1").build()).findings


def test_unknown_numa_is_not_judged_for_cross_numa():
    builder = SnapshotBuilder()
    node(builder, "n1")
    judgement = judge(builder.job("j1", gpus_per_pod=2, allocation=[("n1", [3, 4])]).build())
    assert not judgement.findings
    assert judgement.not_judged[NUMA_UNKNOWN] == 1


# -- one finding per job, at the highest severity ------------------------------------------------


def test_one_finding_lists_every_kind_at_the_highest_severity():
    builder = SnapshotBuilder()
    node(builder, "n1", domains=TWO_DOMAINS, numa=SPLIT_NUMA)
    node(builder, "n2", domains=TWO_DOMAINS, numa=SPLIT_NUMA)
    snap = builder.job(
        "j1", pods=2, gpus_per_pod=2, allocation=[("n1", [3, 4]), ("n2", [0, 1])]
    ).build()
    finding = one(snap)
    assert finding.severity == "warning"
    assert finding.evidence["kinds"] == ["pod-cross-nvlink", "spread-across-nodes", "cross-numa"]
    assert finding.evidence["kind"] == "pod-cross-nvlink"


@pytest.mark.parametrize(
    "job_fields",
    [
        {"state": "pending", "pods": 2, "gpus_per_pod": 4, "bound": 1, "node": "n1"},
        {"gpus_per_pod": 1, "node": "n1"},
    ],
    ids=["partial-gang", "single-gpu"],
)
def test_pending_and_single_gpu_jobs_are_not_judged(job_fields):
    builder = SnapshotBuilder()
    node(builder, "n1", domains=TWO_DOMAINS)
    node(builder, "n2", domains=TWO_DOMAINS)
    judgement = judge(builder.job("j1", tp=8, **job_fields).build())
    assert not judgement.findings


def test_pending_job_without_gpus_is_ignored():
    builder = SnapshotBuilder()
    node(builder, "n1")
    judgement = judge(builder.job("j1", state="pending", pods=4, gpus_per_pod=8).build())
    assert not judgement.findings
    assert not any(judgement.not_judged.values())


# -- unknown topology is not judged ---------------------------------------------------------------


def test_pod_on_a_node_without_topology_is_not_judged_for_nvlink_or_numa():
    builder = SnapshotBuilder()
    node(builder, "n1", domains=None)
    judgement = judge(builder.job("j1", gpus_per_pod=2, allocation=[("n1", [3, 4])]).build())
    assert not judgement.findings
    assert judgement.not_judged == {NVLINK_UNKNOWN: 1, NUMA_UNKNOWN: 1}


def test_gpu_no_domain_lists_makes_its_pod_not_judged():
    builder = SnapshotBuilder()
    node(builder, "n1", domains=[[0, 1, 2, 3], [4, 5, 6]], numa=SPLIT_NUMA)  # GPU 7 unknown
    judgement = judge(builder.job("j1", gpus_per_pod=2, allocation=[("n1", [6, 7])]).build())
    assert not judgement.findings
    assert judgement.not_judged[NVLINK_UNKNOWN] == 1


def test_tp_across_nodes_is_judged_without_topology():
    builder = SnapshotBuilder()
    node(builder, "n1", domains=None)
    node(builder, "n2", domains=None)
    snap = builder.job("j1", pods=2, gpus_per_pod=8, tp=16, nodes=["n1", "n2"]).build()
    assert one(snap).evidence["kinds"] == ["tp-cross-node"]


# -- multi-node NVLink (GB200/GB300 NVL72) -------------------------------------------------------

TRAY = [[0, 1, 2, 3]]


def nvl72(builder, rack: str, clique: str | None, trays: int = 18):
    """One NVL72 rack: ``trays`` compute trays of 4 GPUs, all in NVLink clique ``clique``."""
    for t in range(trays):
        builder.node(
            f"{rack}-{t:02d}", pool="gb200", gpus=4, gpu_model="GB200", nvlink_domains=TRAY,
            numa=[0, 0, 1, 1], clique=clique,
        )  # fmt: skip
    return builder


def tp8_over(builder, first: str, second: str):
    allocation = [(first, [0, 1, 2, 3]), (second, [0, 1, 2, 3])]
    return builder.job(
        "j1", pool="gb200", pods=2, gpus_per_pod=4, tp=8, allocation=allocation
    ).build()


def test_tp8_over_two_trays_of_one_clique_is_fine():
    builder = nvl72(SnapshotBuilder(), "rack-a", "fabric-1.0")
    judgement = judge(tp8_over(builder, "rack-a-00", "rack-a-07"))
    assert not judgement.findings
    assert not judgement.not_judged[NVLINK_UNKNOWN]


def test_tp8_over_two_cliques_crosses_nodes():
    builder = nvl72(SnapshotBuilder(), "rack-a", "fabric-1.0")
    builder = nvl72(builder, "rack-b", "fabric-1.1")
    finding = one(tp8_over(builder, "rack-a-00", "rack-b-00"))
    assert finding.evidence["kinds"] == ["tp-cross-node"]
    assert finding.evidence["tp_groups_crossing"][0]["nodes"] == ["rack-a-00", "rack-b-00"]
    better = finding.evidence["better_placement"]
    assert "inside one NVLink clique" in better
    assert "spans 18 nodes with 72 GPUs (9 group(s) of 8)" in better


def test_tp8_over_two_trays_without_clique_crosses_nodes():
    builder = nvl72(SnapshotBuilder(), "rack-a", None, trays=2)
    finding = one(tp8_over(builder, "rack-a-00", "rack-a-01"))
    assert finding.evidence["kinds"] == ["tp-cross-node"]
    assert (
        "larger than the biggest NVLink domain of these nodes (4 GPUs)"
        in (finding.evidence["better_placement"])
    )


def test_tp8_of_four_pods_in_a_two_tray_clique_is_fine():
    builder = nvl72(SnapshotBuilder(), "rack-a", "fabric-1.0", trays=2)
    pods = [
        ("rack-a-00", [0, 1]),
        ("rack-a-00", [2, 3]),
        ("rack-a-01", [0, 1]),
        ("rack-a-01", [2, 3]),
    ]
    snap = builder.job("j1", pool="gb200", pods=4, gpus_per_pod=2, tp=8, allocation=pods)
    assert not judge(snap.build()).findings  # 8 GPUs in one 8-GPU clique: fine


def test_pods_inside_a_clique_tray_are_judged_by_the_tray():
    builder = nvl72(SnapshotBuilder(), "rack-a", "fabric-1.0", trays=1)
    snap = builder.job("j1", pool="gb200", gpus_per_pod=2, allocation=[("rack-a-00", [1, 2])])
    finding = one(snap.build())
    assert finding.evidence["kinds"] == ["cross-numa"]  # NVLink fine, NUMA 0/1 crossed


# -- MIG instances -------------------------------------------------------------------------------


def test_mig_instances_of_one_gpu_do_not_cross_nvlink():
    builder = SnapshotBuilder()
    node(builder, "h1", domains=TWO_DOMAINS, numa=SPLIT_NUMA)
    builder.mig("h1", 0, 1, uuid="MIG-1").mig("h1", 0, 2, uuid="MIG-2")
    snap = builder.job(
        "j1", gpus_per_pod=2, allocation=[("h1", [0, 0])], uuids=[["MIG-1", "MIG-2"]]
    )
    assert not judge(snap.build()).findings


def test_pod_of_mig_instances_on_two_gpus_of_different_domains():
    builder = SnapshotBuilder()
    node(builder, "h1", domains=TWO_DOMAINS, numa=SPLIT_NUMA)
    builder.mig("h1", 0, 1, uuid="MIG-1").mig("h1", 4, 1, uuid="MIG-2")
    snap = builder.job(
        "j1", gpus_per_pod=2, allocation=[("h1", [0, 4])], uuids=[["MIG-1", "MIG-2"]]
    )
    assert one(snap.build()).evidence["kinds"] == ["pod-cross-nvlink", "cross-numa"]


# -- the advice ------------------------------------------------------------------------------------


def test_advice_for_a_job_across_two_cliques_names_the_clique_not_the_node():
    builder = nvl72(SnapshotBuilder(), "rack-a", "fabric-1.0", trays=2)
    builder = nvl72(builder, "rack-b", "fabric-1.1", trays=2)
    finding = one(tp8_over(builder, "rack-a-00", "rack-b-00"))
    assert finding.evidence["nvlink_cliques"] == ["fabric-1.0", "fabric-1.1"]
    advice = JOB_ADVICE["topology-misplacement"](finding.evidence)
    assert "inside one NVLink clique" in advice
    assert "inside one node" not in advice


def test_advice_without_cliques_keeps_tp_inside_one_node():
    builder = SnapshotBuilder()
    node(builder, "n1")
    node(builder, "n2")
    snap = builder.job(
        "j1", pods=2, gpus_per_pod=4, tp=8, allocation=[("n1", [0, 1, 2, 3]), ("n2", [0, 1, 2, 3])]
    )
    finding = one(snap.build())
    assert finding.evidence["nvlink_cliques"] == []
    assert "inside one node" in JOB_ADVICE["topology-misplacement"](finding.evidence)


# -- guessed indexes -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("domains", "guessed", "kinds", "nvlink_unknown"),
    [
        (TWO_DOMAINS, False, ["pod-cross-nvlink"], 0),
        (TWO_DOMAINS, True, [], 1),  # which island a guessed GPU is on is unknown
        (ONE_DOMAIN, True, [], 0),  # one domain: any guess is inside it
    ],
)
def test_guessed_indexes_are_judged_only_where_the_guess_cannot_matter(
    domains, guessed, kinds, nvlink_unknown
):
    builder = SnapshotBuilder()
    node(builder, "n1", domains=domains)
    for index in (3, 4):
        builder.gpu("n1", index, index_guessed=guessed)
    judgement = judge(builder.job("j1", gpus_per_pod=2, allocation=[("n1", [3, 4])]).build())
    assert [f.evidence["kinds"] for f in judgement.findings] == ([kinds] if kinds else [])
    assert judgement.not_judged[NVLINK_UNKNOWN] == nvlink_unknown


def test_distinct_pairs_count_what_a_unique_of_the_pairs_counts():
    rng = np.random.default_rng(5)
    first = rng.integers(0, 40, size=500)
    second = rng.choice([3, 1 << 60, (1 << 60) + 2, 7 << 21], size=500)

    got_first, got_sizes = _distinct_pairs(first, second)

    pairs, sizes = np.unique(np.stack([first, second]), axis=1, return_counts=True)
    assert sorted(zip(got_first.tolist(), got_sizes.tolist(), strict=True)) == sorted(
        zip(pairs[0].tolist(), sizes.tolist(), strict=True)
    )
