"""A scheduler's queue hierarchy in the fairness maths (issue #13): Volcano's and KAI's parent
queues and Kueue's ClusterQueue -> Cohort tree (``scheduler.queue_parents``), each Kueue Cohort's
``fairSharing.weight`` (``scheduler.cohorts``); the queues filled down it
(:func:`~diagnosis.core.water_fill.tree_water_fill`) and the tree as rows for the report. Pure."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from diagnosis.core.water_fill import tree_water_fill

if TYPE_CHECKING:
    from diagnosis.core.snapshot import ClusterSnapshot

_EPS = 1e-9


def queue_tree(scheduler: Mapping[str, Any]) -> tuple[dict[str, str], dict[str, float]]:
    """(parent of each queue or cohort, each cohort's weight) from the snapshot's scheduler
    section (``queue_parents``: Volcano's and KAI's parent queues, Kueue's ClusterQueue ->
    Cohort; ``cohorts``: each Kueue Cohort's ``fairSharing.weight`` and parent); empty when it
    reports no hierarchy. Values that are not names or numbers are ignored (unknown is not
    assumed)."""
    parents = scheduler.get("queue_parents") or {}
    cohorts = scheduler.get("cohorts") or {}
    parent_of: dict[str, str] = {}
    group_weight: dict[str, float] = {}
    if isinstance(cohorts, Mapping):
        for name, entry in cohorts.items():
            if not isinstance(entry, Mapping):
                continue
            weight = entry.get("weight")
            if isinstance(weight, int | float) and not isinstance(weight, bool) and weight >= 0:
                group_weight[str(name)] = float(weight)
            if isinstance(entry.get("parent"), str) and entry["parent"]:
                parent_of[str(name)] = entry["parent"]
    if isinstance(parents, Mapping):
        parent_of.update({str(k): v for k, v in parents.items() if isinstance(v, str) and v})
    return parent_of, group_weight


def job_queue_names(jobs: pd.DataFrame) -> np.ndarray:
    """Each job's queue as the scheduler sees it: its queue, else its tenant, else ``default``
    (the simulator's rule)."""
    queue = jobs["queue"].astype(object)
    tenant = jobs["tenant"].astype(object)
    named = queue.where(queue.notna(), tenant)
    return named.where(named.notna(), "default").astype(str).to_numpy()


@dataclass(frozen=True)
class TreeNode:
    """One queue or cohort of a scheduler's hierarchy with its share, in GPUs, at one moment:
    its fair GPUs are what :func:`tree_water_fill` gives its subtree."""

    name: str
    kind: str  # "cohort" (Kueue) or "queue"
    parent: str | None
    depth: int
    weight: float  # its entitlement at its level (deserved GPUs or weight; a cohort's weight)
    tenant: str | None  # a leaf queue's tenant
    demand_gpus: float
    fair_gpus: float
    held_gpus: float

    @property
    def ratio(self) -> float | None:
        return self.held_gpus / self.fair_gpus if self.fair_gpus > _EPS else None


@dataclass(frozen=True)
class QueueFill:
    """The snapshot's queues filled through its hierarchy: each leaf queue's demand, held GPUs,
    entitlement and fair GPUs, and the tree they hang in."""

    parent_of: Mapping[str, str]
    group_weight: Mapping[str, float]
    demand: Mapping[str, float]
    held: Mapping[str, float]
    entitlement: Mapping[str, float]
    fair: Mapping[str, float]
    tenant_demand: pd.Series  # (queue, tenant) -> GPUs demanded

    def tenant_fair(self) -> dict[str, float]:
        """Each tenant's fair GPUs: its queues' (a queue shared by tenants split by demand)."""
        out: dict[str, float] = {}
        for (queue, tenant), wanted in self.tenant_demand.items():
            total = self.demand.get(queue, 0.0)
            if total > _EPS:
                out[str(tenant)] = out.get(str(tenant), 0.0) + self.fair.get(queue, 0.0) * (
                    float(wanted) / total
                )
        return out


def fill_queues(
    snapshot: ClusterSnapshot,
    demand_gpus: pd.Series,
    held_gpus: pd.Series,
    tenant_of: pd.Series,
    usable: float,
) -> QueueFill | None:
    """The queues of a snapshot whose scheduler reports a hierarchy, filled through it
    (:func:`tree_water_fill`; entitlement: ``deserved_gpus`` when every queue with demand sets
    one, else weights, an unlisted queue weight 1); None without a hierarchy."""
    parent_of, group_weight = queue_tree(snapshot.scheduler)
    if not parent_of:
        return None
    jobs = snapshot.jobs
    frame = pd.DataFrame(
        {
            "queue": job_queue_names(jobs),
            "tenant": tenant_of.reindex(jobs.index).to_numpy(dtype=object),
            "demand": demand_gpus.reindex(jobs.index, fill_value=0).to_numpy(float),
            "held": held_gpus.reindex(jobs.index, fill_value=0).to_numpy(float),
        }
    )
    per_queue = frame.groupby("queue", sort=True)[["demand", "held"]].sum()
    listed = snapshot.queues
    names = sorted(set(listed.index.astype(str)) | set(per_queue.index.astype(str)))
    demand = {n: float(per_queue["demand"].get(n, 0.0)) for n in names}
    held = {n: float(per_queue["held"].get(n, 0.0)) for n in names}
    deserved = listed["deserved_gpus"].to_dict()
    weights = listed["weight"].to_dict()
    wanting = [n for n in names if demand[n] > 0]
    by_deserved = bool(wanting) and all(
        not pd.isna(deserved.get(n)) and float(deserved.get(n) or 0) > 0 for n in wanting
    )
    entitlement = {
        n: float(deserved.get(n) or 0.0) if by_deserved else float(weights.get(n, 1.0))
        for n in names
    }
    fair = tree_water_fill(usable, entitlement, demand, parent_of, group_weight)
    wanted = frame[frame["demand"] > 0].groupby(["queue", "tenant"], sort=True)["demand"].sum()
    return QueueFill(parent_of, group_weight, demand, held, entitlement, fair, wanted)


def fairness_tree(fill: QueueFill, tenants: Mapping[str, str | None]) -> tuple[TreeNode, ...]:
    """The hierarchy as rows, depth first from the top level (names in order): each node's
    weight at its level, and its subtree's demand, fair and held GPUs."""
    leaves = set(fill.demand)
    nodes = leaves | set(fill.parent_of) | set(fill.parent_of.values())

    def chain(name: str) -> list[str]:
        seen = [name]
        while fill.parent_of.get(seen[-1]) and fill.parent_of[seen[-1]] not in seen:
            seen.append(fill.parent_of[seen[-1]])
        return seen

    totals = {n: [0.0, 0.0, 0.0] for n in nodes}
    for leaf in leaves:
        for node in chain(leaf):
            totals[node][0] += fill.demand.get(leaf, 0.0)
            totals[node][1] += fill.fair.get(leaf, 0.0)
            totals[node][2] += fill.held.get(leaf, 0.0)
    children: dict[str | None, list[str]] = {}
    for node in sorted(nodes):
        parent = fill.parent_of.get(node)
        children.setdefault(parent if parent in nodes and parent != node else None, []).append(node)
    rows: list[TreeNode] = []

    def walk(parent: str | None, depth: int, seen: frozenset[str]) -> None:
        for node in children.get(parent, ()):
            if node in seen:
                continue
            cohort = node in fill.group_weight and node not in fill.entitlement
            weight = fill.entitlement.get(node) or fill.group_weight.get(node, 1.0)
            demand, fair, held = totals[node]
            rows.append(
                TreeNode(
                    name=node,
                    kind="cohort" if cohort else "queue",
                    parent=parent,
                    depth=depth,
                    weight=float(weight),
                    tenant=tenants.get(node) if node in leaves else None,
                    demand_gpus=demand,
                    fair_gpus=fair,
                    held_gpus=held,
                )
            )
            walk(node, depth + 1, seen | {node})

    walk(None, 0, frozenset())
    return tuple(rows)
