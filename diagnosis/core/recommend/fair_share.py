"""Per-queue fair share of a snapshot's GPUs, for the queue-weight generator (docs/fairness.md,
applied to queues, whose weight is what a scheduler lets us change).

- **capacity**: usable GPUs (ready node, healthy GPU);
- **entitlement** of a queue: its ``deserved_gpus`` when every queue with demand sets one (> 0),
  else its ``weight`` (a job whose queue the snapshot does not list counts in a queue of weight
  1, as Volcano's default queue and the simulator have it);
- **demand**: GPUs its running and pending jobs hold plus the GPUs its pending jobs still ask;
- **fair GPUs**: max-min water-filling of the capacity over the queues with demand, in
  proportion to entitlement, each capped at its demand (what a capped queue does not take is
  shared out again among the others);
- **hierarchy**: where the snapshot's scheduler reports parents (``scheduler.queue_parents``:
  Volcano's and KAI's parent queues, Kueue's ClusterQueue -> Cohort; ``scheduler.cohorts``:
  each cohort's weight and parent), the water-filling runs down the tree
  (:func:`~diagnosis.core.water_fill.tree_water_fill`): a tenant's subtree gets its share at each
  level, then divides it among its children;
- **held**: GPUs its jobs hold now; **ratio** = held / fair GPUs (None when its fair share is 0).

A small pure helper with a narrow interface (:func:`queue_shares`); the water-filling itself is
the fairness report's (:func:`diagnosis.core.water_fill.water_fill`), so recommendations and the
manager's report divide capacity the same way.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from diagnosis.core.queue_hierarchy import job_queue_names, queue_tree
from diagnosis.core.rules.facts import SnapshotFacts
from diagnosis.core.snapshot import ClusterSnapshot
from diagnosis.core.vocabulary import LIVE_JOB_STATES
from diagnosis.core.water_fill import tree_water_fill, water_fill

__all__ = ["FairShares", "QueueShare", "job_queue_names", "queue_shares", "queue_tree"]

_EPS = 1e-9


@dataclass(frozen=True)
class QueueShare:
    queue: str
    tenant: str | None
    listed: bool
    weight: float
    deserved_gpus: float | None
    entitlement: float
    held_gpus: int
    pending_gpus: int
    demand_gpus: int
    fair_gpus: float
    oldest_pending_wait_s: float | None

    @property
    def ratio(self) -> float | None:
        return self.held_gpus / self.fair_gpus if self.fair_gpus > _EPS else None


@dataclass(frozen=True)
class FairShares:
    capacity_gpus: int
    basis: str  # "deserved" or "weight"
    queues: Mapping[str, QueueShare]
    parent_of: Mapping[str, str] = field(default_factory=dict)  # queue/cohort -> parent
    group_weight: Mapping[str, float] = field(default_factory=dict)  # cohort -> weight

    def ancestors(self, node: str) -> list[str]:
        """The node's parents, nearest first (a cycle is cut where it closes)."""
        chain: list[str] = []
        up = self.parent_of.get(node)
        while up is not None and up != node and up not in chain:
            chain.append(up)
            up = self.parent_of.get(up)
        return chain

    def knob(self, queue: str) -> str:
        """Where a weight change moves the queue's share: the queue itself when a sibling under
        its parent also wants GPUs; else (alone there) the nearest ancestor with a demanding
        sibling, as its share is decided at that level. The queue itself without a hierarchy."""
        wanting = [q.queue for q in self.with_demand()]
        nodes = set(self.queues) | set(self.parent_of) | set(self.parent_of.values())

        def wants(node: str) -> bool:
            return any(leaf == node or node in self.ancestors(leaf) for leaf in wanting)

        node, visited = queue, {queue}
        while True:
            parent = self.parent_of.get(node)
            if parent is None or parent in visited:
                return node
            siblings = [n for n in nodes if n != node and self.parent_of.get(n) == parent]
            if any(wants(s) for s in siblings):
                return node
            visited.add(parent)
            node = parent

    def target_share(self, queue: str) -> float:
        """The queue's fair share of what is allocated: its fair GPUs over all queues' fair GPUs
        (0 for an unknown queue). The impact compares a queue's share of the allocated
        GPU-seconds with this."""
        entry = self.queues.get(queue)
        total = sum(q.fair_gpus for q in self.queues.values())
        if entry is None or total <= 0:
            return 0.0
        return entry.fair_gpus / total

    def with_demand(self) -> list[QueueShare]:
        return [q for q in self.queues.values() if q.demand_gpus > 0]


def queue_shares(snapshot: ClusterSnapshot, facts: SnapshotFacts | None = None) -> FairShares:
    """Every queue's demand, held GPUs and fair share in ``snapshot`` (see the module doc)."""
    facts = facts or SnapshotFacts(snapshot)
    jobs = snapshot.jobs
    live = jobs[jobs["state"].isin(LIVE_JOB_STATES)]
    queue_of = job_queue_names(live)
    held = facts.job_held_gpus.reindex(live.index).to_numpy()
    request = facts.job_requests.reindex(live.index).to_numpy()
    pending = (live["state"] == "pending").to_numpy()
    still_asked = np.where(pending, np.maximum(request - held, 0), 0)
    waits = facts.waits_s.reindex(live.index).to_numpy()

    frame = pd.DataFrame(
        {"queue": queue_of, "held": held, "asked": still_asked, "wait": np.where(pending, waits, 0)}
    )
    per_queue = frame.groupby("queue", sort=True).agg(
        held=("held", "sum"), asked=("asked", "sum"), wait=("wait", "max")
    )
    listed = snapshot.queues
    names = sorted(set(listed.index) | set(per_queue.index))
    queue_demand = (per_queue["held"] + per_queue["asked"]).to_dict()
    listed_weight = listed["weight"].to_dict()
    listed_deserved = listed["deserved_gpus"].to_dict()
    listed_tenant = listed["tenant"].to_dict()
    demand = {n: float(queue_demand[n]) if n in queue_demand else 0 for n in names}
    weights = {n: float(listed_weight[n]) if n in listed_weight else 1.0 for n in names}
    deserved = {
        n: float(listed_deserved[n])
        for n in names
        if n in listed_deserved and not pd.isna(listed_deserved[n])
    }
    wanting = [n for n in names if demand[n] > 0]
    basis = "deserved" if wanting and all(deserved.get(n, 0) > 0 for n in wanting) else "weight"
    entitlement = deserved if basis == "deserved" else weights
    capacity = int(facts.gpu_state["usable"].sum())
    parent_of, group_weight = queue_tree(snapshot.scheduler)
    if parent_of:
        fair = tree_water_fill(capacity, entitlement, demand, parent_of, group_weight)
    else:
        fair = water_fill(capacity, entitlement, demand)

    out: dict[str, QueueShare] = {}
    for n in names:
        row = per_queue.loc[n] if n in per_queue.index else None
        asked = int(row["asked"]) if row is not None else 0
        tenant = listed_tenant.get(n)
        out[n] = QueueShare(
            queue=n,
            tenant=None if tenant is None or pd.isna(tenant) else str(tenant),
            listed=n in listed.index,
            weight=weights[n],
            deserved_gpus=deserved.get(n),
            entitlement=float(entitlement.get(n, 0.0)),
            held_gpus=int(row["held"]) if row is not None else 0,
            pending_gpus=asked,
            demand_gpus=int(demand[n]),
            fair_gpus=float(fair.get(n, 0.0)),
            oldest_pending_wait_s=float(row["wait"]) if row is not None and asked > 0 else None,
        )
    return FairShares(
        capacity_gpus=capacity,
        basis=basis,
        queues=out,
        parent_of=parent_of,
        group_weight=group_weight,
    )
