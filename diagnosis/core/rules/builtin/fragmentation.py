"""``fragmentation``: pending jobs that fit in a pool's free GPUs, but not on any set of its nodes.

A pending job with no allocation is *fragmentation-blocked* when it is not placeable (its pods do
not fit on the free GPUs node by node), yet the free GPUs of its pool add up to at least its
request, and its queue's capability would not be exceeded by admitting it (GPUs the queue's jobs
hold now + the request <= ``capability_gpus``; see
:attr:`~diagnosis.core.rules.facts.SnapshotFacts.pending_placement`). The rule fires once per
pool in which such a job has waited at least ``min_wait``.

Jobs with a null pool may use every node; they are judged against the whole cluster and reported
under the cluster's only pool, or under ``cluster:<name>`` when it has several pools.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from diagnosis.core.rules.base import Judgement, Rule, RuleDoc, Threshold
from diagnosis.core.rules.facts import SnapshotFacts
from diagnosis.core.snapshot import ClusterSnapshot
from diagnosis.core.text import gettext_noop, message

MAX_LISTED_JOBS = 50


def frag_ratio(free: np.ndarray, size: int) -> float:
    """``1 - sum_n s*floor(free(n)/s) / sum_n free(n)``: the share of the free GPUs that pods of
    ``size`` GPUs cannot use (0 when nothing is free)."""
    free = np.asarray(free, dtype=np.int64)
    total = int(free.sum())
    if total <= 0 or size <= 0:
        return 0.0
    usable = int((size * np.floor_divide(free, size)).sum())
    return 1.0 - usable / total


def fgd_fragment_gpus(free: np.ndarray, sizes: np.ndarray, popularity: np.ndarray) -> float:
    """The FGD fragmentation measure for whole GPUs (Weng et al., ATC'23).

    For a node n and a pod shape of s GPUs: when the node can host the pod (``free(n) >= s``)
    no free GPU is fragment (whole GPUs leave no too-small slices), otherwise all of its free
    GPUs are. ``F_n = sum_m p_m * F_n(m)``; the pool's fragmentation is ``sum_n F_n``.
    """
    free = np.asarray(free, dtype=np.int64)
    sizes = np.asarray(sizes, dtype=np.int64)
    popularity = np.asarray(popularity, dtype=float)
    if not len(sizes) or not len(free):
        return 0.0
    distinct, counts = np.unique(free, return_counts=True)
    # per distinct free count: the popularity of the shapes it cannot host
    too_big = (sizes[None, :] > distinct[:, None]) @ popularity
    return float((distinct * counts * too_big).sum())


def request_mix(jobs: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """The GPU pod shapes of ``jobs`` (all states) and their popularity by number of jobs."""
    sizes = jobs["gpus_per_pod"].to_numpy().astype(np.int64)
    sizes = sizes[sizes > 0]
    if not len(sizes):
        return np.zeros(0, np.int64), np.zeros(0)
    shapes, counts = np.unique(sizes, return_counts=True)
    return shapes, counts / counts.sum()


def evaluate(
    snapshot: ClusterSnapshot, thresholds: Mapping[str, Any], facts: SnapshotFacts
) -> Judgement:
    blocked = facts.fragmentation_blocked
    blocked = blocked[blocked["wait_s"].to_numpy() >= thresholds["min_wait"]]
    if blocked.empty:
        return Judgement()
    nodes = snapshot.nodes
    free = facts.free_per_node.reindex(nodes.index, fill_value=0).to_numpy()
    node_pool = nodes["pool"].to_numpy()
    job_scope = facts.placement_scope(snapshot.jobs["pool"])
    pod_sizes = snapshot.jobs[["gpus_per_pod"]]  # all request_mix reads of the jobs
    findings = []
    scopes = blocked["scope"].astype(object).where(blocked["scope"].notna(), None)
    for scope, group in blocked.groupby(scopes.to_numpy(), dropna=False, sort=True):
        whole_cluster = pd.isna(scope)
        in_scope = np.ones(len(nodes), bool) if whole_cluster else node_pool == scope
        scope_free = free[in_scope]
        capacity = int(nodes["gpus"].to_numpy()[in_scope].sum())
        mix_jobs = pod_sizes if whole_cluster else pod_sizes[job_scope == scope]
        shapes, popularity = request_mix(mix_jobs)
        fgd = fgd_fragment_gpus(scope_free, shapes, popularity)
        group = group.sort_values(["wait_s", "request"], ascending=False, kind="stable")
        demand = int(group["request"].sum())
        largest = int(group["gpus_per_pod"].max())
        ratio = frag_ratio(scope_free, largest)
        share = demand / capacity if capacity else 1.0
        free_total = int(scope_free.sum())
        values, counts = np.unique(scope_free, return_counts=True)
        label = f"cluster {snapshot.cluster}" if whole_cluster else f"pool {scope}"
        evidence = {
            "pool": None if whole_cluster else str(scope),
            "pool_gpus": capacity,
            "free_gpus": free_total,
            "nodes": int(in_scope.sum()),
            "free_per_node_histogram": {
                str(int(v)): int(c) for v, c in zip(values, counts, strict=True)
            },
            "blocked_job_count": len(group),
            "blocked_gpus": demand,
            "blocked_share_of_pool": round(share, 4),
            "blocked_jobs": [
                {
                    "id": str(job_id),
                    "shape": f"{int(row.pods)}x{int(row.gpus_per_pod)}",
                    "pods": int(row.pods),
                    "gpus_per_pod": int(row.gpus_per_pod),
                    "request_gpus": int(row.request),
                    "wait_s": round(float(row.wait_s), 1),
                    "queue": None if pd.isna(row.queue) else str(row.queue),
                }
                for job_id, row in zip(
                    group.index[:MAX_LISTED_JOBS],
                    group.iloc[:MAX_LISTED_JOBS].itertuples(index=False),
                    strict=True,
                )
            ],
            "largest_blocked_pod_gpus": largest,
            "frag_ratio": round(ratio, 4),
            "fgd_fragment_gpus": round(fgd, 2),
            "fgd_fragment_pct": round(100.0 * fgd / capacity, 2) if capacity else 0.0,
            "fgd_shapes": [
                {"gpus_per_pod": int(s), "popularity": round(float(p), 4)}
                for s, p in zip(shapes, popularity, strict=True)
            ],
            "placement_policy": None if whole_cluster else snapshot.placement(str(scope)),
        }
        critical = share >= thresholds["critical_demand_frac"] - 1e-12  # float rounding
        subject = f"cluster:{snapshot.cluster}" if whole_cluster else f"pool:{scope}"
        # as the English summary always showed it: "Cluster x" / "Pool x", capitalized
        where_name = label.capitalize().split(" ", 1)[1]
        summary = message(
            gettext_noop(
                "%(where)s: %(jobs)s pending job(s) asking %(demand)s GPUs cannot be placed "
                "although %(free)s GPUs are free, scattered over %(nodes)s nodes (largest "
                "blocked pod %(largest)s GPUs, frag_ratio %(ratio)s)."
            ),
            where=message(gettext_noop("Cluster %(name)s"), name=where_name)
            if whole_cluster
            else message(gettext_noop("Pool %(name)s"), name=where_name),
            jobs=len(group),
            demand=demand,
            free=free_total,
            nodes=int((scope_free > 0).sum()),
            largest=largest,
            ratio=f"{ratio:.2f}",
        )
        findings.append(
            RULE.finding(subject, summary, evidence, severity="critical" if critical else None)
        )
    return Judgement(findings=tuple(findings))


RULE = Rule(
    id="fragmentation",
    title="Free GPUs too scattered for pending jobs",
    severity="warning",
    subject_kind="pool:",
    thresholds=(
        Threshold(
            "min_wait",
            600,
            "How long a fragmentation-blocked job must have waited before the pool is flagged.",
            unit="s",
        ),
        Threshold(
            "critical_demand_frac",
            0.10,
            "Blocked demand (GPUs asked by the flagged jobs), as a fraction of the pool's GPUs, "
            "from which the finding is critical.",
            maximum=1.0,
        ),
    ),
    doc=RuleDoc(
        detects=(
            "A pool in which some pending job with no allocation has waited at least `min_wait` "
            "although the pool's free GPUs add up to its request: the job is not *placeable* "
            "(for its `gpus_per_pod` = s, `sum over nodes of floor(free(n) / s) < pods`), and "
            "its queue's capability (if set) would not be exceeded by admitting it (GPUs the "
            "queue's jobs hold now + the request <= `capability_gpus`). Critical when the "
            "blocked demand is at least `critical_demand_frac` of the pool's GPUs. Jobs without "
            "a pool are judged against every node and reported under the cluster's only pool, "
            "or `cluster:<name>` when there are several."
        ),
        why=(
            "Free GPUs that no waiting job can use are paid for and idle, while the jobs wait: "
            "a spread placement policy leaves a few free GPUs on many nodes, and a job asking "
            "for whole 8-GPU nodes never starts. The FGD paper measured 7–13% of all GPUs "
            "fragmented under common policies on a real trace."
        ),
        fix=(
            "Switch the pool's GPU placement to binpack (Volcano: binpack plugin with a weight "
            "for `nvidia.com/gpu`; Kubernetes: `NodeResourcesFit` `MostAllocated`; Slurm: "
            "`CR_Pack_Nodes` / `LLN=NO`), so small jobs fill nodes before opening new ones. "
            "For a quick recovery, drain a few nearly empty nodes of their small jobs "
            "(preempt or migrate) so that whole nodes become free."
        ),
        evidence=(
            "`free_gpus`, `pool_gpus`; `free_per_node_histogram` (free GPUs on a node → number "
            "of nodes); `blocked_jobs` (id, shape `<pods>x<gpus_per_pod>`, pods, gpus_per_pod, "
            "request_gpus, wait_s, queue; "
            "longest wait first, at most 50) with `blocked_job_count`, `blocked_gpus` and "
            "`blocked_share_of_pool`; `frag_ratio` for the largest blocked pod size s: "
            "`1 - sum_n s*floor(free(n)/s) / sum_n free(n)`; `fgd_fragment_gpus` and "
            "`fgd_fragment_pct` — the FGD measure for the pool's request mix (`fgd_shapes`: "
            "GPUs per pod of the pool's jobs in any state, weighted by their share of jobs): a "
            "node's free GPUs count as fragment for a shape that does not fit on it; and the "
            "pool's `placement_policy` when the scheduler reports one."
        ),
        references=(
            "Weng et al., Beware of Fragmentation: Scheduling GPU-Sharing Workloads with "
            "Fragmentation Gradient Descent, USENIX ATC'23",
            "https://volcano.sh/en/docs/plugins/ (binpack)",
            "https://kubernetes.io/docs/concepts/scheduling-eviction/resource-bin-packing/",
        ),
    ),
    evaluate=evaluate,
    for_s=300,
    keep_firing_for_s=600,
)
