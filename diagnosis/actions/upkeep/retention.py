"""Retention (issue #17): what gpuobs keeps, and for how long (docs/operations.md, "Retention").

Beat runs :func:`prune` every ``GPUOBS_RETENTION_SECONDS`` (``diagnosis.tasks.prune_retention``):

- stored snapshots older than ``GPUOBS_RETAIN_SNAPSHOTS_DAYS`` are deleted, except each
  cluster's latest (exports, incidents and pending impact estimates read it);
- per-cycle rollups older than ``GPUOBS_ROLLUP_HOURLY_AFTER_DAYS`` are merged into one row per
  scope (pool, tenant) and hour -- their GPU-seconds and interval summed, so any report over
  whole hours reads the same figures -- with no cycle;
- cycles older than ``GPUOBS_RETAIN_CYCLES_DAYS`` are deleted, except each cluster's latest good
  one (their rollups are merged first, or kept with no cycle);
- finding history rows older than ``GPUOBS_RETAIN_FINDING_EVENTS_DAYS`` and cached impact
  replays older than ``GPUOBS_RETAIN_REPLAYS_DAYS`` are deleted.

A setting of 0 days keeps that table's rows forever. Every statement touches at most
``GPUOBS_RETENTION_BATCH`` rows and runs in its own short transaction, so pruning holds no lock a
cycle waits for (a cycle writes new rows; pruning deletes old ones).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import models, transaction
from django.db.models import Count, Max, Min, OuterRef, Q, Subquery, Sum
from django.db.models.functions import TruncHour
from django.utils import timezone

from diagnosis.models import (
    ClusterCycle,
    FindingEvent,
    PoolRollup,
    ReplayOutcome,
    Snapshot,
    TenantRollup,
)

logger = logging.getLogger(__name__)

BatchHook = Callable[[str, int], None]
ROLLUP_SCOPES: tuple[tuple[type[models.Model], tuple[str, ...]], ...] = (
    (PoolRollup, ("pool",)),
    (TenantRollup, ("tenant_id", "tenant_name")),
)


def prune(
    *,
    now: datetime | None = None,
    batch: int | None = None,
    after_batch: BatchHook | None = None,
) -> dict[str, Any]:
    """Apply every retention setting once; returns the rows deleted (and merged) per table and
    the seconds it took. ``after_batch(table, rows)`` is called after each committed batch."""

    started = time.perf_counter()
    now = now or timezone.now()
    batch = batch or settings.GPUOBS_RETENTION_BATCH
    hook = after_batch or (lambda table, rows: None)
    done: dict[str, Any] = {}

    cutoff = _cutoff(now, settings.GPUOBS_RETAIN_SNAPSHOTS_DAYS)
    if cutoff is not None:
        latest = Snapshot.objects.filter(cluster_id=OuterRef("cluster_id")).order_by("-as_of")
        old = Snapshot.objects.filter(as_of__lt=cutoff).exclude(
            pk=Subquery(latest.values("pk")[:1])
        )
        done["snapshots"] = _delete_in_batches("snapshots", old, batch, hook)

    cutoff = _cutoff(now, settings.GPUOBS_ROLLUP_HOURLY_AFTER_DAYS)
    if cutoff is not None:
        for model, scope in ROLLUP_SCOPES:
            merged, removed = downsample_rollups(model, scope, cutoff, batch, hook)
            done[f"{model._meta.model_name}s_merged"] = merged
            done[f"{model._meta.model_name}s_removed"] = removed

    cutoff = _cutoff(now, settings.GPUOBS_RETAIN_CYCLES_DAYS)
    if cutoff is not None:
        latest_good = ClusterCycle.objects.filter(
            cluster_id=OuterRef("cluster_id"), ok=True
        ).order_by("-as_of")
        old = ClusterCycle.objects.filter(ran_at__lt=cutoff).exclude(
            pk=Subquery(latest_good.values("pk")[:1])
        )
        done["cycles"] = _delete_in_batches("cycles", old, batch, hook)

    cutoff = _cutoff(now, settings.GPUOBS_RETAIN_FINDING_EVENTS_DAYS)
    if cutoff is not None:
        old = FindingEvent.objects.filter(time__lt=cutoff)
        done["finding_events"] = _delete_in_batches("finding_events", old, batch, hook)

    cutoff = _cutoff(now, settings.GPUOBS_RETAIN_REPLAYS_DAYS)
    if cutoff is not None:
        old = ReplayOutcome.objects.filter(created_at__lt=cutoff)
        done["replays"] = _delete_in_batches("replays", old, batch, hook)

    done["seconds"] = round(time.perf_counter() - started, 3)
    logger.info("retention: %s", done)
    return done


def _cutoff(now: datetime, days: int) -> datetime | None:
    return now - timedelta(days=days) if days > 0 else None


def _delete_in_batches(table: str, rows: models.QuerySet, batch: int, hook: BatchHook) -> int:
    """Delete ``rows`` at most ``batch`` at a time, each batch its own transaction."""
    total = 0
    while True:
        ids = list(rows.order_by("pk").values_list("pk", flat=True)[:batch])
        if not ids:
            return total
        with transaction.atomic():
            rows.model.objects.filter(pk__in=ids).delete()
        total += len(ids)
        hook(table, len(ids))


def figure_fields(model: type[models.Model]) -> list[str]:
    """The summed columns of a rollup model: every number but its keys."""
    numbers = (models.FloatField, models.IntegerField)
    return [
        f.name
        for f in model._meta.concrete_fields
        if isinstance(f, numbers) and not f.primary_key and not f.is_relation
    ]


def downsample_rollups(
    model: type[models.Model],
    scope: tuple[str, ...],
    cutoff: datetime,
    batch: int,
    hook: BatchHook,
) -> tuple[int, int]:
    """Merge ``model``'s rows older than ``cutoff`` into one per cluster, scope and hour
    (``as_of`` the hour's latest, no cycle); an hour already one merged row is left alone.
    Each hour is merged in its own transaction, ``batch`` hours a round. Returns the merged
    rows written and the rows they replaced."""
    sums = figure_fields(model)
    keys = ("cluster_id", *scope)
    texts = [
        f.name
        for f in model._meta.concrete_fields
        if isinstance(f, models.CharField) and f.name not in scope
    ]
    merged = removed = 0
    while True:
        hours = list(
            model.objects.filter(as_of__lt=cutoff)
            .annotate(hour=TruncHour("as_of"))
            .values(*keys, "hour")
            .annotate(rows=Count("pk"), per_cycle=Count("cycle_id"))
            .filter(Q(rows__gt=1) | Q(per_cycle__gt=0))
            .order_by("hour", *keys)[:batch]
        )
        if not hours:
            return merged, removed
        for hour in hours:
            start = hour["hour"]
            rows = model.objects.filter(
                as_of__gte=start,
                as_of__lt=min(start + timedelta(hours=1), cutoff),
                **{k: hour[k] for k in keys},
            )
            with transaction.atomic():
                figures = rows.aggregate(
                    **{f: Sum(f) for f in sums}, as_of=Max("as_of"), **{t: Min(t) for t in texts}
                )
                ids = list(rows.values_list("pk", flat=True))
                model.objects.filter(pk__in=ids).delete()
                model.objects.create(cycle=None, **{k: hour[k] for k in keys}, **figures)
            merged += 1
            removed += len(ids)
            hook(model._meta.model_name, len(ids))
