"""Which price per GPU-hour each cluster has (docs/accounting.md "Cost"), for the pages, the
API, the reports and ``/metrics``: the company's table (``GPUOBS_GPU_HOUR_PRICES``) overridden
model by model by the cluster's declared ``gpu_hour_prices``, applied to the GPU models of the
cluster's latest good cycle (``ClusterCycle.accounting["gpu_models"]``, written at cycle time), so a
page reads one small column and never a snapshot. The maths: ``diagnosis.core.cost``."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.db.models import JSONField, OuterRef, Subquery
from django.db.models.fields.json import KT

from diagnosis.core.cost import (
    PriceError,
    Pricing,
    bucket_costs,
    cluster_pricing,
    parse_price_table,
)
from diagnosis.core.cost import parse_price_text as parse_price_text
from diagnosis.core.numbers import finite_number
from diagnosis.models import Cluster, ClusterCycle

INVALID_PRICES = "invalid-prices"


def price_table(declared: Any) -> dict[str, Decimal]:
    """The setting's prices with a cluster's ``declared`` ones over them (both validated on
    the way in: at start-up and by ``clusters apply``)."""
    table = parse_price_text(settings.GPUOBS_GPU_HOUR_PRICES, where="GPUOBS_GPU_HOUR_PRICES")
    return table | parse_price_table(declared or {}, where="gpu_hour_prices")


def _models_of(models: Any) -> dict[str, float] | None:
    if not isinstance(models, Mapping):
        return None
    return {str(m): float(n) for m, n in models.items() if isinstance(n, int | float)}


def pricing_of(declared: Any, models: Any) -> Pricing:
    """The pricing of a cluster that declares ``declared`` prices and whose latest good cycle
    counted ``models`` (GPUs per model)."""
    currency = settings.GPUOBS_CURRENCY
    try:
        table = price_table(declared)
    except PriceError:
        return Pricing(currency, None, INVALID_PRICES)
    return cluster_pricing(_models_of(models), table, currency)


def pricings(clusters: Iterable[Cluster]) -> dict[int, Pricing]:
    """Each cluster's pricing by id, in one query: its declared prices and the GPU models of
    its latest good cycle (one key of that cycle's accounting document)."""
    ids = [c.pk for c in clusters]
    latest = (
        ClusterCycle.objects.filter(cluster=OuterRef("pk"), ok=True)
        .order_by("-as_of", "-id")
        .values(models=KT("accounting__gpu_models"))
    )
    rows = (
        Cluster.objects.filter(pk__in=ids)
        .annotate(latest_models=Subquery(latest[:1], output_field=JSONField()))
        .values_list("pk", "gpu_hour_prices", "latest_models")
    )
    found = {pk: pricing_of(declared, models) for pk, declared, models in rows}
    return {pk: found[pk] for pk in ids if pk in found}


def price_key(cluster: Cluster) -> str:
    """What a cached page's money depends on besides the cycles (which change its data
    version): the setting, the currency and the cluster's declared prices -- no query."""
    declared = json.dumps(cluster.gpu_hour_prices or {}, sort_keys=True)
    return f"{settings.GPUOBS_CURRENCY}|{settings.GPUOBS_GPU_HOUR_PRICES}|{declared}"


def pricing_for(cluster: Cluster) -> Pricing:
    return pricings([cluster])[cluster.pk]


def waterfall_costs(cluster: Cluster, breakdown: Any) -> dict[str, Any]:
    """The overview waterfall's money (a ``GpuHoursBreakdown``): each bucket's cost and the
    capacity's, for the template; empty costs when the cluster is not priced."""
    pricing = pricing_for(cluster)
    hours = {b.bucket: b.gpu_hours for b in breakdown.buckets}
    costs = bucket_costs(pricing, hours)
    capacity = pricing.cost(breakdown.capacity_gpu_hours)
    return {
        "pricing": pricing,
        "bucket_costs": costs,
        "capacity_cost": capacity,
        "hover_costs": {**costs, "capacity": capacity} if capacity else {},
    }


def money_at_stake(cluster: Cluster, impact: Mapping[str, Any]) -> dict[str, Any] | None:
    """A recommendation's GPU-hours at stake (its impact estimate's ``stake_gpu_h``: the GPUs
    of the jobs it would help × the replay horizon) and their cost; None without a stake, and
    no cost without a price."""
    hours = finite_number(impact.get("stake_gpu_h"))
    if hours is None or hours <= 0:
        return None
    return {"gpu_hours": hours, "cost": pricing_for(cluster).cost(hours)}
