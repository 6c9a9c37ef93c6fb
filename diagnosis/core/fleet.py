"""The fleet: figures over several clusters (docs/fairness.md "The fleet"), as a pure core.

- :func:`fleet_tenants`: a tenant present on several clusters (the same tenant name) is one
  row: its GPU-hours held, fair GPU-hours, demand and cost summed over its clusters, each
  cluster's part kept; money summed unrounded and rounded once (``diagnosis.core.cost``), and
  a tenant with a part on an unpriced cluster has no total cost (a sum that leaves a cluster
  out would look complete).
- :func:`top_waste`: the bucket of a cluster's GPU-hours that lost the most.

Inputs are the sums of the rollup columns (``diagnosis.core.fairness.TENANT_SUMS``), per
``(cluster, tenant)``; the Django side reads them (diagnosis/reports/fleet_report.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from diagnosis.core.cost import CLUSTER_WASTE_BUCKETS, TENANT_WASTE_BUCKETS, Money, Pricing
from diagnosis.core.fairness import BUCKET_COLUMNS
from diagnosis.core.numbers import json_number


@dataclass(frozen=True)
class TenantPart:
    """One cluster's part of a fleet tenant."""

    cluster: str
    allocated_gpu_hours: float
    fair_gpu_hours: float
    demand_gpu_hours: float
    wasted_gpu_hours: float
    cost: Decimal | None  # unrounded; None when the cluster is not priced
    wasted_cost: Decimal | None
    currency: str

    @property
    def ratio(self) -> float | None:
        return _ratio(self.allocated_gpu_hours, self.fair_gpu_hours)

    @property
    def money(self) -> Money | None:
        return Money.of(self.cost, self.currency)

    @property
    def wasted_money(self) -> Money | None:
        return Money.of(self.wasted_cost, self.currency)

    def as_dict(self) -> dict[str, Any]:
        return {
            "cluster": self.cluster,
            "allocated_gpu_hours": json_number(self.allocated_gpu_hours),
            "fair_gpu_hours": json_number(self.fair_gpu_hours),
            "demand_gpu_hours": json_number(self.demand_gpu_hours),
            "wasted_gpu_hours": json_number(self.wasted_gpu_hours),
            "ratio": json_number(self.ratio),
            "cost": _text(self.money),
            "wasted_cost": _text(self.wasted_money),
        }


@dataclass(frozen=True)
class FleetTenant:
    tenant: str
    parts: tuple[TenantPart, ...]  # by cluster name

    @property
    def clusters(self) -> tuple[str, ...]:
        return tuple(p.cluster for p in self.parts)

    @property
    def allocated_gpu_hours(self) -> float:
        return sum(p.allocated_gpu_hours for p in self.parts)

    @property
    def fair_gpu_hours(self) -> float:
        return sum(p.fair_gpu_hours for p in self.parts)

    @property
    def demand_gpu_hours(self) -> float:
        return sum(p.demand_gpu_hours for p in self.parts)

    @property
    def wasted_gpu_hours(self) -> float:
        return sum(p.wasted_gpu_hours for p in self.parts)

    @property
    def ratio(self) -> float | None:
        return _ratio(self.allocated_gpu_hours, self.fair_gpu_hours)

    @property
    def cost(self) -> Money | None:
        return _sum([p.cost for p in self.parts], self.parts)

    @property
    def wasted_cost(self) -> Money | None:
        return _sum([p.wasted_cost for p in self.parts], self.parts)

    def as_dict(self) -> dict[str, Any]:
        return {
            "tenant": self.tenant,
            "clusters": list(self.clusters),
            "allocated_gpu_hours": json_number(self.allocated_gpu_hours),
            "fair_gpu_hours": json_number(self.fair_gpu_hours),
            "demand_gpu_hours": json_number(self.demand_gpu_hours),
            "wasted_gpu_hours": json_number(self.wasted_gpu_hours),
            "ratio": json_number(self.ratio),
            "cost": _text(self.cost),
            "wasted_cost": _text(self.wasted_cost),
            "parts": [p.as_dict() for p in self.parts],
        }


def _ratio(numerator: float, denominator: float) -> float | None:
    return numerator / denominator if denominator > 1e-9 else None


def _text(money: Money | None) -> str | None:
    return money.as_text() if money is not None else None


def _sum(amounts: list[Decimal | None], parts: tuple[TenantPart, ...]) -> Money | None:
    if not parts or any(a is None for a in amounts):
        return None
    return Money.of(sum((a for a in amounts if a is not None), Decimal(0)), parts[0].currency)


def fleet_tenants(
    sums: Mapping[tuple[str, str], Mapping[str, float]], pricing: Mapping[str, Pricing]
) -> tuple[FleetTenant, ...]:
    """One row per tenant name, by name, from ``sums[(cluster, tenant)]`` (rollup column sums
    in GPU-seconds) and each cluster's ``pricing``."""
    parts: dict[str, list[TenantPart]] = {}
    for (cluster, tenant), row in sorted(sums.items()):
        price = pricing.get(cluster) or Pricing("", None)
        allocated = float(row.get("allocated_gpu_s") or 0.0) / 3600
        wasted = sum(float(row.get(BUCKET_COLUMNS[b]) or 0.0) for b in TENANT_WASTE_BUCKETS)
        wasted /= 3600
        parts.setdefault(tenant, []).append(
            TenantPart(
                cluster=cluster,
                allocated_gpu_hours=allocated,
                fair_gpu_hours=float(row.get("fair_gpu_s") or 0.0) / 3600,
                demand_gpu_hours=float(row.get("demanded_gpu_s") or 0.0) / 3600,
                wasted_gpu_hours=wasted,
                cost=price.exact(allocated),
                wasted_cost=price.exact(wasted),
                currency=price.currency,
            )
        )
    return tuple(FleetTenant(name, tuple(rows)) for name, rows in sorted(parts.items()))


@dataclass(frozen=True)
class WasteBucket:
    bucket: str
    gpu_hours: float
    share: float | None  # of the cluster's GPU-hours
    cost: Money | None


def top_waste(sums: Mapping[str, float], pricing: Pricing) -> WasteBucket | None:
    """The waste bucket (every bucket but allocated-busy) with the most GPU-hours in ``sums``
    (whole-cluster rollup column sums, GPU-seconds); None when none lost any."""
    hours = {b: float(sums.get(BUCKET_COLUMNS[b]) or 0.0) / 3600 for b in CLUSTER_WASTE_BUCKETS}
    bucket = max(CLUSTER_WASTE_BUCKETS, key=lambda b: hours[b])  # ties: the first in order
    if hours[bucket] <= 0:
        return None
    capacity = float(sums.get("gpu_s") or 0.0) / 3600
    return WasteBucket(
        bucket, hours[bucket], _ratio(hours[bucket], capacity), pricing.cost(hours[bucket])
    )
