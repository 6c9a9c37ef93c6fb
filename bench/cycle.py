"""Time the stored diagnosis cycle on PostgreSQL: N consecutive cycles of one big cluster.

    PYTHONPATH=. python bench/cycle.py                # 2,048, 16,384 and 65,536 GPUs, 50 cycles
    PYTHONPATH=. python bench/cycle.py --sizes 16384 --cycles 20
    PYTHONPATH=. python bench/cycle.py --sizes 16384,131072 --cycles 10   # the linear check
    PYTHONPATH=. python bench/cycle.py --sizes 65536 --cycles 10
    PYTHONPATH=. python bench/cycle.py --database-url postgres://postgres@127.0.0.1:5432/x_bench

Each cycle is exactly what ``manage.py snapshot import FILE --diagnose`` runs
(``actions.snapshots.import_snapshot`` -> ``actions.cycles.record_cycle``, the code path of a
scheduled cycle after its collection): store the snapshot, diagnose, record the findings, the
cycle row, tenancy and rollups, incidents, the recommend step. The snapshot is bench/rules.py's
(nodes of 8 GPUs in three pools, ~1.2 jobs per GPU, 70% pending), loaded once; cycle i judges it
as of ``as_of + i`` minutes, so jobs run longer and wait longer from cycle to cycle while nothing
else changes: a steady cluster, what a stored cycle meets most minutes.
Collection is excluded (no metrics source is asked), and so are the tasks a cycle sends (impact
estimates, notifications: on a worker they run from their own queues; here they are queued in
memory and never run).

Printed per cycle: wall seconds and each step's (``ClusterCycle.steps``), statements sent, rows
they wrote (INSERT/UPDATE/DELETE row counts), kilobytes of SQL sent, findings written in full /
only timestamps moved / history rows; then medians (each step's wall and CPU seconds of the
cycle's thread), the slope (cycle N vs cycle 5) and the growth
of the findings table. Budget (issue #17): at 16,384 GPUs the median stored cycle <= 2 s and cycle
50 within 10% of cycle 5.

The database named by ``--database-url`` (default: ``$BENCH_DATABASE_URL``, else
``gpuobs_cycle_bench`` on the local PostgreSQL) is dropped and created afresh, and dropped again
at the end unless ``--keep``. Without a reachable PostgreSQL the script says so and exits 0.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

import argparse
import cProfile
import dataclasses
import io
import pstats
import re
import resource
import statistics
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pandas as pd
import psycopg

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench._goals import goal  # noqa: E402
from bench.rules import build_document  # noqa: E402

DEFAULT_URL = "postgres://postgres@127.0.0.1:5432/gpuobs_cycle_bench"
BUDGET_S = 2.0
BUDGET_SIZE = 16384
LARGE_BUDGET_S = 10.0  # issue #35: a steady cycle at 131,072 GPUs
LARGE_SIZE = 131072
SLOPE_TOLERANCE = 0.10
FIRST_CYCLE_FACTOR = 3.0  # issue #35: cycle 1 (every finding created) <= 3 x a steady cycle
STEPS = ("diagnose", "snapshot", "findings", "tenancy", "incidents", "recommend")


def fresh_database(url: str) -> bool:
    """Drop and create the database of ``url``; False when PostgreSQL cannot be reached."""
    parts = urlsplit(url)
    name = parts.path.lstrip("/")
    admin = urlunsplit(parts._replace(path="/postgres"))
    try:
        with psycopg.connect(admin, autocommit=True, connect_timeout=5) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            conn.execute(f'CREATE DATABASE "{name}"')
    except psycopg.OperationalError as exc:
        print(f"bench/cycle.py: skipped, no PostgreSQL at {admin}: {exc}".strip())
        return False
    return True


def drop_database(url: str) -> None:
    parts = urlsplit(url)
    admin = urlunsplit(parts._replace(path="/postgres"))
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{parts.path.lstrip("/")}" WITH (FORCE)')


TABLE = re.compile(r'^\s*(INSERT INTO|UPDATE|DELETE FROM)\s+"?(\w+)"?', re.IGNORECASE)


class Meter:
    """Statements, rows written (per table) and SQL bytes sent through Django's connection."""

    def __init__(self) -> None:
        self.statements = 0
        self.rows = 0
        self.sent = 0
        self.written: Counter[str] = Counter()

    def __call__(self, execute: Callable, sql: str, params: Any, many: bool, context: dict):
        result = execute(sql, params, many, context)
        self.statements += 1
        self.sent += len(sql) + _params_size(params)
        if match := TABLE.match(sql):
            count = max(context["cursor"].rowcount, 0)
            self.rows += count
            table = match.group(2).removeprefix("diagnosis_")
            if table == "finding" and sql.startswith('UPDATE "diagnosis_finding" SET "tenant_id"'):
                table = "finding (tenant tags)"  # the tenancy step's, not the findings step's
            self.written[table] += count
        return result


def _params_size(params: Any) -> int:
    """Roughly the SQL bytes of ``params``: the repr of each, but a bytes value (the stored
    snapshot's 40 MB at 131,072 GPUs) by its length, where its repr alone took 0.3 s of the
    timed cycle."""
    if params is None:
        return 0
    if isinstance(params, dict):
        params = list(params.values())
    size = 0
    for param in params:
        raw = getattr(param, "obj", param)  # psycopg's Binary wraps the bytes
        size += len(raw) if isinstance(raw, bytes | bytearray | memoryview) else len(repr(param))
    return size


@contextmanager
def metered() -> Iterator[Meter]:
    from django.db import connection  # noqa: PLC0415 (Django is set up once the URL is known)

    meter = Meter()
    with connection.execute_wrapper(meter):
        yield meter


class StepCPU:
    """CPU seconds of the cycle's own thread in each step (``ClusterCycle.steps`` has their
    wall time; the snapshot's compression thread is not counted): the bench wraps the cycle's
    step timer and its recommend step, the code measured is not changed."""

    def __init__(self) -> None:
        from diagnosis.actions.records import cycles  # noqa: PLC0415 (after django.setup)

        self.seconds: Counter[str] = Counter()
        timed, recommend = cycles._Steps.timed, cycles.record_recommendation_step
        clock = self

        @contextmanager
        def cpu_timed(steps: Any, name: str) -> Iterator[None]:
            started = time.thread_time()
            try:
                with timed(steps, name):
                    yield
            finally:
                clock.seconds[name] += time.thread_time() - started

        def cpu_recommend(*args: Any, **kwargs: Any) -> Any:
            started = time.thread_time()
            try:
                return recommend(*args, **kwargs)
            finally:
                clock.seconds["recommend"] += time.thread_time() - started

        cycles._Steps.timed = cpu_timed
        cycles.record_recommendation_step = cpu_recommend

    def take(self) -> dict[str, float]:
        taken = {f"{step}_cpu_s": self.seconds[step] for step in STEPS}
        self.seconds.clear()
        return taken


def process_cpu() -> float:
    """CPU seconds of this process and of its children that ended (a big cycle's snapshot
    is dumped in a forked child, reaped before the cycle ends)."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


def table_bytes(table: str) -> tuple[int, int, int]:
    """The table's heap, TOAST and index bytes."""
    from django.db import connection  # noqa: PLC0415

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_relation_size(c.oid), COALESCE(pg_relation_size(c.reltoastrelid), 0), "
            "pg_indexes_size(c.oid) FROM pg_class c WHERE c.oid = %s::regclass",
            [table],
        )
        heap, toast, indexes = cursor.fetchone()
    return int(heap), int(toast), int(indexes)


def finding_updates() -> tuple[int, int]:
    """Rows of the findings table updated so far, and how many of them in place (HOT)."""
    from django.db import connection  # noqa: PLC0415

    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_force_next_flush()")
    time.sleep(1.1)  # the backend flushes its table statistics at most once a second
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_clear_snapshot()")
        cursor.execute(
            "SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables "
            "WHERE relname = 'diagnosis_finding'"
        )
        updated, hot = cursor.fetchone()
    return int(updated), int(hot)


def open_findings(cluster: str) -> int:
    from diagnosis.models import Finding  # noqa: PLC0415

    return Finding.objects.filter(cluster__name=cluster).exclude(state="resolved").count()


def server_setting(name: str) -> str:
    from django.db import connection  # noqa: PLC0415

    with connection.cursor() as cursor:
        cursor.execute("SELECT current_setting(%s)", [name])
        return str(cursor.fetchone()[0])


def vacuum_findings() -> None:
    """What autovacuum does to a busy table, between two cycles (outside their timings)."""
    from django.db import connection  # noqa: PLC0415

    with connection.cursor() as cursor:
        cursor.execute("VACUUM diagnosis_finding")


def print_profile(profiler: cProfile.Profile, cycle: int) -> None:
    """The functions cycle ``cycle`` spent its time in (``--profile-cycle``): own and cumulative;
    the whole profile goes to ``$BENCH_PROFILE_OUT`` when set (for pstats or snakeviz)."""
    if os.environ.get("BENCH_PROFILE_OUT"):
        profiler.dump_stats(os.environ["BENCH_PROFILE_OUT"])
    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out)
    for order in ("tottime", "cumulative"):
        stats.sort_stats(order).print_stats(25)
    print(f"-- profile of cycle {cycle}:\n{out.getvalue()}")


def run_size(
    gpus: int, cycles: int, *, vacuum: bool = False, profile_cycle: int = 0
) -> dict[str, Any]:
    from django.db import reset_queries  # noqa: PLC0415

    from diagnosis.actions.records.snapshots import import_snapshot  # noqa: PLC0415
    from diagnosis.core import snapshot as snapshot_format  # noqa: PLC0415

    started = time.perf_counter()
    snap = snapshot_format.load(build_document(gpus))
    print(
        f"\n== {gpus:,} GPUs: {len(snap.nodes):,} nodes, {len(snap.jobs):,} jobs "
        f"(snapshot built and loaded in {time.perf_counter() - started:.1f} s), {cycles} cycles =="
    )
    header = (
        f"{'cycle':>5} {'total':>6} "
        + " ".join(f"{s[:9]:>9}" for s in STEPS)
        + f" {'stmts':>6} {'rows':>7} {'KB sent':>8} {'written':>7} {'touched':>7} {'events':>6}"
    )
    print(header)
    rows: list[dict[str, Any]] = []
    findings_bytes = []
    step_cpu = StepCPU()
    for i in range(cycles):
        moment = dataclasses.replace(snap, as_of=snap.as_of + pd.Timedelta(minutes=i))
        reset_queries()
        profiler = cProfile.Profile() if i + 1 == profile_cycle else None
        step_cpu.take()
        with metered() as meter:
            wall, cpu, thread = time.perf_counter(), process_cpu(), time.thread_time()
            if profiler:
                profiler.enable()
            imported = import_snapshot(moment, cluster_name=f"bench-{gpus}", diagnose=True)
            if profiler:
                profiler.disable()
            wall, cpu = time.perf_counter() - wall, process_cpu() - cpu
            thread = time.thread_time() - thread
        cycle = imported.cycle
        steps = cycle.steps or {}
        written = steps.get("findings_written") or {}
        error = (cycle.recommendations or {}).get("error")
        row = {
            "cycle": i + 1,
            "total_s": wall,
            "cpu_s": cpu,
            "thread_cpu_s": thread,
            **step_cpu.take(),
            **{f"{s}_s": float(steps.get(f"{s}_s") or 0.0) for s in STEPS},
            "statements": meter.statements,
            "rows": meter.rows,
            "kb_sent": meter.sent / 1024,
            "written": written.get("written", 0),
            "touched": written.get("touched", 0),
            "events": written.get("events", 0),
            "written_by_rule": written.get("written_by_rule", {}),
            "rows_by_table": dict(meter.written),
            "finding_rows": meter.written["finding"],
            "open_findings": open_findings(f"bench-{gpus}"),
            "recommend_error": error,
        }
        rows.append(row)
        if vacuum:
            vacuum_findings()
        findings_bytes.append(table_bytes("diagnosis_finding"))
        print(
            f"{row['cycle']:>5} {wall:>6.2f} "
            + " ".join(f"{row[f'{s}_s']:>9.3f}" for s in STEPS)
            + f" {meter.statements:>6} {meter.rows:>7} {row['kb_sent']:>8.0f}"
            f" {row['written']:>7} {row['touched']:>7} {row['events']:>6}"
            + (f"  recommend failed: {error[:80]}" if error else "")
        )
        if profiler:
            print_profile(profiler, i + 1)
    updates = finding_updates()
    return {"gpus": gpus, "rows": rows, "findings_bytes": findings_bytes, "updates": updates}


def summarize(result: dict[str, Any]) -> bool:
    rows = result["rows"]
    gpus = result["gpus"]
    steady = rows[min(4, len(rows) - 1) :]  # from cycle 5 on: the first cycles create
    median = statistics.median(r["total_s"] for r in steady)
    without = statistics.median(r["total_s"] - r["recommend_s"] for r in steady)
    print(f"-- {gpus:,} GPUs, cycles {steady[0]['cycle']}..{rows[-1]['cycle']}:")
    cpu = statistics.median(r["cpu_s"] for r in steady)
    print(
        f"   median stored cycle {median:.2f} s ({without:.2f} s without the recommend step; "
        f"{cpu:.2f} s CPU of this process and its children); "
        + ", ".join(f"{s} {statistics.median(r[f'{s}_s'] for r in steady):.3f}" for s in STEPS)
    )
    print(
        f"   CPU (median): process {cpu:.2f} s, of it the cycle's thread "
        f"{statistics.median(r['thread_cpu_s'] for r in steady):.2f} s: "
        + ", ".join(f"{s} {statistics.median(r[f'{s}_cpu_s'] for r in steady):.3f}" for s in STEPS)
        + "; the rest in the snapshot's compression thread or its forked child"
    )
    print(
        "   per cycle (median): "
        f"{statistics.median(r['statements'] for r in steady):.0f} statements, "
        f"{statistics.median(r['rows'] for r in steady):.0f} rows written, "
        f"{statistics.median(r['kb_sent'] for r in steady):.0f} KB of SQL sent; findings "
        f"written in full {statistics.median(r['written'] for r in steady):.0f}, timestamps "
        f"only {statistics.median(r['touched'] for r in steady):.0f}, history rows "
        f"{statistics.median(r['events'] for r in steady):.0f}"
    )
    finding_rows = statistics.median(r["finding_rows"] for r in steady)
    changed = statistics.median(r["written"] + r["touched"] for r in steady)
    open_now = statistics.median(r["open_findings"] for r in steady)
    tags = statistics.median(r["rows_by_table"].get("finding (tenant tags)", 0) for r in steady)
    ok = goal(
        f"finding rows written per steady cycle at {gpus:,} GPUs, against the changed ones",
        finding_rows,
        changed,
        "rows",
        detail=f"{open_now:.0f} open findings; changed: written in full or for their timestamps "
        f"only; besides, {tags:.0f} rows re-tagged with their tenant by the tenancy step",
    )
    last = rows[-1]
    by_table = ", ".join(f"{t} {n}" for t, n in sorted(last["rows_by_table"].items()) if n)
    by_rule = ", ".join(f"{r} {n}" for r, n in sorted(last["written_by_rule"].items()))
    print(f"   cycle {last['cycle']}: rows written by table: {by_table or 'none'}")
    print(f"   cycle {last['cycle']}: findings written in full by rule: {by_rule or 'none'}")
    updated, hot = result["updates"]
    if updated:
        print(f"   findings rows updated over all cycles: {updated}, {hot / updated:.0%} in place")
    first_cycle = rows[0]
    print(
        f"   cycle 1 (creates): {first_cycle['total_s']:.2f} s ({first_cycle['cpu_s']:.2f} s CPU "
        f"of this process), {first_cycle['statements']} statements, "
        f"{first_cycle['written']} findings written"
    )
    if len(rows) > 1:
        ok = first_cycle_goal(result) and ok
    if len(rows) >= 6:
        fifth, last = rows[4], rows[-1]
        # a single cycle is noisy on a shared machine: compare the medians of 3 around each
        around = [
            statistics.median(r["total_s"] for r in rows[max(0, k - 1) : k + 2])
            for k in (4, len(rows) - 2)
        ]
        slope = around[1] / around[0] - 1
        print(
            f"   slope: cycle {last['cycle']} {last['total_s']:.2f} s vs cycle 5 "
            f"{fifth['total_s']:.2f} s; medians of 3 around them {around[1]:.2f} vs "
            f"{around[0]:.2f} s ({slope:+.0%})"
        )
        ok = ok and (slope <= SLOPE_TOLERANCE or gpus != BUDGET_SIZE)
    grown = result["findings_bytes"]
    marks = sorted({0, min(4, len(grown) - 1), len(grown) - 1})
    print(
        "   findings table (heap + TOAST + indexes, MB): "
        + "; ".join(
            f"after cycle {k + 1}: "
            + " + ".join(f"{part / 1e6:.1f}" for part in grown[k])
            + f" = {sum(grown[k]) / 1e6:.1f}"
            for k in marks
        )
    )
    failed = sum(1 for r in rows if r["recommend_error"])
    if failed:
        print(f"   recommend step failed in {failed} of {len(rows)} cycles")
    if gpus == BUDGET_SIZE:
        verdict = "within" if median <= BUDGET_S else "OVER"
        print(f"   {verdict} the {BUDGET_S:.0f} s budget of a stored cycle at {gpus:,} GPUs")
        ok = ok and median <= BUDGET_S
    if gpus == LARGE_SIZE:
        ok = (
            goal(
                f"steady stored cycle at {gpus:,} GPUs",
                median,
                LARGE_BUDGET_S,
                detail=f"wall, median of cycles {steady[0]['cycle']}..{steady[-1]['cycle']}; "
                f"{cpu:.2f} s CPU",
            )
            and ok
        )
    return ok


def first_cycle_goal(result: dict[str, Any]) -> bool:
    """Cycle 1 against FIRST_CYCLE_FACTOR x the steady median of the same run (issue #35), in
    wall time (the database's work included) and in this process's CPU time."""
    rows, gpus = result["rows"], result["gpus"]
    steady = rows[4:] if len(rows) > 5 else rows[1:]
    first = rows[0]
    wall_median = statistics.median(r["total_s"] for r in steady)
    cpu_median = statistics.median(r["cpu_s"] for r in steady)
    span = f"cycles {steady[0]['cycle']}..{steady[-1]['cycle']}"
    met = goal(
        f"cycle 1 at {gpus:,} GPUs / steady median",
        first["total_s"] / wall_median,
        FIRST_CYCLE_FACTOR,
        "x",
        detail=f"wall {first['total_s']:.2f} s vs {wall_median:.2f} s, {span}, same run",
    )
    goal(
        f"cycle 1 CPU at {gpus:,} GPUs / steady median CPU",
        first["cpu_s"] / cpu_median,
        FIRST_CYCLE_FACTOR,
        "x",
        detail=f"process CPU {first['cpu_s']:.2f} s vs {cpu_median:.2f} s, {span}, same run",
    )
    return met


def steady_median(result: dict[str, Any]) -> float:
    rows = result["rows"]
    return statistics.median(r["total_s"] for r in rows[min(4, len(rows) - 1) :])


def print_scaling(results: list[dict[str, Any]]) -> None:
    """How the median stored cycle grows with the cluster, against the smallest size run: no
    worse than linear means the time ratio is at most the GPU ratio (issue #17)."""
    if len(results) < 2:
        return
    base = results[0]
    for result in results[1:]:
        gpus = result["gpus"] / base["gpus"]
        seconds = steady_median(result) / steady_median(base)
        verdict = "no worse than linear" if seconds <= gpus else "WORSE than linear"
        print(
            f"   scaling {base['gpus']:,} -> {result['gpus']:,} GPUs: x{gpus:.1f} GPUs, "
            f"x{seconds:.1f} stored-cycle time ({verdict})"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="2048,16384,65536", help="comma-separated GPU counts")
    parser.add_argument("--cycles", type=int, default=50, help="consecutive cycles per size")
    parser.add_argument(
        "--database-url",
        default=os.environ.get("BENCH_DATABASE_URL", DEFAULT_URL),
        help="PostgreSQL database to create afresh (and drop at the end)",
    )
    parser.add_argument("--keep", action="store_true", help="keep the database afterwards")
    parser.add_argument(
        "--vacuum",
        action="store_true",
        help="VACUUM the findings table after each cycle (untimed), as autovacuum would on a "
        "server that runs it",
    )
    parser.add_argument(
        "--profile-cycle",
        type=int,
        default=0,
        metavar="K",
        help="run cycle K under cProfile and print where its time went (slows that cycle)",
    )
    args = parser.parse_args(argv)
    if not fresh_database(args.database_url):
        return 0
    os.environ["DATABASE_URL"] = args.database_url
    os.environ.pop("REDIS_URL", None)  # tasks in-process; the bench measures the cycle only
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gpuobs.settings")
    import django  # noqa: PLC0415 (settings read DATABASE_URL: set just above)

    django.setup()
    from django.core.management import call_command  # noqa: PLC0415

    from gpuobs.celery import app  # noqa: PLC0415

    # Without a broker, tasks run eagerly in-process; a worker's cycle only sends them (impact
    # estimates, notifications go to their own queues): queue them in memory, never run them.
    app.conf.task_always_eager = False

    try:
        call_command("migrate", verbosity=0)
        print(
            f"PostgreSQL {server_setting('server_version')}, autovacuum "
            f"{server_setting('autovacuum')}"
            + (", the findings table vacuumed after each cycle" if args.vacuum else "")
        )
        sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
        results = [
            run_size(size, args.cycles, vacuum=args.vacuum, profile_cycle=args.profile_cycle)
            for size in sizes
        ]
        print()
        ok = all([summarize(result) for result in results])  # noqa: C419 (every summary)
        print_scaling(results)
    finally:
        from django.db import connections  # noqa: PLC0415

        connections.close_all()
        if not args.keep:
            drop_database(args.database_url)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
