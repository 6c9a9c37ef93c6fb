"""The fleet page (docs/ui.md "The fleet"): every cluster the reader may see in one table --
GPUs, allocation, activity, the last hour's top waste bucket and its cost, open incidents,
stale data -- with the fleet's totals, and the cross-cluster tenant report
(diagnosis/reports/fleet_report.py) under it. Thin: the rows are the cluster list's
(:func:`diagnosis.pages.clusters.cluster_rows`), the waste comes from the whole-cluster rollups
of each cluster's last good hour (one grouped query), never from a snapshot.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any
from urllib.parse import urlencode

from django.db.models import Q, Sum
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.utils.translation import gettext
from django.views.decorators.http import require_safe

from diagnosis.access import clusters_for_user
from diagnosis.charts.gpu_hours import BUCKET_LABELS
from diagnosis.core import fairness
from diagnosis.core.cost import Money, Pricing, total
from diagnosis.core.fleet import WasteBucket, top_waste
from diagnosis.models import PoolRollup
from diagnosis.pages.clusters import ClusterRow, cluster_rows
from diagnosis.reports.fleet_report import build_fleet_tenant_report, fleet_default_end
from diagnosis.reports.period import PRESET_LABELS, PeriodError, ReportPeriod
from diagnosis.reports.pricing import pricings
from diagnosis.roles import User

HOUR = timedelta(hours=1)
WASTE_SUMS = (*fairness.BUCKET_COLUMNS.values(), "gpu_s")


@dataclass(frozen=True)
class FleetCluster:
    row: ClusterRow
    pricing: Pricing
    waste: WasteBucket | None  # the last good hour's top waste bucket

    @property
    def waste_label(self) -> str:
        return gettext(BUCKET_LABELS[self.waste.bucket]) if self.waste else ""

    def as_dict(self) -> dict[str, Any]:
        good, fresh = self.row.good, self.row.freshness
        waste = self.waste
        return {
            "cluster": self.row.cluster.name,
            "gpus": good.gpus if good else None,
            "allocated_gpus": good.allocated_gpus if good else None,
            "allocation_utilization": good.allocation_utilization if good else None,
            "activity_utilization": good.activity_utilization if good else None,
            "as_of": good.as_of.isoformat().replace("+00:00", "Z") if good else None,
            "stale": fresh.stale,
            "has_data": fresh.has_data,
            "open_incidents": self.row.open_incidents,
            "open_findings": self.row.open_findings,
            "top_waste": {
                "bucket": waste.bucket,
                "gpu_hours": round(waste.gpu_hours, 6),
                "share": None if waste.share is None else round(waste.share, 6),
                "cost": waste.cost.as_text() if waste.cost else None,
            }
            if waste
            else None,
            "pricing": self.pricing.as_dict(),
        }


@dataclass(frozen=True)
class Fleet:
    clusters: tuple[FleetCluster, ...]

    def _good(self) -> list[Any]:
        return [c.row.good for c in self.clusters if c.row.good is not None]

    @property
    def gpus(self) -> int:
        return sum(g.gpus for g in self._good())

    @property
    def allocation(self) -> float | None:
        gpus = self.gpus
        return sum(g.allocated_gpus for g in self._good()) / gpus if gpus else None

    @property
    def activity(self) -> float | None:
        """The clusters' activity weighted by their GPUs (those that report one)."""
        known = [g for g in self._good() if g.activity_utilization is not None and g.gpus]
        gpus = sum(g.gpus for g in known)
        return sum(g.activity_utilization * g.gpus for g in known) / gpus if gpus else None

    @property
    def stale(self) -> int:
        return sum(1 for c in self.clusters if c.row.freshness.stale)

    @property
    def open_incidents(self) -> int:
        return sum(c.row.open_incidents for c in self.clusters)

    @property
    def waste_cost(self) -> Money | None:
        """The top waste buckets' cost summed; None unless every cluster with one is priced."""
        wasted = [c for c in self.clusters if c.waste is not None]
        if not wasted:
            return None
        exact = [c.pricing.exact(c.waste.gpu_hours) if c.waste else None for c in wasted]
        return total(exact, wasted[0].pricing.currency)

    def as_dict(self) -> dict[str, Any]:
        cost = self.waste_cost
        return {
            "format": "gpuobs.fleet/v1",
            "gpus": self.gpus,
            "allocation_utilization": self.allocation,
            "activity_utilization": self.activity,
            "stale_clusters": self.stale,
            "open_incidents": self.open_incidents,
            "top_waste_cost": cost.as_text() if cost else None,
            "clusters": [c.as_dict() for c in self.clusters],
        }


def _last_hour_sums(rows: list[ClusterRow]) -> dict[int, dict[str, float]]:
    """Per cluster: the whole-cluster rollup sums of the hour up to its latest good snapshot."""
    windows = Q(pk__in=[])
    for row in rows:
        if row.good is not None:
            as_of = row.good.as_of
            windows |= Q(cluster_id=row.cluster.pk, as_of__gt=as_of - HOUR, as_of__lte=as_of)
    grouped = (
        PoolRollup.objects.filter(windows, pool="")
        .values("cluster_id")
        .annotate(**{column: Sum(column) for column in WASTE_SUMS})
        .order_by()
    )
    return {row["cluster_id"]: row for row in grouped}


def build_fleet(user: User) -> Fleet:
    """Every cluster ``user`` may read (``diagnosis.access`` scopes them), with its figures."""
    rows = cluster_rows(user)
    sums = _last_hour_sums(rows)
    prices = pricings([row.cluster for row in rows])
    return Fleet(
        tuple(
            FleetCluster(
                row,
                prices[row.cluster.pk],
                top_waste(sums.get(row.cluster.pk, {}), prices[row.cluster.pk]),
            )
            for row in rows
        )
    )


def fleet_period(query: Mapping[str, Any], user: User) -> ReportPeriod:
    """The period ``query`` asks for; by default ending at the readable clusters' newest data."""
    return ReportPeriod.parse(query, default_end=lambda: fleet_default_end(clusters_for_user(user)))


@require_safe
def fleet_page(request: HttpRequest) -> HttpResponse:
    """The fleet table and the cross-cluster tenant report over the period asked for."""
    fleet = build_fleet(request.user)
    context: dict[str, Any] = {"fleet": fleet, "presets": PRESET_LABELS, "section": "fleet"}
    try:
        period = fleet_period(request.GET, request.user)
    except PeriodError as error:
        return render(request, "diagnosis/fleet.html", context | {"error": error}, status=400)
    report = build_fleet_tenant_report(request.user, period)
    api = reverse("api-v1:fleet-tenants")
    context |= {
        "report": report,
        "period": period,
        "period_query": urlencode(period.query()),
        "api_url": f"{api}?{urlencode(period.query())}",
    }
    return render(request, "diagnosis/fleet.html", context)
