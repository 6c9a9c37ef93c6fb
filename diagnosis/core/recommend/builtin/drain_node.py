"""``drain-node``: cordon and drain a node whose GPU reported a critical Xid.

Fires for a node with an ``xid`` finding on one of its GPUs whose codes include one that is
critical in the Xid catalog (NVIDIA's action needs a GPU reset, a node reboot or service, e.g.
48, 64, 74, 79, 95, 119) and is not application-level. Application-level Xids (13, 31, 43, ...)
never drain a node on their own: they point at the job. Nodes already ``drained`` or ``down``
get nothing; a ``cordoned`` node is drained (its jobs evicted).

The reason carried with the change names the codes and GPUs, e.g.
``gpuobs: Xid 79 (GPU has fallen off the bus) on gpu-117/3``.

The impact is a static account, not a replay: the simulator does not model what a failing GPU
does to the jobs placed on it, so a replay would only show the capacity a drain costs and never
what it saves. It states the GPUs taken out of scheduling, the jobs to evict (and which of them
sit on a failing GPU), and whether their pods fit elsewhere in the pool right now.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from diagnosis.core import xid_catalog
from diagnosis.core.recommend.base import (
    DRAIN_NODE,
    NOT_SIMULATED,
    Draft,
    FindingRef,
    Generator,
    RecommendContext,
    optional_text,
)
from diagnosis.core.rules.base import Finding
from diagnosis.core.rules.builtin.xid import ACTION_URGENCY

if TYPE_CHECKING:
    from pandas import Index

MAX_REASON_CHARS = 200
NOTHING_TO_DO = ("drained", "down")


def drain_codes(finding: Finding) -> list[dict[str, Any]]:
    """The codes of an ``xid`` finding that justify a drain: critical and not
    application-level."""
    return [c for c in finding.evidence.get("codes", ()) if xid_catalog.drains_node(int(c["code"]))]


def drainable_nodes(
    context: RecommendContext,
    rule_id: str,
    justifies: Callable[[Finding], object] | None = None,
) -> list[tuple[str, list[Finding]]]:
    """The nodes, sorted, holding ``rule_id`` findings that ``justifies`` a drain (all of them
    when it is None), each with those findings in GPU index order; nodes not in the snapshot,
    or already ``drained`` or ``down``, are left out."""
    by_node: dict[str, list[Finding]] = {}
    for finding in context.findings(rule_id):
        node = finding.evidence.get("node")
        if node is not None and (justifies is None or justifies(finding)):
            by_node.setdefault(str(node), []).append(finding)
    nodes = context.snapshot.nodes
    return [
        (node, sorted(by_node[node], key=lambda f: int(f.evidence.get("index", 0))))
        for node in sorted(by_node)
        if node in nodes.index and nodes.loc[node, "state"] not in NOTHING_TO_DO
    ]


def generate(context: RecommendContext) -> list[Draft]:
    nodes = context.snapshot.nodes
    drafts = []
    drainable = drainable_nodes(context, "xid", drain_codes)
    layout = PoolLayout.of(context) if drainable else None
    for node, findings in drainable:
        reason = drain_reason(findings)
        state = str(nodes.loc[node, "state"])
        impact, tradeoffs = capacity_account(context, node, findings, layout)
        drafts.append(
            Draft(
                kind=DRAIN_NODE,
                target=f"node:{node}",
                change={"from": state, "to": "drained", "reason": reason},
                findings=tuple(FindingRef.of(f) for f in findings),
                summary=f"Cordon and drain node {node} ({reason.removeprefix('gpuobs: ')}); "
                f"then {_action(findings)}.",
                static_impact=impact,
                tradeoffs=tradeoffs,
                basis={"codes": sorted({int(c["code"]) for f in findings for c in drain_codes(f)})},
            )
        )
    return drafts


def drain_reason(findings: list[Finding]) -> str:
    """``gpuobs: Xid 79 (GPU has fallen off the bus) on gpu-117/3[; ...]``, at most 200
    characters (the rest summarised as ``and N more``)."""
    parts = []
    for finding in findings:
        where = f"{finding.evidence['node']}/{finding.evidence['index']}"
        for code in drain_codes(finding):
            meaning = str(code.get("meaning") or code.get("name") or "").rstrip(".")
            parts.append(f"Xid {code['code']} ({meaning}) on {where}")
    text = "gpuobs: " + parts[0]
    for i, part in enumerate(parts[1:], start=1):
        rest = len(parts) - i
        candidate = f"{text}; {part}"
        if len(candidate) + len(f" and {rest - 1} more") > MAX_REASON_CHARS:
            return f"{text} and {rest} more"
        text = candidate
    return text


ACTION_WORDS = {
    "service": "send it for service (RMA)",
    "reboot-node": "reboot it",
    "check-hardware": "run DCGM diagnostics (dcgmi diag -r 3)",
    "reset-gpu": "reset the GPU (nvidia-smi -r) or reboot it",
}


def _action(findings: list[Finding]) -> str:
    """What to do once drained: the most disruptive action the codes call for."""
    actions = {str(c.get("action")) for f in findings for c in drain_codes(f)}
    for action in ACTION_URGENCY:
        if action in actions:
            return ACTION_WORDS.get(action, action.replace("-", " "))
    return "follow NVIDIA's action for the code (docs/xid.md)"


@dataclass(frozen=True)
class PoolLayout:
    """The snapshot's GPUs by node and its nodes by pool, grouped once for all the nodes a
    cycle may drain (a 131,072-GPU cluster has hundreds): each node's account then reads its
    own rows instead of comparing every GPU's and node's name again, as plain values (a node's
    few GPUs and jobs through pandas cost ~10 ms a node)."""

    gpu_rows: dict[str, np.ndarray]  # node -> positions in facts.gpu_state
    pool_nodes: dict[str, Index]
    pool_gpus: dict[str, int]
    pool_free: dict[str, np.ndarray]  # free GPUs of each of pool_nodes[pool], in that order
    gpu_job: np.ndarray  # per row of facts.gpu_state: the job holding it, None when none
    gpu_index: np.ndarray
    gpu_usable: np.ndarray

    @classmethod
    def of(cls, context: RecommendContext) -> PoolLayout:
        nodes = context.snapshot.nodes
        pool_nodes = {str(pool): index for pool, index in nodes.groupby("pool").groups.items()}
        free = context.facts.free_per_node
        gpus = context.facts.gpu_state
        return cls(
            gpu_rows=dict(gpus.groupby("node", sort=False).indices),
            pool_nodes=pool_nodes,
            pool_gpus={p: int(nodes.loc[index, "gpus"].sum()) for p, index in pool_nodes.items()},
            pool_free={
                p: free.reindex(index, fill_value=0).to_numpy() for p, index in pool_nodes.items()
            },
            gpu_job=gpus["job"].astype(object).where(gpus["job"].notna(), None).to_numpy(),
            gpu_index=gpus["index"].astype(int).to_numpy(),
            gpu_usable=gpus["usable"].to_numpy(),
        )

    def free_elsewhere(self, pool: str, node: str) -> np.ndarray:
        """Free GPUs per node of ``pool``, ``node`` left out."""
        return np.delete(self.pool_free[pool], self.pool_nodes[pool].get_loc(node))

    def holders(self, node: str) -> tuple[int, dict[str, list[int]]]:
        """The usable GPUs of ``node`` and, by job id (sorted), the GPU indexes each job holds
        there (one per GPU row: a MIG instance counts as its own)."""
        rows = self.gpu_rows.get(node, np.empty(0, dtype=int))
        held: dict[str, list[int]] = {}
        jobs, indexes = self.gpu_job[rows].tolist(), self.gpu_index[rows].tolist()
        for job, index in zip(jobs, indexes, strict=True):
            if job is not None:
                held.setdefault(job, []).append(index)
        return int(self.gpu_usable[rows].sum()), {job: held[job] for job in sorted(held)}


def capacity_account(
    context: RecommendContext,
    node: str,
    findings: list[Finding],
    layout: PoolLayout | None = None,
) -> tuple[dict[str, Any], tuple[str, ...]]:
    snapshot = context.snapshot
    facts = context.facts
    layout = layout or PoolLayout.of(context)
    pool = str(snapshot.nodes.loc[node, "pool"])
    pool_gpus = layout.pool_gpus[pool]
    removed, holders = layout.holders(node)
    failing = {int(f.evidence["index"]) for f in findings}
    free = layout.free_elsewhere(pool, node)

    jobs = snapshot.jobs
    evict = []
    for job_id, indexes in holders.items():
        at = jobs.index.get_loc(job_id)
        per_pod = max(int(jobs["gpus_per_pod"].iloc[at]), 1)
        pods_here = len(indexes) // per_pod
        fits = bool(int(np.floor_divide(free, per_pod).sum()) >= pods_here)
        evict.append(
            {
                "id": str(job_id),
                "tenant": optional_text(jobs["tenant"].iloc[at]),
                "queue": optional_text(jobs["queue"].iloc[at]),
                "state": str(jobs["state"].iloc[at]),
                "gpus_on_node": len(indexes),
                "job_gpus": int(facts.job_held_gpus.get(job_id, 0)),
                "on_failing_gpu": bool(set(indexes) & failing),
                "refits_in_pool_now": fits,
            }
        )
    share = removed / pool_gpus if pool_gpus else 0.0
    held_by_evicted = sum(j["job_gpus"] for j in evict)
    headline = (
        f"takes {removed} GPUs ({100 * share:.1f}% of pool {pool}) out of scheduling; "
        f"evicts {len(evict)} job(s) holding {held_by_evicted} GPUs in all"
    )
    impact = {
        "method": "static",
        "verdict": NOT_SIMULATED,
        "headline": headline,
        "pool": pool,
        "pool_gpus": pool_gpus,
        "gpus_removed": removed,
        "share_of_pool": round(share, 4),
        "pool_free_gpus_elsewhere": int(free.sum()),
        "jobs_to_evict": evict,
        "gpus_held_by_evicted_jobs": held_by_evicted,
        "failing_gpus": sorted(failing),
        "note": (
            "not simulated: the simulator does not model a failing GPU's effect on the jobs "
            "placed on it; this is the drain's capacity cost, from the snapshot"
        ),
    }
    tradeoffs = [f"{removed} GPUs of pool {pool} ({100 * share:.1f}%) out of scheduling"]
    for job in evict:
        where = "on the failing GPU" if job["on_failing_gpu"] else "on the node"
        refit = "fits elsewhere now" if job["refits_in_pool_now"] else "must wait for GPUs"
        tradeoffs.append(f"evicts job {job['id']} ({job['tenant']}, {where}; {refit})")
    return impact, tuple(tradeoffs)


GENERATOR = Generator(
    id="drain-node",
    kind=DRAIN_NODE,
    title="Drain a node with a critical Xid",
    rules=("xid",),
    doc=(
        "For a node with an `xid` finding whose codes include a critical, non-application "
        "Xid (79, 48, 64, 74, 95, 119, ...): cordon + drain with the reason "
        "`gpuobs: Xid <code> (<meaning>) on <node>/<gpu>` (Kubernetes `spec.unschedulable` + "
        "eviction; Slurm `State=DRAIN Reason=...`). Application-level Xids (13, 31, 43) alone "
        "never drain a node."
    ),
    generate=generate,
)
