"""Pre-aggregated data the pages read (issue #17), written at cycle time:

- one small :class:`AccountingSlice` per good cycle, so the overview reads an hour of narrow
  rows and one accounting document instead of an hour of accounting documents (~33 KB of
  finding references each at 16,384 GPUs);
- the cycle's rollups added to their hour's :class:`TenantRollupHour` and
  :class:`PoolRollupHour` rows, so the fairness report over whole hours reads one row per
  tenant and hour instead of one per cycle.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from django.db import models
from django.db.models import Count, F, Sum
from django.db.models.functions import TruncHour

from diagnosis.actions.upkeep.retention import figure_fields
from diagnosis.models import (
    AccountingSlice,
    ClusterCycle,
    PoolRollup,
    PoolRollupHour,
    TenantRollup,
    TenantRollupHour,
)


def new_references(
    refs: Mapping[str, Sequence[str]], previous: Mapping[str, Sequence[str]] | None
) -> dict[str, list[str]]:
    """Per bucket, the references of ``refs`` not behind that bucket in ``previous``, in their
    order (all of them when there is no previous cycle). Empty buckets are left out."""
    added = {}
    for bucket, found in (refs or {}).items():
        before = set((previous or {}).get(bucket) or ())
        new = [ref for ref in found if ref not in before]
        if new:
            added[bucket] = new
    return added


def _slice_of(cycle: ClusterCycle, previous: Mapping[str, Sequence[str]] | None) -> AccountingSlice:
    accounting: dict[str, Any] = cycle.accounting or {}
    figures = accounting.get("cluster") or {}
    return AccountingSlice(
        cycle=cycle,
        cluster_id=cycle.cluster_id,
        as_of=cycle.as_of,
        window_s=accounting.get("window_s"),
        buckets=figures.get("buckets") or {},
        new_findings=new_references(accounting.get("findings") or {}, previous),
        productive_gpus=figures.get("productive_gpus"),
        activity_coverage=figures.get("activity_coverage"),
        mfu_coverage=figures.get("mfu_coverage"),
    )


def _neighbour(
    cycle: ClusterCycle, *, later: bool
) -> tuple[int, Mapping[str, Sequence[str]]] | None:
    """The previous (or next) good cycle by snapshot time: its id and finding references only
    (not its whole accounting document)."""
    good = ClusterCycle.objects.filter(cluster_id=cycle.cluster_id, ok=True).exclude(pk=cycle.pk)
    if later:
        good = good.filter(as_of__gt=cycle.as_of).order_by("as_of", "id")
    else:
        good = good.filter(as_of__lte=cycle.as_of).order_by("-as_of", "-id")
    row = good.values_list("pk", "accounting__findings").first()
    return None if row is None else (row[0], row[1] or {})


def record_accounting_slice(cycle: ClusterCycle) -> AccountingSlice | None:
    """Store the slice of a good cycle (none for a failed one). Its new references are counted
    against the previous good cycle by snapshot time; a cycle stored out of order (an imported
    old snapshot) also recounts the next cycle's slice against it, so every slice stays relative
    to its true predecessor."""
    if not cycle.ok:
        return None
    previous = _neighbour(cycle, later=False)
    stored = _slice_of(cycle, previous[1] if previous else None)
    AccountingSlice.objects.update_or_create(
        cycle=cycle,
        defaults={
            f.name: getattr(stored, f.name)
            for f in AccountingSlice._meta.concrete_fields
            if f.name != "cycle"
        },
    )
    following = _neighbour(cycle, later=True)
    if following is not None:
        references = (cycle.accounting or {}).get("findings") or {}
        AccountingSlice.objects.filter(cycle_id=following[0]).update(
            new_findings=new_references(following[1], references)
        )
    return stored


# Each per-cycle rollup model, its hourly sum and the keys of one hourly row besides the cluster.
HOURS: tuple[tuple[type[models.Model], type[models.Model], tuple[str, ...]], ...] = (
    (TenantRollup, TenantRollupHour, ("tenant_name",)),
    (PoolRollup, PoolRollupHour, ("pool", "entitlement_basis")),
)


def hour_of(moment: datetime) -> datetime:
    """The start of ``moment``'s clock hour, in UTC."""
    return moment.astimezone(UTC).replace(minute=0, second=0, microsecond=0)


def add_cycle_to_hours(cycle: ClusterCycle) -> int:
    """Add the rollup rows the cycle stored (none when its snapshot was already rolled up) to
    their hour's rows, inside the cycle's transaction (the hour's rows locked). Returns the
    hourly rows written."""
    written = 0
    hour = hour_of(cycle.as_of)
    for per_cycle, hourly, keys in HOURS:
        rows = list(per_cycle.objects.filter(cycle=cycle))
        if not rows:
            continue
        sums = figure_fields(per_cycle)
        stored = hourly.objects.select_for_update().filter(cluster_id=cycle.cluster_id, as_of=hour)
        existing = {tuple(getattr(r, k) for k in keys): r.pk for r in stored.only("pk", *keys)}
        totals: dict[tuple[Any, ...], dict[str, Any]] = {}  # hour's key -> what the cycle adds
        for row in rows:
            key = tuple(getattr(row, k) for k in keys)
            total = totals.setdefault(key, dict.fromkeys([*sums, "cycles"], 0))
            for name in sums:
                total[name] += getattr(row, name)
            total["cycles"] += 1
        hourly.objects.bulk_create(
            hourly(
                cluster_id=cycle.cluster_id,
                as_of=hour,
                **dict(zip(keys, key, strict=True)),
                **total,
            )
            for key, total in totals.items()
            if key not in existing
        )
        for key, total in totals.items():  # increments: one short UPDATE a row, no CASE per field
            if key in existing:
                hourly.objects.filter(pk=existing[key]).update(
                    **{name: F(name) + value for name, value in total.items()}
                )
        written += len(totals)
    return written


def rebuild_hours(
    per_cycle: type[models.Model],
    hourly: type[models.Model],
    keys: Sequence[str],
    cluster_id: int | None = None,
) -> int:
    """Recompute ``hourly`` from every ``per_cycle`` row (of one cluster, or all): for rollups
    stored before the hourly rows existed (migration 0026) or written by a benchmark's bulk
    insert. Returns the hourly rows written."""
    scope = {} if cluster_id is None else {"cluster_id": cluster_id}
    hourly.objects.filter(**scope).delete()
    sums = figure_fields(per_cycle)
    rows = (
        per_cycle.objects.filter(**scope)
        .annotate(hour=TruncHour("as_of", tzinfo=UTC))
        .values("cluster_id", "hour", *keys)
        .annotate(rows=Count("pk"), **{name: Sum(name) for name in sums})
        .order_by()
    )
    built = [
        hourly(
            cluster_id=row["cluster_id"],
            as_of=row["hour"],
            cycles=row["rows"],
            **{k: row[k] for k in keys},
            **{name: row[name] or 0 for name in sums},
        )
        for row in rows.iterator(chunk_size=2000)
    ]
    hourly.objects.bulk_create(built, batch_size=2000)
    return len(built)


def rebuild_all_hours(cluster_id: int | None = None) -> int:
    """:func:`rebuild_hours` for the tenant and the pool rollups."""
    return sum(rebuild_hours(p, h, keys, cluster_id) for p, h, keys in HOURS)
