"""Measure what gpuobs stores per cycle on PostgreSQL, and from it the database's size per day
per 1,000 GPUs, with and without retention (issue #17; docs/operations.md, "Retention").

    PYTHONPATH=. python bench/db_size.py               # 10 warm-up cycles, then 30 measured
    PYTHONPATH=. python bench/db_size.py --cycles 60   # more measured cycles

The demo's seed scenario (128 nodes x 8 A100 = 1,024 GPUs, its tenants, jobs and faults) runs
through the stored cycle (``run_cluster_cycle``: snapshot, findings, tenancy and rollups,
incidents, recommendations), one simulated minute a cycle as in production. After the warm-up,
``pg_total_relation_size`` (table, TOAST and indexes) of every gpuobs table is read before and
after the measured cycles; the difference over the cycles is the real per-cycle growth, which
times 1,440 cycles is a day. The steady state under the retention defaults follows from the
per-day growth of each table times the days it is kept (rollups: 30 days per cycle, then one row
per scope and hour). Needs PostgreSQL: ``DATABASE_URL`` (default
``postgres://postgres@127.0.0.1:5432/postgres``); the bench makes its own database
``test_<name>`` and drops it at the end.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gpuobs.settings")
os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres")
os.environ.pop("REDIS_URL", None)  # tasks in-process: impact estimates are not measured here

import django  # noqa: E402

django.setup()

from django.conf import settings  # noqa: E402
from django.db import connection  # noqa: E402
from django.test.utils import (  # noqa: E402
    setup_databases,
    setup_test_environment,
    teardown_databases,
)

from diagnosis.actions.records.cycles import run_cluster_cycle  # noqa: E402
from diagnosis.models import Cluster  # noqa: E402

CYCLES_PER_DAY = 1440
GPUS = 1024
START = datetime(2026, 11, 29, 8, 0, tzinfo=UTC)


def table_sizes() -> dict[str, int]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT relname, pg_total_relation_size(c.oid) FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = 'public' AND c.relkind = 'r' AND relname LIKE 'diagnosis_%%'"
        )
        return dict(cursor.fetchall())


def kept_days(table: str) -> float | None:
    """Days a table's per-cycle rows are kept under the retention settings (None: forever)."""
    days = {
        "diagnosis_snapshot": settings.GPUOBS_RETAIN_SNAPSHOTS_DAYS,
        "diagnosis_clustercycle": settings.GPUOBS_RETAIN_CYCLES_DAYS,
        "diagnosis_findingevent": settings.GPUOBS_RETAIN_FINDING_EVENTS_DAYS,
        "diagnosis_replayoutcome": settings.GPUOBS_RETAIN_REPLAYS_DAYS,
        "diagnosis_poolrollup": settings.GPUOBS_ROLLUP_HOURLY_AFTER_DAYS,
        "diagnosis_tenantrollup": settings.GPUOBS_ROLLUP_HOURLY_AFTER_DAYS,
    }.get(table)
    return float(days) if days else None


def mib(value: float) -> str:
    if abs(value) < 2**20:
        return f"{value / 2**10:,.0f} KiB"
    return f"{value / 2**20:,.1f} MiB"


def measure(warmup: int, cycles: int) -> None:
    cluster = Cluster.objects.create(
        name="bench-size",
        scheduler_kind="sim",
        metrics_kind="sim",
        scheduler_config={
            "scenario": "seed",
            "seed": 0,
            "clock": "step",
            "step_s": 60,
            "started_at": START.isoformat(),
        },
    )
    for _ in range(warmup):
        assert run_cluster_cycle(Cluster.objects.get(pk=cluster.pk)).ok
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE")  # what autovacuum does to a live database
    before = table_sizes()
    started = time.perf_counter()
    for _ in range(cycles):
        cycle = run_cluster_cycle(Cluster.objects.get(pk=cluster.pk))
        assert cycle.ok, cycle.error
    seconds = time.perf_counter() - started
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE")
    after = table_sizes()

    per_1k = 1000 / GPUS
    print(
        f"== {cycles} cycles of a {GPUS:,}-GPU cluster after {warmup} warm-up cycles "
        f"({seconds / cycles:.2f} s a cycle) =="
    )
    print(f"{'table':<34} {'bytes/cycle':>12} {'per day /1k GPUs':>17} {'kept':>8} {'steady':>12}")
    total_day = total_steady = 0.0
    for table in sorted(after, key=lambda t: -(after[t] - before.get(t, 0))):
        grown = (after[table] - before.get(table, 0)) / cycles
        if grown <= 0:
            continue
        day = grown * CYCLES_PER_DAY * per_1k
        days = kept_days(table)
        steady = day * days if days is not None else float("nan")
        if table in ("diagnosis_poolrollup", "diagnosis_tenantrollup") and days is not None:
            steady_hourly = day * 24 / CYCLES_PER_DAY  # one row an hour instead of 60
            label = f"{days:g} d+h"
            shown = f"{mib(steady)} +{mib(steady_hourly)}/d"
        else:
            label = f"{days:g} d" if days is not None else "forever"
            shown = mib(steady) if days is not None else f"+{mib(day)}/d"
        total_day += day
        total_steady += steady if days is not None else 0.0
        print(f"{table:<34} {grown:>12,.0f} {mib(day):>17} {label:>8} {shown:>12}")
    print(
        f"total: {mib(total_day)} a day per 1,000 GPUs without retention; with the defaults "
        f"{mib(total_steady)} per 1,000 GPUs kept, plus what grows forever"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--cycles", type=int, default=30)
    args = parser.parse_args(argv)
    setup_test_environment()
    databases = setup_databases(verbosity=0, interactive=False)
    try:
        measure(args.warmup, args.cycles)
    finally:
        teardown_databases(databases, verbosity=0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
