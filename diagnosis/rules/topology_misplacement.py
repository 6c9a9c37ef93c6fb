"""``topology-misplacement``: a running job placed across NVLink, NUMA or node boundaries it did
not need to cross (DESIGN.md section 5)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from diagnosis.rules.base import Judgement, Rule, RuleDoc, Severity
from diagnosis.rules.facts import SnapshotFacts
from diagnosis.snapshot import ClusterSnapshot

TP_CROSS_NODE = "tp-cross-node"
TP_CROSS_NVLINK = "tp-cross-nvlink"
POD_CROSS_NVLINK = "pod-cross-nvlink"
SPREAD = "spread-across-nodes"
CROSS_NUMA = "cross-numa"
KINDS: tuple[str, ...] = (TP_CROSS_NODE, TP_CROSS_NVLINK, POD_CROSS_NVLINK, SPREAD, CROSS_NUMA)
KIND_SEVERITY: dict[str, Severity] = {
    TP_CROSS_NODE: "warning",
    TP_CROSS_NVLINK: "warning",
    POD_CROSS_NVLINK: "warning",
    SPREAD: "info",
    CROSS_NUMA: "info",
}
NUMA_UNKNOWN = "cross-numa not checked: NUMA node of its GPUs unknown"
EXAMPLES = 20  # crossing TP groups / pods listed in the evidence (all are counted)

# A GPU's NVLink domain as one integer, unique across the cluster: node code * _NODE_STRIDE +
# the domain number, or, for a GPU alone on PCIe (domain -1), _PCIE_BASE + its index.
_NODE_STRIDE = 1 << 21
_PCIE_BASE = 1 << 20


def evaluate(
    snapshot: ClusterSnapshot, thresholds: Mapping[str, Any], facts: SnapshotFacts
) -> Judgement:
    rows = _running_allocations(snapshot)
    if rows.empty:
        return Judgement()
    layout = _node_layout(snapshot)
    jobs = snapshot.jobs

    flags = pd.DataFrame(False, index=pd.Index(rows["job"].unique()), columns=list(KINDS))

    # (a) TP groups: consecutive `tp` GPUs of the allocation, in allocation order.
    groups = _tp_groups(rows, jobs)
    if not groups.empty:
        cross_node = groups["node_min"] != groups["node_max"]
        cross_dom = ~cross_node & (groups["dom_min"] != groups["dom_max"])
        groups["crossing"] = np.where(
            cross_node, TP_CROSS_NODE, np.where(cross_dom, TP_CROSS_NVLINK, "")
        )
        flags.loc[groups.loc[cross_node, "job"].unique(), TP_CROSS_NODE] = True
        flags.loc[groups.loc[cross_dom, "job"].unique(), TP_CROSS_NVLINK] = True

    # (b), (d) pods: each pod is on one node.
    pods = _pods(rows, layout)
    pod_nvlink = (pods["dom_min"] != pods["dom_max"]) & (pods["node_max_domain"] >= pods["size"])
    numa_unknown = (pods["size"] >= 2) & (pods["numa_min"] < 0)
    pod_numa = (
        ~numa_unknown
        & (pods["numa_min"] != pods["numa_max"])
        & (pods["node_max_numa"] >= pods["size"])
    )
    pods["cross_nvlink"] = pod_nvlink
    pods["cross_numa"] = pod_numa
    flags.loc[pods.loc[pod_nvlink, "job"].unique(), POD_CROSS_NVLINK] = True
    flags.loc[pods.loc[pod_numa, "job"].unique(), CROSS_NUMA] = True

    # (c) more nodes than ceil(pods / floor(G / gpus_per_pod)).
    spread = _spread(rows, jobs, layout)
    flags.loc[spread.index[spread["spread"]], SPREAD] = True

    not_judged = {NUMA_UNKNOWN: int(pods.loc[numa_unknown, "job"].nunique())}
    hit = flags[flags.any(axis=1)]
    if hit.empty:
        return Judgement((), not_judged)

    return Judgement(_findings(snapshot, hit, rows, groups, pods, spread, layout), not_judged)


# -- vectorised facts ----------------------------------------------------------------------------


def _running_allocations(snapshot: ClusterSnapshot) -> pd.DataFrame:
    """Allocation rows of running jobs holding ≥ 2 GPUs, with each GPU's topology: node_code,
    nvlink_domain, dom_id (cluster-unique NVLink domain), numa."""
    jobs = snapshot.jobs
    alloc = snapshot.allocations
    running = jobs.index[jobs["state"] == "running"]
    alloc = alloc[alloc["job"].isin(running)]
    counts = alloc["job"].value_counts()
    alloc = alloc[alloc["job"].isin(counts.index[counts >= 2])]
    topo = snapshot.gpus[["node", "index", "nvlink_domain", "numa"]]
    rows = alloc.merge(topo, on=["node", "index"], how="left")
    node_code = pd.factorize(rows["node"])[0].astype(np.int64)
    domain = rows["nvlink_domain"].to_numpy(dtype=np.int64)
    index = rows["index"].to_numpy(dtype=np.int64)
    rows["node_code"] = node_code
    rows["dom_id"] = node_code * _NODE_STRIDE + np.where(domain >= 0, domain, _PCIE_BASE + index)
    return rows


def _node_layout(snapshot: ClusterSnapshot) -> pd.DataFrame:
    """Per node: ``gpus``, ``max_domain`` (GPUs in its largest NVLink domain, 1 when PCIe
    only) and ``max_numa`` (GPUs on its fullest NUMA node; NaN when NUMA is unknown)."""
    nodes = snapshot.nodes
    gpus = snapshot.gpus
    in_domain = gpus[gpus["nvlink_domain"] >= 0]
    sizes = in_domain.groupby(["node", "nvlink_domain"], sort=False).size()
    max_domain = sizes.groupby(level=0).max().reindex(nodes.index)
    has_gpus = nodes["gpus"] > 0
    max_domain = max_domain.fillna(has_gpus.astype("float64"))
    numa_known = (gpus["numa"] >= 0).groupby(gpus["node"]).all().reindex(nodes.index)
    per_numa = gpus[gpus["numa"] >= 0].groupby(["node", "numa"], sort=False).size()
    max_numa = per_numa.groupby(level=0).max().reindex(nodes.index).astype("float64")
    max_numa[~numa_known.fillna(False).astype(bool)] = np.nan
    return pd.DataFrame(
        {"gpus": nodes["gpus"], "max_domain": max_domain, "max_numa": max_numa},
        index=nodes.index,
    )


def _tp_groups(rows: pd.DataFrame, jobs: pd.DataFrame) -> pd.DataFrame:
    tp = rows["job"].map(jobs["tp"]).to_numpy(dtype="float64")
    has_tp = ~np.isnan(tp)
    if not has_tp.any():
        return pd.DataFrame(columns=["job", "group", "node_min", "node_max", "dom_min", "dom_max"])
    sub = rows.loc[has_tp, ["job", "order", "node_code", "dom_id"]].copy()
    sub["group"] = sub["order"].to_numpy() // tp[has_tp].astype(np.int64)
    grouped = sub.groupby(["job", "group"], sort=False)
    out = grouped.agg(
        node_min=("node_code", "min"),
        node_max=("node_code", "max"),
        dom_min=("dom_id", "min"),
        dom_max=("dom_id", "max"),
    )
    return out.reset_index()


def _pods(rows: pd.DataFrame, layout: pd.DataFrame) -> pd.DataFrame:
    grouped = rows.groupby(["job", "pod"], sort=False)
    pods = grouped.agg(
        size=("index", "size"),
        node=("node", "first"),
        dom_min=("dom_id", "min"),
        dom_max=("dom_id", "max"),
        numa_min=("numa", "min"),
        numa_max=("numa", "max"),
    ).reset_index()
    pods["node_max_domain"] = pods["node"].map(layout["max_domain"]).to_numpy()
    pods["node_max_numa"] = pods["node"].map(layout["max_numa"]).to_numpy()
    return pods


def _spread(rows: pd.DataFrame, jobs: pd.DataFrame, layout: pd.DataFrame) -> pd.DataFrame:
    """Per job: nodes used, pods, G (the largest GPU count of its nodes), pods per node and
    the minimal node count ``ceil(pods / floor(G / gpus_per_pod))``; ``spread`` when it uses
    more nodes than that."""
    node_pods = rows[["job", "node_code", "pod"]].drop_duplicates(["job", "pod"])
    nodes_used = rows[["job", "node_code"]].drop_duplicates().groupby("job").size()
    pod_count = node_pods.groupby("job").size()
    node_gpus = rows["node"].map(layout["gpus"]).groupby(rows["job"].to_numpy()).max()
    frame = pd.DataFrame({"nodes": nodes_used, "pods": pod_count, "node_gpus": node_gpus})
    per_pod = jobs["gpus_per_pod"].reindex(frame.index).to_numpy()
    per_node = np.floor_divide(frame["node_gpus"].to_numpy(), np.maximum(per_pod, 1))
    per_node = np.maximum(per_node, 1)
    frame["gpus_per_pod"] = per_pod
    frame["pods_per_node"] = per_node
    frame["min_nodes"] = -(-frame["pods"].to_numpy() // per_node)
    frame["spread"] = frame["nodes"].to_numpy() > frame["min_nodes"].to_numpy()
    return frame


def _domain_sizes(snapshot: ClusterSnapshot, nodes: set[str]) -> dict[str, list[int]]:
    """Per node (of ``nodes``): the sizes of its NVLink domains, a PCIe-only GPU counting as a
    domain of one."""
    gpus = snapshot.gpus[snapshot.gpus["node"].isin(nodes)]
    domain = gpus["nvlink_domain"].to_numpy()
    key = np.where(domain >= 0, domain, _PCIE_BASE + gpus["index"].to_numpy())
    sizes = pd.DataFrame({"node": gpus["node"].to_numpy(), "key": key}).value_counts()
    out: dict[str, list[int]] = {}
    for (node, _key), size in sizes.items():
        out.setdefault(node, []).append(int(size))
    return out


# -- evidence ------------------------------------------------------------------------------------


def _findings(
    snapshot: ClusterSnapshot,
    hit: pd.DataFrame,
    rows: pd.DataFrame,
    groups: pd.DataFrame,
    pods: pd.DataFrame,
    spread: pd.DataFrame,
    layout: pd.DataFrame,
) -> tuple:
    """One finding per job of ``hit`` (its kinds as boolean columns). Every per-job detail is
    gathered in one pass over the hit jobs' rows, never by filtering frames per job."""
    hit_ids = set(hit.index)
    rows = rows[rows["job"].isin(hit_ids)].sort_values(["job", "order"])
    tp_of = snapshot.jobs["tp"].to_dict()

    allocation: dict[str, dict[str, list[int]]] = {}
    members: dict[tuple[str, str, int], list[str]] = {}
    for job, pod, order, node, index, domain, numa in zip(
        rows["job"],
        rows["pod"],
        rows["order"],
        rows["node"],
        rows["index"],
        rows["nvlink_domain"],
        rows["numa"],
        strict=True,
    ):
        allocation.setdefault(job, {}).setdefault(node, []).append(int(index))
        gpu = f"{node}/{int(index)}"
        members.setdefault((job, "pod", int(pod)), []).append(
            {"gpu": gpu, "nvlink_domain": int(domain), "numa": int(numa)}
        )
        tp = tp_of[job]
        if tp == tp:  # not NaN
            members.setdefault((job, "tp", int(order) // int(tp)), []).append(gpu)

    group_totals: dict[str, int] = {}
    crossing_groups: dict[str, list[dict[str, Any]]] = {}
    if not groups.empty:
        hit_groups = groups[groups["job"].isin(hit_ids)]
        group_totals = hit_groups.groupby("job").size().to_dict()
        crossing = hit_groups[hit_groups["crossing"] != ""]
        for job, group, kind in zip(
            crossing["job"], crossing["group"], crossing["crossing"], strict=True
        ):
            gpus = members[(job, "tp", int(group))]
            crossing_groups.setdefault(job, []).append(
                {
                    "group": int(group),
                    "kind": kind,
                    "gpus": gpus,
                    "nodes": sorted({g.split("/")[0] for g in gpus}),
                }
            )

    crossing_pods: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for column, label in (("cross_nvlink", "nvlink"), ("cross_numa", "numa")):
        selected = pods[pods[column] & pods["job"].isin(hit_ids)]
        for job, pod, node in zip(selected["job"], selected["pod"], selected["node"], strict=True):
            crossing_pods.setdefault(job, {}).setdefault(label, []).append(
                {"pod": int(pod), "node": node, "gpus": members[(job, "pod", int(pod))]}
            )

    max_domain = layout["max_domain"].to_dict()
    max_numa = layout["max_numa"].to_dict()
    domain_sizes = _domain_sizes(snapshot, {n for a in allocation.values() for n in a})
    job_info = snapshot.jobs.loc[list(hit.index), ["tenant", "pool", "gpus_per_pod", "tp"]]
    spread_info = spread.loc[list(hit.index)].to_dict("index")

    findings = []
    for job_id, flags, info in zip(
        hit.index, hit.to_numpy(), job_info.to_dict("records"), strict=True
    ):
        kinds = [k for k, on in zip(KINDS, flags, strict=True) if on]
        findings.append(
            _finding(
                job_id,
                info,
                kinds,
                allocation[job_id],
                group_totals.get(job_id, 0),
                crossing_groups.get(job_id, []),
                crossing_pods.get(job_id, {}),
                spread_info[job_id],
                max_domain,
                max_numa,
                domain_sizes,
            )
        )
    return tuple(findings)


def _finding(
    job_id: str,
    job: dict[str, Any],
    kinds: list[str],
    allocation: dict[str, list[int]],
    tp_groups: int,
    crossing_groups: list[dict[str, Any]],
    crossing_pods: dict[str, list[dict[str, Any]]],
    spread: dict[str, Any],
    max_domain: dict[str, float],
    max_numa: dict[str, float],
    domain_sizes: dict[str, list[int]],
):
    severity: Severity = "warning" if any(KIND_SEVERITY[k] == "warning" for k in kinds) else "info"
    tp = None if math.isnan(job["tp"]) else int(job["tp"])
    per_pod = int(job["gpus_per_pod"])
    phrases: list[str] = []
    better: list[str] = []

    if TP_CROSS_NODE in kinds or TP_CROSS_NVLINK in kinds:
        for kind, where in ((TP_CROSS_NODE, "nodes"), (TP_CROSS_NVLINK, "NVLink domains")):
            n = sum(1 for g in crossing_groups if g["kind"] == kind)
            if n:
                phrases.append(f"{n} of {tp_groups} TP group(s) of {tp} GPUs span {where}")
        largest = int(max(max_domain[n] for n in allocation))
        per_node = max(sum(s // tp for s in domain_sizes.get(n, [])) for n in allocation)
        if per_node == 0:
            better.append(
                f"TP {tp} is larger than the biggest NVLink domain of these nodes ({largest} "
                f"GPUs): no placement keeps a TP group inside one domain; use tp <= {largest}."
            )
        else:
            better.append(
                f"TP groups of {tp} within one NVLink domain: the {tp_groups} group(s) need "
                f"{math.ceil(tp_groups / per_node)} node(s) with a free {tp}-GPU NVLink domain "
                f"({per_node} group(s) per node), GPUs listed in domain order."
            )
    nvlink_pods = crossing_pods.get("nvlink", [])
    if nvlink_pods:
        node = nvlink_pods[0]["node"]
        phrases.append(f"{len(nvlink_pods)} pod(s) span NVLink domains")
        better.append(
            f"Place each {per_pod}-GPU pod inside one NVLink domain (node {node} has a domain "
            f"of {int(max_domain[node])} GPUs)."
        )
    if spread["spread"]:
        phrases.append(
            f"{int(spread['nodes'])} nodes used where {int(spread['min_nodes'])} would do"
        )
        better.append(
            f"Pack the {int(spread['pods'])} pod(s) onto {int(spread['min_nodes'])} node(s) "
            f"({int(spread['pods_per_node'])} per node) instead of {int(spread['nodes'])}."
        )
    numa_pods = crossing_pods.get("numa", [])
    if numa_pods:
        node = numa_pods[0]["node"]
        phrases.append(f"{len(numa_pods)} pod(s) span NUMA nodes")
        better.append(
            f"Place each {per_pod}-GPU pod on one NUMA node (node {node} has "
            f"{int(max_numa[node])} GPUs on one NUMA node)."
        )

    evidence = {
        "job": job_id,
        "tenant": job["tenant"],
        "pool": job["pool"],
        "kind": kinds[0],
        "kinds": kinds,
        "gpus": sum(len(v) for v in allocation.values()),
        "pods": int(spread["pods"]),
        "gpus_per_pod": per_pod,
        "tp": tp,
        "allocation": allocation,
        "nodes_used": int(spread["nodes"]),
        "gpus_per_node": int(spread["node_gpus"]),
        "min_nodes": int(spread["min_nodes"]),
        "tp_groups": tp_groups if tp is not None else None,
        "tp_groups_crossing_count": len(crossing_groups),
        "tp_groups_crossing": crossing_groups[:EXAMPLES],
        "pods_crossing_nvlink_count": len(nvlink_pods),
        "pods_crossing_nvlink": nvlink_pods[:EXAMPLES],
        "pods_crossing_numa_count": len(numa_pods),
        "pods_crossing_numa": numa_pods[:EXAMPLES],
        "better_placement": " ".join(better),
    }
    summary = f"Job {job_id} ({job['tenant']}): " + "; ".join(phrases) + "."
    return RULE.finding(f"job:{job_id}", summary, evidence, severity=severity)


RULE = Rule(
    id="topology-misplacement",
    title="Job placed across NVLink, NUMA or node boundaries",
    severity="warning",
    subject_kind="job",
    thresholds=(),
    doc=RuleDoc(
        detects=(
            "A running job holding ≥ 2 GPUs whose placement costs bandwidth it need not lose: "
            "(a) `parallelism.tp` is given and a TP group (consecutive `tp` GPUs of the "
            "allocation, in allocation order) spans more than one node (`tp-cross-node`) or "
            "more than one NVLink domain (`tp-cross-nvlink`; a GPU without NVLink is its own "
            "domain); (b) a pod's GPUs span NVLink domains although its node has a domain at "
            "least as large as the pod, counting all of the domain's GPUs, busy or not "
            "(`pod-cross-nvlink`); (c) the job uses more nodes than "
            "`ceil(pods / floor(G / gpus_per_pod))`, with G the largest GPU count among its "
            "nodes (`spread-across-nodes`); (d) a pod's GPUs span NUMA nodes although its node "
            "has a NUMA node with at least as many GPUs as the pod (`cross-numa`; not checked "
            "where NUMA is unknown, counted under *not judged*). One finding per job: warning "
            "when (a) or (b) applies, info for (c) or (d) alone."
        ),
        why=(
            "Tensor parallelism exchanges activations at every layer: inside an NVLink domain "
            "that traffic moves at hundreds of GB/s, across PCIe or the network at a fraction "
            "of it, and the whole job waits for the slowest link. Pods split across domains or "
            "NUMA nodes, and jobs spread over more nodes than needed, pay the same tax on "
            "every collective and leave fragments that block whole-node jobs."
        ),
        fix=(
            "Schedule with topology awareness: Volcano's network-topology-aware scheduling or "
            "a binpack policy for GPUs, Kueue's topology-aware scheduling "
            "(`kueue.x-k8s.io/podset-required-topology`), Slurm `--gres-flags=enforce-binding` "
            "and `--switches`, the Kubernetes Topology Manager (`single-numa-node`). Order "
            "ranks so consecutive TP ranks share an NVLink domain, and keep `tp` no larger "
            "than a domain."
        ),
        evidence=(
            "`kind` (the most severe) and `kinds` (every one that applies), `allocation` (node "
            "-> GPU indexes in allocation order), `tp`, `tp_groups`, `tp_groups_crossing` "
            "(group, kind, GPUs, nodes; first 20) and its count, `pods_crossing_nvlink`, "
            "`pods_crossing_numa` (first 20) and counts, `nodes_used`, `gpus_per_node`, "
            "`min_nodes`, and `better_placement`."
        ),
        references=(
            "DESIGN.md section 5 (`topology-misplacement`)",
            "Shoeybi et al., Megatron-LM (2019): tensor parallelism within a node",
            "`nvidia-smi topo -m` (../shared/data/topology/)",
        ),
    ),
    evaluate=evaluate,
    for_s=300,
    keep_firing_for_s=300,
)
