"""The fleet's cross-cluster tenant report (docs/fairness.md "The fleet"): for every cluster a
reader may see, each tenant's GPU-hours held, fair GPU-hours, demand and cost over a period,
summed per tenant name across clusters with each cluster's part (``diagnosis.core.fleet``).

Read from the rollups only, in two grouped queries whatever the number of clusters: the whole
hours of the period from the hourly rows (one per tenant and hour), its partial first and last
hours from the per-cycle rows, as the fairness report does. Scoped as everywhere: a manager
gets only the tenants they manage (``diagnosis.access.fleet_tenants_for_user``); no other
tenant's name is read, let alone shown.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db.models import Max, Q, Sum
from django.utils import timezone

from diagnosis.access import clusters_for_user, fleet_tenants_for_user
from diagnosis.core import fairness
from diagnosis.core.cost import Money, Pricing, total
from diagnosis.core.fleet import FleetTenant, fleet_tenants
from diagnosis.core.vocabulary import format_time
from diagnosis.models import Cluster, PoolRollup, TenantRollup, TenantRollupHour
from diagnosis.reports.fairness_report import RECENT_DATA, whole_hours
from diagnosis.reports.period import ReportPeriod
from diagnosis.reports.pricing import pricings
from diagnosis.roles import User, is_tenant_scoped

FLEET_FORMAT = "gpuobs.fleet-tenants/v1"
SUMS = ("allocated_gpu_s", "fair_gpu_s", "demanded_gpu_s", *fairness.BUCKET_COLUMNS.values())
TENANT_COLUMNS = tuple(c for c in SUMS if c in fairness.TENANT_SUMS)


@dataclass(frozen=True)
class FleetTenantReport:
    period: ReportPeriod
    generated_at: datetime
    tenant_scoped: bool
    clusters: tuple[str, ...]  # the clusters read, by name
    tenants: tuple[FleetTenant, ...]
    pricing: dict[str, Pricing]  # cluster name -> its pricing

    @property
    def priced(self) -> bool:
        return any(p.priced for p in self.pricing.values())

    def total_cost(self) -> Money | None:
        parts = [part.cost for row in self.tenants for part in row.parts]
        currency = next(iter(self.pricing.values())).currency if self.pricing else ""
        return total(parts, currency)

    def as_dict(self) -> dict[str, Any]:
        money = self.total_cost()
        return {
            "format": FLEET_FORMAT,
            **self.period.as_dict(),
            "generated_at": format_time(self.generated_at),
            "scope": {"tenant_scoped": self.tenant_scoped},
            "clusters": list(self.clusters),
            "pricing": {name: p.as_dict() for name, p in sorted(self.pricing.items())},
            "cost": money.as_text() if money is not None else None,
            "tenants": [row.as_dict() for row in self.tenants],
        }


def fleet_default_end(clusters: Iterable[Cluster], now: datetime | None = None) -> datetime:
    """Where a preset period ends: the newest rollup of the clusters when it is recent or
    ahead of our clock (as ``fairness_report.default_end`` for one cluster), else now."""
    now = now or timezone.now()
    ids = [c.pk for c in clusters]
    latest = PoolRollup.objects.filter(cluster_id__in=ids, pool="").aggregate(m=Max("as_of"))["m"]
    return latest if latest is not None and latest >= now - RECENT_DATA else now


def _visible(user: User, clusters: list[Cluster]) -> Q | None:
    """The (cluster, tenant name) pairs a tenant-scoped reader may see, as a filter; None for
    a reader of every tenant."""
    if not is_tenant_scoped(user):
        return None
    pairs = fleet_tenants_for_user(user).values_list("cluster_id", "name")
    where = Q(pk__in=[])
    for cluster_id, name in pairs:
        where |= Q(cluster_id=cluster_id, tenant_name=name)
    return where


def _sums(
    clusters: list[Cluster], period: ReportPeriod, visible: Q | None
) -> dict[tuple[int, str], dict[str, float]]:
    in_period = Q(as_of__gt=period.start, as_of__lte=period.end)
    hours = whole_hours(period)
    if hours is not None:
        in_period &= Q(as_of__lt=hours[0]) | Q(as_of__gte=hours[1])
    queries = [(TenantRollup, in_period)]
    if hours is not None:
        queries.append((TenantRollupHour, Q(as_of__gte=hours[0], as_of__lt=hours[1])))
    out: dict[tuple[int, str], dict[str, float]] = {}
    for model, where in queries:
        rows = model.objects.filter(where, cluster_id__in=[c.pk for c in clusters])
        if visible is not None:
            rows = rows.filter(visible)
        grouped = (
            rows.values("cluster_id", "tenant_name")
            .annotate(**{column: Sum(column) for column in TENANT_COLUMNS})
            .order_by()
        )
        for row in grouped:
            key = (row["cluster_id"], row["tenant_name"])
            into = out.setdefault(key, dict.fromkeys(TENANT_COLUMNS, 0.0))
            for column in TENANT_COLUMNS:
                into[column] += float(row[column] or 0.0)
    return out


def build_fleet_tenant_report(
    user: User, period: ReportPeriod, *, now: datetime | None = None
) -> FleetTenantReport:
    """Every tenant the reader may see, over every cluster they may read, in ``period``."""
    clusters = list(clusters_for_user(user).order_by("name"))
    names = {c.pk: c.name for c in clusters}
    sums = _sums(clusters, period, _visible(user, clusters))
    by_name = {(names[cid], tenant): row for (cid, tenant), row in sums.items()}
    prices = {names[cid]: p for cid, p in pricings(clusters).items()}
    return FleetTenantReport(
        period=period,
        generated_at=now or timezone.now(),
        tenant_scoped=is_tenant_scoped(user),
        clusters=tuple(names.values()),
        tenants=fleet_tenants(by_name, prices),
        pricing=prices,
    )
