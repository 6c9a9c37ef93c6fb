"""Max-min fair division by water-filling (docs/fairness.md), flat and down a hierarchy: the
manager's fairness report, the queue-weight recommender and the queue pages divide capacity with
these same functions (pure, no I/O)."""

from __future__ import annotations

import itertools
from collections.abc import Mapping

_EPS = 1e-9


def _weighted_fill(
    capacity: float, weights: Mapping[str, float], demand: Mapping[str, float]
) -> tuple[dict[str, float], float]:
    """Max-min fill of ``capacity`` in proportion to ``weights`` (all > 0), each capped at its
    demand: there is a level L such that each gets ``min(demand, L * weight)``. Returns the
    shares and what is left over (0 unless every demand is met).

    Tenants are taken by demand per unit of weight, smallest first: while the smallest fits
    under the level the rest would give, it takes its whole demand; the first that does not fit
    is above the level, and so is everyone after it, so they share what is left by weight.
    """
    order = sorted(weights, key=lambda n: (demand[n] / weights[n], n))
    # Weight of each tenant and all after it, summed from the end (sums of positive numbers:
    # no cancellation, however unequal the weights).
    suffix = list(itertools.accumulate(weights[n] for n in reversed(order)))[::-1]
    share = dict.fromkeys(weights, 0.0)
    left = capacity
    for position, name in enumerate(order):
        if left <= 0:
            break
        total = suffix[position]
        if demand[name] <= left * weights[name] / total:  # under the level: fully served
            share[name] = float(demand[name])
            left -= share[name]
            continue
        for other in order[position:]:
            share[other] = min(float(demand[other]), left * weights[other] / total)
        return share, 0.0
    return share, max(left, 0.0)


def water_fill(
    capacity: float, entitlement: Mapping[str, float], demand: Mapping[str, float]
) -> dict[str, float]:
    """Max-min fair division of ``capacity`` in proportion to ``entitlement``, each share capped
    at its ``demand`` (what a capped tenant does not take is shared out again among the others).

    Every key of ``demand`` gets a share. Those with demand but no entitlement (0 or missing)
    share what the entitled ones leave, equally. The shares never exceed the demands and sum to
    at most ``capacity``.
    """
    fair = dict.fromkeys(demand, 0.0)
    left = float(max(capacity, 0.0))
    wanting = [n for n in demand if demand[n] > _EPS]
    entitled = {n: float(entitlement[n]) for n in wanting if entitlement.get(n, 0.0) > 0}
    unentitled = {n: 1.0 for n in wanting if n not in entitled}
    for weights in (entitled, unentitled):
        if weights and left > _EPS:
            share, left = _weighted_fill(left, weights, demand)
            fair.update(share)
    return fair


def tree_water_fill(
    capacity: float,
    entitlement: Mapping[str, float],
    demand: Mapping[str, float],
    parent_of: Mapping[str, str],
    group_weight: Mapping[str, float] | None = None,
) -> dict[str, float]:
    """:func:`water_fill` down a hierarchy (Volcano's and KAI's parent queues, Kueue's cohorts):
    the capacity is divided among the top-level groups by their entitlement, each group's share
    among its children, and so on down to the leaves of ``demand``.

    ``parent_of`` maps a leaf or a group to its parent group (absent: top level). A group's
    entitlement is ``entitlement`` when it has one (a listed parent queue), else
    ``group_weight`` (a cohort's weight), else 1; its demand is its leaves' demand. A cycle in
    ``parent_of`` is cut where it closes. Without parents this is :func:`water_fill`.
    """
    group_weight = group_weight or {}

    def chain(name: str) -> list[str]:
        seen = [name]
        while parent_of.get(seen[-1]) and parent_of[seen[-1]] not in seen:
            seen.append(parent_of[seen[-1]])
        return seen

    children: dict[str | None, set[str]] = {}
    subtree_demand: dict[str, float] = {}
    for leaf, wanted in demand.items():
        path = chain(leaf)
        for node in path:
            subtree_demand[node] = subtree_demand.get(node, 0.0) + float(wanted)
        for child, parent in zip(path, [*path[1:], None], strict=True):
            children.setdefault(parent, set()).add(child)

    def weight(node: str) -> float:
        if entitlement.get(node, 0.0) > 0:
            return float(entitlement[node])
        return float(group_weight.get(node, 1.0))

    fair = dict.fromkeys(demand, 0.0)

    def divide(group: str | None, amount: float) -> None:
        members = sorted(children.get(group, ()))
        own = {m: subtree_demand[m] for m in members}
        shares = water_fill(amount, {m: weight(m) for m in members}, own)
        for member in members:
            if member in children:
                leaf_part = 0.0
                if member in demand:  # a group that also holds jobs of its own
                    leaf_part = min(shares[member], float(demand[member]))
                    fair[member] = leaf_part
                divide(member, shares[member] - leaf_part)
            else:
                fair[member] = shares[member]

    divide(None, float(max(capacity, 0.0)))
    return fair
