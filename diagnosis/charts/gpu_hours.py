"""Chart data: where the GPU-hours of a period went, summed from the stored cycle rollups
(:func:`gpu_hours_breakdown`), with each bucket's label, help text and the findings behind it.

Pages never recompute rules or accounting: they read ``ClusterCycle`` rollups (one per diagnosis
cycle) and hand the rows to this function."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.utils.translation import gettext, gettext_noop

from diagnosis.core.accounting import BUCKET_RULES, BUCKETS

BUCKET_LABELS: dict[str, str] = {
    "unavailable": gettext_noop("Unavailable"),
    "held-by-partial-gang": gettext_noop("Held by partial gang"),
    "allocated-hung": gettext_noop("Allocated, hung"),
    "allocated-idle": gettext_noop("Allocated, idle"),
    "allocated-data-starved": gettext_noop("Allocated, data-starved"),
    "allocated-busy": gettext_noop("Allocated, busy"),
    "free-fragmented": gettext_noop("Free, fragmented"),
    "free-demand": gettext_noop("Free, jobs waiting"),
    "free-no-demand": gettext_noop("Free, no demand"),
}
BUCKET_HELP: dict[str, str] = {
    "unavailable": gettext_noop("node not ready or GPU unhealthy"),
    "held-by-partial-gang": gettext_noop(
        "held by a gang job still waiting for the rest of its pods"
    ),
    "allocated-hung": gettext_noop(
        "held by a job whose GPUs spin without computing (hung-collective)"
    ),
    "allocated-idle": gettext_noop("held by a job whose GPUs are under 5% busy"),
    "allocated-data-starved": gettext_noop(
        "held by a job whose GPUs wait for input (data-starvation)"
    ),
    "allocated-busy": gettext_noop("held by a job doing work"),
    "free-fragmented": gettext_noop("free, but scattered so that waiting jobs cannot be placed"),
    "free-demand": gettext_noop("free while placeable jobs wait (scheduler lag)"),
    "free-no-demand": gettext_noop("free with nothing waiting for it"),
}


@dataclass(frozen=True)
class BucketHours:
    bucket: str
    gpu_hours: float
    share: float | None  # of the period's capacity
    findings: tuple[str, ...]  # "rule subject" of the findings behind it in the period
    rules: tuple[str, ...]  # the rules whose findings explain this bucket

    @property
    def label(self) -> str:
        return gettext(BUCKET_LABELS[self.bucket])

    @property
    def help(self) -> str:
        return gettext(BUCKET_HELP[self.bucket])


@dataclass(frozen=True)
class GpuHoursBreakdown:
    """Where the GPU-hours of a period went: the buckets of every cycle in it, summed."""

    start: datetime
    end: datetime
    covered_s: float  # seconds of the period some cycle accounts for
    cycles: int
    capacity_gpu_hours: float
    productive_gpu_hours: float | None  # MFU-weighted allocated-busy GPU-hours, where known
    buckets: tuple[BucketHours, ...]

    @property
    def period_s(self) -> float:
        return (self.end - self.start).total_seconds()

    @property
    def complete(self) -> bool:
        return self.covered_s >= self.period_s - 1

    @property
    def productive_share(self) -> float | None:
        if self.productive_gpu_hours is None or not self.capacity_gpu_hours:
            return None
        return self.productive_gpu_hours / self.capacity_gpu_hours

    def bucket(self, name: str) -> BucketHours:
        return next(b for b in self.buckets if b.bucket == name)


def gpu_hours_breakdown(
    rows: Iterable[Mapping[str, Any]], *, end: datetime, period_s: float = 3600
) -> GpuHoursBreakdown:
    """Sum the GPU-hour buckets of the cycles whose snapshot time is in ``(end - period, end]``.

    ``rows`` are good cycles: ``as_of``, and of the accounting rollup ``window_s``, ``buckets``
    (bucket -> ``{"gpus": n}``), ``bucket_findings`` (bucket -> ``["rule subject", ...]``) and
    ``productive_gpus``. A cycle's snapshot is one moment; it stands for the time since the
    previous cycle's snapshot, at most its own window and never before the period starts. So
    cycles every 60 s with a 15-minute window count 60 s each, a lone cycle counts its window,
    and a gap in the cycles is left uncounted (``covered_s`` says how much of the period is
    known) rather than filled in.
    """
    start = end - timedelta(seconds=period_s)
    hours = dict.fromkeys(BUCKETS, 0.0)
    refs: dict[str, dict[str, None]] = {bucket: {} for bucket in BUCKETS}
    covered = capacity = productive = 0.0
    productive_known = False
    cycles = 0
    previous: datetime | None = None
    for row in sorted(rows, key=lambda r: r["as_of"]):
        as_of = row["as_of"]
        if not start < as_of <= end:
            previous = as_of
            continue
        window = float(row.get("window_s") or period_s)
        since = max(start, as_of - timedelta(seconds=window))
        if previous is not None:
            since = max(since, previous)
        previous = as_of
        seconds = (as_of - since).total_seconds()
        if seconds <= 0:
            continue
        cycles += 1
        covered += seconds
        for bucket, value in (row.get("buckets") or {}).items():
            if bucket in hours:
                gpus = float((value or {}).get("gpus") or 0)
                hours[bucket] += gpus * seconds / 3600
                capacity += gpus * seconds / 3600
        if row.get("productive_gpus") is not None:
            productive_known = True
            productive += float(row["productive_gpus"]) * seconds / 3600
        for bucket, found in (row.get("bucket_findings") or {}).items():
            if bucket in refs:
                refs[bucket].update(dict.fromkeys(found))
    buckets = tuple(
        BucketHours(
            bucket=bucket,
            gpu_hours=hours[bucket],
            share=hours[bucket] / capacity if capacity else None,
            findings=tuple(refs[bucket]),
            rules=BUCKET_RULES.get(bucket, ()),
        )
        for bucket in BUCKETS
    )
    return GpuHoursBreakdown(
        start=start,
        end=end,
        covered_s=covered,
        cycles=cycles,
        capacity_gpu_hours=capacity,
        productive_gpu_hours=productive if productive_known else None,
        buckets=buckets,
    )
