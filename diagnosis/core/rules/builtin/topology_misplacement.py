"""``topology-misplacement``: a running job placed across NVLink, NUMA or node boundaries it did
not need to cross (docs/rules.md)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from diagnosis.core.rules.base import Finding, Judgement, Rule, RuleDoc, Severity
from diagnosis.core.rules.facts import SnapshotFacts
from diagnosis.core.rules.running_jobs import text
from diagnosis.core.snapshot import ClusterSnapshot
from diagnosis.core.text import Text, gettext_noop, message, no_tenant

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
NVLINK_UNKNOWN = (
    "tp-cross-nvlink / pod-cross-nvlink not checked: NVLink topology of its GPUs unknown"
)
EXAMPLES = 20  # crossing TP groups / pods listed in the evidence (all are counted)

# A (node, value) pair as one integer: node code * _NODE_STRIDE + value. A GPU's NVLink domain
# id (``dom_id``) is that key for a node-local domain, ``_CLIQUE_BASE`` + the clique's number for
# a GPU of a multi-node NVLink clique (one domain across nodes), and -1 when unknown.
_NODE_STRIDE = 1 << 21
_CLIQUE_BASE = 1 << 60


def evaluate(
    snapshot: ClusterSnapshot, thresholds: Mapping[str, Any], facts: SnapshotFacts
) -> Judgement:
    layout = _Layout(snapshot)
    placed = _Placement(snapshot, layout)
    if placed.rows == 0:
        return Judgement()
    tp = _tp_groups(placed, snapshot.jobs)
    pods = _pods(placed, layout)
    jobs = _jobs(placed, pods, snapshot.jobs, layout)

    flags = np.zeros((len(jobs.code), len(KINDS)), dtype=bool)
    position = np.full(len(snapshot.jobs), -1, dtype=np.int64)
    position[jobs.code] = np.arange(len(jobs.code))
    flags[position[tp.job[tp.kind == 1]], 0] = True
    flags[position[tp.job[tp.kind == 2]], 1] = True
    flags[position[pods.job[pods.cross_nvlink]], 2] = True
    flags[jobs.spread, 3] = True
    flags[position[pods.job[pods.cross_numa]], 4] = True

    nvlink_unknown = np.union1d(tp.job[tp.kind == -1], pods.job[pods.nvlink_unknown])
    not_judged = {
        NUMA_UNKNOWN: len(np.unique(pods.job[pods.numa_unknown])),
        NVLINK_UNKNOWN: len(nvlink_unknown),
    }
    hit = np.flatnonzero(flags.any(axis=1))
    if not len(hit):
        return Judgement((), not_judged)
    findings = _findings(snapshot, layout, placed, tp, pods, jobs, flags, hit)
    return Judgement(findings, not_judged)


# -- vectorised facts ----------------------------------------------------------------------------
#
# Everything below works on numpy arrays of allocation rows sorted by (job, order), so that every
# TP group, pod and job is a contiguous run of rows and its minimum / maximum node, NVLink domain
# or NUMA node is one ``reduceat``.


class _Layout:
    """Per node (in ``snapshot.nodes`` order): ``gpus``, ``max_domain`` (GPUs of the node in its
    largest NVLink domain; 0 when unknown), ``nvlink_known`` (every GPU's domain known),
    ``max_numa`` (GPUs on its fullest NUMA node) and ``numa_known``; per row of
    ``snapshot.gpus``: ``node`` (code), ``index``, ``domain``, ``numa``, ``dom_id``. Per clique
    (``clique_names``): ``clique_sizes`` (GPUs) and ``clique_nodes``. Sizes count physical GPUs
    (a GPU split into MIG instances once)."""

    def __init__(self, snapshot: ClusterSnapshot) -> None:
        nodes = snapshot.nodes
        gpus = snapshot.gpus
        self.names = nodes.index
        count = len(self.names)
        self.gpus = nodes["gpus"].to_numpy(dtype=np.int64)
        self.node = self.names.get_indexer(gpus["node"]).astype(np.int64)
        self.index = gpus["index"].to_numpy(dtype=np.int64)
        self.instance = gpus["mig_instance"].to_numpy(dtype=np.int64)
        self.domain = gpus["nvlink_domain"].to_numpy(dtype=np.int64)
        self.numa = gpus["numa"].to_numpy(dtype=np.int64)
        cliques = gpus["nvlink_clique"]
        has_clique = cliques.notna().to_numpy()
        codes, self.clique_names = pd.factorize(cliques)
        self.clique = np.asarray(codes, dtype=np.int64)
        self.dom_id = np.where(
            has_clique,
            _CLIQUE_BASE + self.clique,
            np.where(self.domain >= 0, self.node * _NODE_STRIDE + self.domain, -1),
        )
        physical = ~gpus[["node", "index"]].duplicated().to_numpy()
        p_node = self.node[physical]
        p_dom = self.dom_id[physical]
        known = p_dom >= 0
        self.domain_node, self.domain_sizes = _distinct_pairs(p_node[known], p_dom[known])
        self.max_domain = np.zeros(count, dtype=np.int64)
        np.maximum.at(self.max_domain, self.domain_node, self.domain_sizes)
        self.nvlink_known = np.bincount(p_node[~known], minlength=count) == 0
        p_clique = self.clique[physical]
        self.clique_sizes = np.bincount(p_clique[p_clique >= 0], minlength=len(self.clique_names))
        in_clique = p_clique >= 0
        clique_of_pair, _ = _distinct_pairs(p_clique[in_clique], p_node[in_clique])
        self.clique_nodes = np.bincount(clique_of_pair, minlength=len(self.clique_names))
        numa_keys, numa_sizes = _group_sizes(p_node, self.numa[physical])
        self.max_numa = np.zeros(count, dtype=np.int64)
        np.maximum.at(self.max_numa, numa_keys // _NODE_STRIDE, numa_sizes)
        self.numa_known = np.bincount(p_node[self.numa[physical] < 0], minlength=count) == 0
        # A guessed index (an adapter's guess, ``index_guessed``) says nothing about which
        # NVLink domain or NUMA node the GPU is on where the node has more than one.
        guessed = gpus["index_guessed"].to_numpy(dtype=bool)
        many_domains = np.bincount(self.domain_node, minlength=count) > 1
        many_numa = np.bincount(numa_keys // _NODE_STRIDE, minlength=count) > 1
        self.placed_dom = np.where(guessed & many_domains[self.node], -1, self.dom_id)
        self.placed_numa = np.where(guessed & many_numa[self.node], -1, self.numa)

    def rows_of(self, node: np.ndarray, index: np.ndarray, instance: np.ndarray) -> np.ndarray:
        """Row positions in ``snapshot.gpus`` of the GPU units (node code, index, instance)."""
        codes, first = np.unique(self.node, return_index=True)
        start = np.full(len(self.names), -1, dtype=np.int64)
        start[codes] = first
        rows = start[node] + index
        inside = (rows >= 0) & (rows < len(self.node))
        if (
            inside.all()
            and (self.node[rows] == node).all()
            and (self.index[rows] == index).all()
            and (self.instance[rows] == instance).all()
        ):
            return rows  # the loader lays whole GPUs out node by node, index 0..n-1
        keys = pd.MultiIndex.from_arrays([self.node, self.index, self.instance])
        return keys.get_indexer(pd.MultiIndex.from_arrays([node, index, instance]))

    def tp_groups_per_node(self, tp: int) -> np.ndarray:
        """How many whole TP groups of ``tp`` GPUs fit inside the node's own NVLink domains."""
        return np.bincount(
            self.domain_node, weights=self.domain_sizes // tp, minlength=len(self.names)
        ).astype(np.int64)


def _distinct_pairs(first: np.ndarray, second: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct ``(first, second)`` pairs as their ``first`` values, with how many times each
    occurs, in no particular order (callers only count or take maxima per ``first``): one sort
    of an integer key, not a sort of the pairs as rows (``np.unique(axis=1)``, 0.1 s at 131,072
    GPUs)."""
    codes, values = pd.factorize(second, sort=False)
    keys, sizes = np.unique(
        first.astype(np.int64) * max(len(values), 1) + codes, return_counts=True
    )
    return keys // max(len(values), 1), sizes


def _group_sizes(node: np.ndarray, value: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Distinct ``node * _NODE_STRIDE + value`` keys (values >= 0) and their GPU counts."""
    known = value >= 0
    return np.unique(node[known] * _NODE_STRIDE + value[known], return_counts=True)


class _Placement:
    """Allocation rows of running jobs holding >= 2 GPUs, sorted by (job, order): ``job``
    (code in ``snapshot.jobs``), ``pod``, ``order``, ``node`` (code), ``index``, ``domain``,
    ``numa``, ``clique`` (code, -1 none) and ``dom_id`` (the GPU's NVLink domain, unique across
    the cluster, one id for a whole multi-node clique; -1 when unknown)."""

    def __init__(self, snapshot: ClusterSnapshot, layout: _Layout) -> None:
        jobs = snapshot.jobs
        alloc = snapshot.allocations
        job = jobs.index.get_indexer(alloc["job"]).astype(np.int64)
        running = (jobs["state"] == "running").to_numpy()
        held = np.bincount(job, minlength=len(jobs))
        keep = np.flatnonzero(running[job] & (held[job] >= 2))
        order = alloc["order"].to_numpy(dtype=np.int64)[keep]
        job = job[keep]
        sort = np.lexsort((order, job))
        keep = keep[sort]
        self.job = job[sort]
        self.order = order[sort]
        self.pod = alloc["pod"].to_numpy(dtype=np.int64)[keep]
        self.node = layout.names.get_indexer(alloc["node"].to_numpy()[keep]).astype(np.int64)
        self.index = alloc["index"].to_numpy(dtype=np.int64)[keep]
        instance = alloc["mig_instance"].to_numpy(dtype=np.int64)[keep]
        gpu_rows = layout.rows_of(self.node, self.index, instance)
        self.domain = layout.domain[gpu_rows]
        self.numa = layout.placed_numa[gpu_rows]
        self.clique = layout.clique[gpu_rows]
        self.dom_id = layout.placed_dom[gpu_rows]
        self.rows = len(self.job)


def _run_starts(*keys: np.ndarray) -> np.ndarray:
    """Where each run of equal consecutive keys starts (rows sorted by the keys)."""
    change = np.zeros(len(keys[0]), dtype=bool)
    if len(change):
        change[0] = True
    for key in keys:
        change[1:] |= key[1:] != key[:-1]
    return np.flatnonzero(change)


class _Runs:
    """Runs of rows (TP groups, pods, jobs): per run its ``job``, ``first`` and ``end`` row
    and ``size``. The functions that build runs add their own per-run arrays (``kind``,
    ``cross_nvlink``, ``min_nodes``...)."""

    def __init__(self, starts: np.ndarray, rows: np.ndarray, job: np.ndarray) -> None:
        self.first = rows[starts]
        self.end = np.append(rows[starts[1:] - 1] + 1, rows[-1] + 1) if len(starts) else starts
        self.size = self.end - self.first
        self.job = job[self.first]


def _tp_groups(placed: _Placement, jobs: pd.DataFrame) -> _Runs:
    """TP groups (consecutive ``tp`` GPUs in allocation order) of jobs with ``tp``; ``kind``
    1 = spans nodes outside one NVLink clique, 2 = spans NVLink domains, 0 = fine, -1 = not
    judged (some GPU's NVLink domain unknown); ``group`` number."""
    tp = jobs["tp"].to_numpy(dtype="float64")[placed.job]
    rows = np.flatnonzero(~np.isnan(tp))
    group = placed.order[rows] // tp[rows].astype(np.int64) if len(rows) else rows
    starts = _run_starts(placed.job[rows], group)
    runs = _Runs(starts, rows, placed.job)
    runs.group = group[starts]
    if not len(rows):
        runs.kind = rows
        return runs
    node = placed.node[rows]
    dom = placed.dom_id[rows]
    clique = placed.clique[rows]
    cross_node = np.minimum.reduceat(node, starts) != np.maximum.reduceat(node, starts)
    dom_min = np.minimum.reduceat(dom, starts)
    cross_dom = dom_min != np.maximum.reduceat(dom, starts)
    one_clique = (np.minimum.reduceat(clique, starts) >= 0) & (
        np.minimum.reduceat(clique, starts) == np.maximum.reduceat(clique, starts)
    )
    unknown = dom_min < 0
    runs.kind = np.where(
        cross_node & ~one_clique,
        1,
        np.where(unknown, -1, np.where(cross_dom, 2, 0)),
    )
    return runs


def _pods(placed: _Placement, layout: _Layout) -> _Runs:
    """Pods (each on one node): ``cross_nvlink`` (b), ``cross_numa`` (d), ``nvlink_unknown``,
    ``numa_unknown``."""
    rows = np.arange(placed.rows)
    starts = _run_starts(placed.job, placed.pod)
    pods = _Runs(starts, rows, placed.job)
    pods.pod = placed.pod[starts]
    pods.node = placed.node[starts]
    dom_min = np.minimum.reduceat(placed.dom_id, starts)
    dom_max = np.maximum.reduceat(placed.dom_id, starts)
    numa_min = np.minimum.reduceat(placed.numa, starts)
    numa_max = np.maximum.reduceat(placed.numa, starts)
    pods.nvlink_unknown = (pods.size >= 2) & ((dom_min < 0) | ~layout.nvlink_known[pods.node])
    pods.cross_nvlink = (
        ~pods.nvlink_unknown & (dom_min != dom_max) & (layout.max_domain[pods.node] >= pods.size)
    )
    pods.numa_unknown = (pods.size >= 2) & ((numa_min < 0) | ~layout.numa_known[pods.node])
    pods.cross_numa = (
        ~pods.numa_unknown & (numa_min != numa_max) & (layout.max_numa[pods.node] >= pods.size)
    )
    return pods


def _jobs(placed: _Placement, pods: _Runs, jobs: pd.DataFrame, layout: _Layout) -> _Runs:
    """Per job: ``nodes`` used, ``pods``, ``node_gpus`` (G, the largest GPU count among its
    nodes), ``pods_per_node`` = floor(G / gpus_per_pod), ``min_nodes`` and ``spread`` (c)."""
    starts = _run_starts(placed.job)
    runs = _Runs(starts, np.arange(placed.rows), placed.job)
    runs.code = runs.job
    node_count = len(layout.names)
    pairs = np.unique(placed.job * node_count + placed.node)
    runs.nodes = np.bincount(pairs // node_count, minlength=len(jobs))[runs.code]
    runs.pods = np.bincount(pods.job, minlength=len(jobs))[runs.code]
    runs.node_gpus = np.maximum.reduceat(layout.gpus[placed.node], starts)
    per_pod = np.maximum(jobs["gpus_per_pod"].to_numpy(dtype=np.int64)[runs.code], 1)
    runs.pods_per_node = np.maximum(runs.node_gpus // per_pod, 1)
    runs.min_nodes = -(-runs.pods // runs.pods_per_node)
    runs.spread = runs.nodes > runs.min_nodes
    return runs


# -- evidence ------------------------------------------------------------------------------------


def _findings(
    snapshot: ClusterSnapshot,
    layout: _Layout,
    placed: _Placement,
    tp: _Runs,
    pods: _Runs,
    jobs: _Runs,
    flags: np.ndarray,
    hit: np.ndarray,
) -> tuple[Finding, ...]:
    """One finding per hit job. Details are gathered per job in single passes over the hit
    jobs' rows and the crossing groups / pods, never by filtering frames per job."""
    names = layout.names.to_numpy()
    node = names[placed.node].tolist()
    index = placed.index.tolist()
    domain = placed.domain.tolist()
    numa = placed.numa.tolist()

    def gpus(first: int, end: int) -> list[str]:
        return [f"{node[r]}/{index[r]}" for r in range(first, end)]

    hit_jobs = set(jobs.code[hit].tolist())
    groups_of: dict[int, list[dict[str, Any]]] = {}
    crossing = np.flatnonzero((tp.kind > 0) & np.isin(tp.job, list(hit_jobs)))
    for g in crossing.tolist():
        members = gpus(int(tp.first[g]), int(tp.end[g]))
        groups_of.setdefault(int(tp.job[g]), []).append(
            {
                "group": int(tp.group[g]),
                "kind": TP_CROSS_NODE if tp.kind[g] == 1 else TP_CROSS_NVLINK,
                "gpus": members,
                "nodes": sorted({m.rsplit("/", 1)[0] for m in members}),
            }
        )
    group_totals = dict(zip(*np.unique(tp.job, return_counts=True), strict=True))

    pods_of: dict[int, dict[str, list[dict[str, Any]]]] = {}
    for label, mask in (("nvlink", pods.cross_nvlink), ("numa", pods.cross_numa)):
        for p in np.flatnonzero(mask).tolist():
            first, end = int(pods.first[p]), int(pods.end[p])
            pods_of.setdefault(int(pods.job[p]), {}).setdefault(label, []).append(
                {
                    "pod": int(pods.pod[p]),
                    "node": node[first],
                    "gpus": [
                        {
                            "gpu": f"{node[r]}/{index[r]}",
                            "nvlink_domain": domain[r],
                            "numa": numa[r],
                        }
                        for r in range(first, end)
                    ],
                }
            )

    table = snapshot.jobs
    ids = table.index.to_numpy()
    tenant = text(table["tenant"]).tolist()
    pool = text(table["pool"]).tolist()
    per_pod = table["gpus_per_pod"].to_numpy()
    tp_of = table["tp"].to_numpy(dtype="float64")
    fits: dict[int, np.ndarray] = {}
    findings = []
    for j in hit.tolist():
        code = int(jobs.code[j])
        first, end = int(jobs.first[j]), int(jobs.end[j])
        allocation: dict[str, list[int]] = {}
        for r in range(first, end):
            allocation.setdefault(node[r], []).append(index[r])
        kinds = [kind for kind, on in zip(KINDS, flags[j].tolist(), strict=True) if on]
        job_tp = None if math.isnan(tp_of[code]) else int(tp_of[code])
        better_tp = None
        if job_tp is not None and (TP_CROSS_NODE in kinds or TP_CROSS_NVLINK in kinds):
            if job_tp not in fits:
                fits[job_tp] = layout.tp_groups_per_node(job_tp)
            used = np.unique(placed.node[first:end])
            cliques = np.unique(placed.clique[first:end])
            cliques = cliques[cliques >= 0]
            if len(cliques):  # multi-node NVLink: the clique is the domain to stay inside
                sizes = layout.clique_sizes[cliques]
                biggest = int(cliques[np.argmax(sizes)])
                better_tp = _Advice(
                    int(sizes.max()),
                    int(sizes.max()) // job_tp,
                    str(layout.clique_names[biggest]),
                    int(layout.clique_nodes[biggest]),
                )
            else:
                better_tp = _Advice(
                    int(layout.max_domain[used].max()), int(fits[job_tp][used].max())
                )
        findings.append(
            _finding(
                {
                    "id": str(ids[code]),
                    "tenant": tenant[code],
                    "pool": pool[code],
                    "gpus_per_pod": int(per_pod[code]),
                    "tp": job_tp,
                    "gpus": end - first,
                    "pods": int(jobs.pods[j]),
                    "nodes": int(jobs.nodes[j]),
                    "node_gpus": int(jobs.node_gpus[j]),
                    "min_nodes": int(jobs.min_nodes[j]),
                    "pods_per_node": int(jobs.pods_per_node[j]),
                    "spread": bool(jobs.spread[j]),
                    "tp_groups": int(group_totals.get(code, 0)),
                    "cliques": sorted(
                        str(layout.clique_names[c])
                        for c in np.unique(placed.clique[first:end]).tolist()
                        if c >= 0
                    ),
                },
                kinds,
                allocation,
                groups_of.get(code, []),
                pods_of.get(code, {}),
                better_tp,
                layout,
            )
        )
    return tuple(findings)


@dataclass(frozen=True)
class _Advice:
    """The NVLink domain a TP group could stay inside: ``largest`` GPUs, ``groups`` of tp in it;
    for a multi-node clique its id and node count."""

    largest: int
    groups: int
    clique: str | None = None
    clique_nodes: int = 0


def _finding(
    job: dict[str, Any],
    kinds: list[str],
    allocation: dict[str, list[int]],
    crossing_groups: list[dict[str, Any]],
    crossing_pods: dict[str, list[dict[str, Any]]],
    better_tp: _Advice | None,
    layout: _Layout,
) -> Finding:
    severity: Severity = "warning" if any(KIND_SEVERITY[k] == "warning" for k in kinds) else "info"
    tp = job["tp"]
    per_pod = job["gpus_per_pod"]
    phrases: list[Text] = []
    better: list[str] = []

    if better_tp is not None:
        for kind, template in (
            (
                TP_CROSS_NODE,
                gettext_noop("%(n)s of %(groups)s TP group(s) of %(tp)s GPUs span nodes"),
            ),
            (
                TP_CROSS_NVLINK,
                gettext_noop("%(n)s of %(groups)s TP group(s) of %(tp)s GPUs span NVLink domains"),
            ),
        ):
            n = sum(1 for g in crossing_groups if g["kind"] == kind)
            if n:
                phrases.append(message(template, n=n, groups=job["tp_groups"], tp=tp))
        largest, per_node = better_tp.largest, better_tp.groups
        if better_tp.clique is not None:
            if per_node == 0:
                better.append(
                    f"TP {tp} is larger than NVLink clique {better_tp.clique} ({largest} GPUs "
                    f"over {better_tp.clique_nodes} nodes): use tp <= {largest}."
                )
            else:
                better.append(
                    f"Keep each TP group of {tp} inside one NVLink clique: clique "
                    f"{better_tp.clique} spans {better_tp.clique_nodes} nodes with {largest} "
                    f"GPUs ({per_node} group(s) of {tp}); GPUs of different nodes in one clique "
                    "share the NVLink fabric."
                )
        elif per_node == 0:
            better.append(
                f"TP {tp} is larger than the biggest NVLink domain of these nodes ({largest} "
                f"GPUs): no placement keeps a TP group inside one domain; use tp <= {largest}."
            )
        else:
            better.append(
                f"TP groups of {tp} within one NVLink domain: the {job['tp_groups']} group(s) "
                f"need {math.ceil(job['tp_groups'] / per_node)} node(s) with a free {tp}-GPU "
                f"NVLink domain ({per_node} group(s) per node), GPUs listed in domain order."
            )
    nvlink_pods = crossing_pods.get("nvlink", [])
    if nvlink_pods:
        node = nvlink_pods[0]["node"]
        phrases.append(
            message(gettext_noop("%(pods)s pod(s) span NVLink domains"), pods=len(nvlink_pods))
        )
        largest = int(layout.max_domain[layout.names.get_loc(node)])
        better.append(
            f"Place each {per_pod}-GPU pod inside one NVLink domain (node {node} has a domain "
            f"of {largest} GPUs)."
        )
    if job["spread"]:
        phrases.append(
            message(
                gettext_noop("%(nodes)s nodes used where %(min_nodes)s would do"),
                nodes=job["nodes"],
                min_nodes=job["min_nodes"],
            )
        )
        better.append(
            f"Pack the {job['pods']} pod(s) onto {job['min_nodes']} node(s) "
            f"({job['pods_per_node']} per node) instead of {job['nodes']}."
        )
    numa_pods = crossing_pods.get("numa", [])
    if numa_pods:
        node = numa_pods[0]["node"]
        phrases.append(
            message(gettext_noop("%(pods)s pod(s) span NUMA nodes"), pods=len(numa_pods))
        )
        fullest = int(layout.max_numa[layout.names.get_loc(node)])
        better.append(
            f"Place each {per_pod}-GPU pod on one NUMA node (node {node} has {fullest} GPUs on "
            f"one NUMA node)."
        )

    evidence = {
        "job": job["id"],
        "tenant": job["tenant"],
        "pool": job["pool"],
        "kind": kinds[0],
        "kinds": kinds,
        "gpus": job["gpus"],
        "pods": job["pods"],
        "gpus_per_pod": per_pod,
        "tp": tp,
        "allocation": allocation,
        "nodes_used": job["nodes"],
        "gpus_per_node": job["node_gpus"],
        "min_nodes": job["min_nodes"],
        "tp_groups": job["tp_groups"] if tp is not None else None,
        "tp_groups_crossing_count": len(crossing_groups),
        "tp_groups_crossing": crossing_groups[:EXAMPLES],
        "pods_crossing_nvlink_count": len(nvlink_pods),
        "pods_crossing_nvlink": nvlink_pods[:EXAMPLES],
        "pods_crossing_numa_count": len(numa_pods),
        "pods_crossing_numa": numa_pods[:EXAMPLES],
        "nvlink_cliques": job["cliques"],
        "better_placement": " ".join(better),
    }
    said: Text | str = phrases[0] if phrases else ""
    for phrase in phrases[1:]:
        said = message(gettext_noop("%(said)s; %(next)s"), said=said, next=phrase)
    summary = message(
        gettext_noop("Job %(job)s (%(tenant)s): %(phrases)s."),
        job=str(job["id"]),
        tenant=no_tenant(job["tenant"]),
        phrases=said,
    )
    return RULE.finding(f"job:{job['id']}", summary, evidence, severity=severity)


RULE = Rule(
    id="topology-misplacement",
    title="Job placed across NVLink, NUMA or node boundaries",
    severity="warning",
    subject_kind="job:",
    thresholds=(),
    doc=RuleDoc(
        detects=(
            "A running job holding ≥ 2 GPUs whose placement costs bandwidth it need not lose: "
            "(a) `parallelism.tp` is given and a TP group (consecutive `tp` GPUs of the "
            "allocation, in allocation order) spans more than one node (`tp-cross-node`; GPUs "
            "of one multi-node NVLink clique, `gpus[].nvlink_clique` as on GB200/GB300 NVL72, "
            "count as one domain, so a group inside one clique does not cross) or more than "
            "one NVLink domain (`tp-cross-nvlink`; a GPU listed alone has no NVLink peer); "
            "(b) a pod's GPUs span NVLink domains although its node has a domain at "
            "least as large as the pod, counting all of the domain's GPUs, busy or not "
            "(`pod-cross-nvlink`); (c) the job uses more nodes than "
            "`ceil(pods / floor(G / gpus_per_pod))`, with G the largest GPU count among its "
            "nodes (`spread-across-nodes`); (d) a pod's GPUs span NUMA nodes although its node "
            "has a NUMA node with at least as many GPUs as the pod (`cross-numa`; not checked "
            "where NUMA is unknown, counted under *not judged*). A node without topology data "
            'is never taken for "PCIe only": (a)\'s NVLink check and (b) are not judged for '
            "GPUs whose NVLink domain is unknown (counted under *not judged*), while the node "
            "boundary of (a) and (c) is still judged; likewise for a GPU whose index an adapter "
            "guessed (`index_guessed`) on a node with more than one NVLink domain (NUMA node). "
            "One finding per job: warning "
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
            "`nvlink_cliques` (the multi-node NVLink cliques of its GPUs), "
            "`pods_crossing_numa` (first 20) and counts, `nodes_used`, `gpus_per_node`, "
            "`min_nodes`, and `better_placement`."
        ),
        references=(
            "Shoeybi et al., Megatron-LM (2019): tensor parallelism within a node",
            "`nvidia-smi topo -m` (../shared/data/topology/; `manage.py topology FILE`)",
            "NVIDIA GB200 NVL72: one NVLink domain of 72 GPUs over 18 compute trays "
            "(`nvidia.com/gpu.clique`)",
        ),
    ),
    evaluate=evaluate,
    for_s=300,
    keep_firing_for_s=300,
)
