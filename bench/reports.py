"""Time the tenant fairness report on thirty days of rollups of a big cluster, and the per-cycle
writes that produce them.

    PYTHONPATH=. python bench/reports.py            # 30 days, 16,384 GPUs, 50 tenants
    PYTHONPATH=. python bench/reports.py --days 7   # a smaller fill
    PYTHONPATH=. python bench/reports.py --runs 5   # median of 5 timings

Budget (issue 8): the report JSON <= 3 s and the PDF <= 10 s for thirty days of 60-second
rollups of a 16,384-GPU cluster with 50 tenants. Needs PostgreSQL: ``DATABASE_URL`` (default
``postgres://postgres@127.0.0.1:5432/postgres``); the bench makes its own database
``test_<name>`` and drops it at the end.

The fill (generated in PostgreSQL with ``generate_series``, a few seconds): 43,200 cycles (one a
minute), 50 tenants with Zipf-like entitlements whose usage wanders around their share, a
rollup row per tenant and per pool (4) plus the cluster's per cycle -- 2.16 M tenant rows and
216,000 pool rows -- and 370,000 jobs started over the period (12,000 a day) with waits of
seconds to hours, plus starvation findings. Then, on a 16,384-GPU snapshot with 20,000 jobs (the
generator of bench/rules.py), the cycle's tenant side (``record_tenancy``: tenants, queues, job
sync, finding tags, rollups): the first cycle (every job new) and a later one (few changes).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench._common import bench_database, on_postgresql, start_django

start_django()

from django.contrib.auth.models import Group, User  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import connection  # noqa: E402
from django.test import Client  # noqa: E402

from diagnosis.actions.records import cycles as cycle_actions  # noqa: E402
from diagnosis.actions.records.findings import record_findings  # noqa: E402
from diagnosis.actions.records.rollups_hourly import rebuild_all_hours  # noqa: E402
from diagnosis.actions.records.tenancy import record_tenancy  # noqa: E402
from diagnosis.core import snapshot as snapshot_format  # noqa: E402
from diagnosis.core.diagnose import diagnose  # noqa: E402
from diagnosis.models import (  # noqa: E402
    Cluster,
    ClusterCycle,
    Finding,
    Job,
    PoolRollup,
    Tenant,
    TenantRollup,
)
from diagnosis.reports.fairness_report import build_fairness_report  # noqa: E402
from diagnosis.reports.pdf import render_pdf  # noqa: E402
from diagnosis.reports.period import ReportPeriod  # noqa: E402

JSON_BUDGET_S = 3.0
PDF_BUDGET_S = 10.0
GPUS = 16384
TENANTS = 50
POOLS = ("a100", "h100", "l40s", "h200")
JOBS_PER_DAY = 12_000
END = datetime(2026, 11, 29, 0, 0, tzinfo=UTC)
# The accounted GPU-seconds columns every rollup table has (TenantRollup, PoolRollup), in order.
ACCOUNTED = (
    "allocated_gpu_s, demanded_gpu_s, used_gpu_s, util_known_gpu_s, unavailable_gpu_s, "
    "partial_gang_gpu_s, hung_gpu_s, idle_gpu_s, data_starved_gpu_s, busy_gpu_s, "
    "productive_gpu_s, mfu_known_gpu_s, starving_job_s, preemptions"
)


def fill(days: int) -> tuple[object, object]:
    """The cluster, its 50 tenants, and ``days`` of minute rollups, jobs and findings."""
    cluster = Cluster.objects.create(name="bench", enabled=False)
    tenants = Tenant.objects.bulk_create(
        [Tenant(cluster=cluster, name=f"tenant-{i:02d}") for i in range(TENANTS)]
    )
    start = END - timedelta(days=days)
    cycles = days * 1440
    ClusterCycle.objects.bulk_create(
        (
            ClusterCycle(
                cluster=cluster,
                as_of=start + timedelta(minutes=m + 1),
                ran_at=start + timedelta(minutes=m + 1),
                gpus=GPUS,
            )
            for m in range(cycles)
        ),
        batch_size=5000,
    )
    first_tenant = min(t.pk for t in tenants)
    tenant_table = TenantRollup._meta.db_table
    pool_table = PoolRollup._meta.db_table
    cycle_table = ClusterCycle._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute("SELECT setseed(0.42)")
        # Entitlement share of tenant t: proportional to 1/(t+1) (Zipf-like), sums to 1.
        cursor.execute(  # table names come from the models, values are parameters
            f"""
            INSERT INTO {tenant_table} (
                cluster_id, cycle_id, as_of, interval_s, tenant_id, tenant_name,
                {ACCOUNTED}, entitlement_s, fair_gpu_s)
            SELECT c.cluster_id, c.id, c.as_of, 60, %s + t, 'tenant-' || lpad(t::text, 2, '0'),
                a * 60, a * 60 * 1.3, a * 60 * 0.7, a * 60, 0, a * 0.6, a * 0.2, a * 3, a * 1.2,
                a * 60 * 0.92, a * 60 * 0.35, a * 60 * 0.8,
                CASE WHEN random() < 0.02 THEN 60 ELSE 0 END,
                CASE WHEN random() < 0.001 THEN 1 ELSE 0 END,
                share * 60, LEAST(a * 1.3, %s * share * 1.1) * 60
            FROM {cycle_table} c
            CROSS JOIN generate_series(0, %s - 1) AS t
            CROSS JOIN LATERAL (SELECT (1.0 / (t + 1)) / %s AS share) s
            CROSS JOIN LATERAL (
                SELECT %s * 0.9 * s.share * (0.7 + 0.6 * random()) AS a
            ) alloc
            WHERE c.cluster_id = %s
            """,  # noqa: S608
            [first_tenant, GPUS, TENANTS, _harmonic(TENANTS), GPUS, cluster.pk],
        )
        cursor.execute(  # table names come from the models, values are parameters
            f"""
            INSERT INTO {pool_table} (
                cluster_id, cycle_id, as_of, interval_s, pool, gpu_s,
                {ACCOUNTED}, free_fragmented_gpu_s, free_demand_gpu_s,
                free_no_demand_gpu_s,
                entitlement_basis)
            SELECT c.cluster_id, c.id, c.as_of, 60, p.name, p.gpus * 60,
                p.gpus * 54, p.gpus * 70, p.gpus * 40, p.gpus * 60, p.gpus * 0.3, p.gpus * 0.5,
                p.gpus * 0.2, p.gpus * 2, p.gpus * 1, p.gpus * 50, p.gpus * 20, p.gpus * 45, 0, 0,
                p.gpus * 2, p.gpus * 1, p.gpus * 2.7,
                CASE WHEN p.name = '' THEN 'deserved' ELSE '' END
            FROM {cycle_table} c
            CROSS JOIN (VALUES ('', %s), ('a100', %s), ('h100', %s), ('l40s', %s), ('h200', %s))
                AS p(name, gpus)
            WHERE c.cluster_id = %s
            """,  # noqa: S608
            [GPUS, GPUS // 2, GPUS // 4, GPUS // 8, GPUS // 8, cluster.pk],
        )
        jobs = days * JOBS_PER_DAY
        cursor.execute(  # table names come from the models, values are parameters
            f"""
            INSERT INTO {Job._meta.db_table} (
                cluster_id, external_id, name, tenant_id, pool, kind, priority, state,
                submitted_at, started_at, ended_at, pods, gpus_per_pod, gang, min_member,
                preemptions)
            SELECT %s, 'job-' || i, '', %s + (i %% %s), 'a100', 'training', 0, 'completed',
                st - make_interval(secs => w), st, st + interval '2 hours', pods, gpp,
                pods > 1, pods, 0
            FROM generate_series(0, %s - 1) AS i
            CROSS JOIN LATERAL (
                SELECT %s::timestamptz + make_interval(secs => i * %s) AS st,
                       (random() * random() * 14400)::float AS w,
                       (ARRAY[1, 1, 1, 2, 4, 8, 16])[1 + floor(random() * 7)::int] AS pods,
                       (ARRAY[1, 8, 8])[1 + floor(random() * 3)::int] AS gpp
            ) x
            """,  # noqa: S608
            [cluster.pk, first_tenant, TENANTS, jobs, start, days * 86400 / jobs],
        )
    Finding.objects.bulk_create(
        [
            Finding(
                cluster=cluster,
                rule_id="starvation",
                subject=f"job:starving-{i}",
                fingerprint=Finding.fingerprint_of(cluster.pk, "starvation", f"job:starving-{i}"),
                first_seen=start + timedelta(hours=i),
                last_seen=start + timedelta(hours=i + 5),
                last_hit_at=start + timedelta(hours=i + 5),
                tenant=tenants[i % TENANTS],
            )
            for i in range(days * 24 - 5)
        ]
    )
    rebuild_all_hours(cluster.pk)  # the hourly rollups each cycle adds to (issue #17)
    with connection.cursor() as cursor:
        cursor.execute(
            f"ANALYZE {tenant_table}; ANALYZE {pool_table}; ANALYZE {Job._meta.db_table}"
        )
    admin = User.objects.create_user("bench-admin", is_superuser=True, is_staff=True)
    manager = User.objects.create_user("bench-manager", email="m@example.org")
    manager.groups.add(Group.objects.get(name="manager"))
    for tenant in tenants[:2]:
        tenant.managers.add(manager)
    return cluster, (admin, manager)


def _harmonic(n: int) -> float:
    return sum(1.0 / (k + 1) for k in range(n))


def timed(function, runs: int) -> tuple[float, object]:
    times, result = [], None
    for _ in range(runs):
        started = time.perf_counter()
        result = function()
        times.append(time.perf_counter() - started)
    return statistics.median(times), result


def measure_reports(cluster, users, days: int, runs: int) -> list[tuple[str, float, float | None]]:
    admin, manager = users
    results = []
    for label, delta in (("24 h", timedelta(hours=24)), ("7 d", timedelta(days=7))):
        if delta <= timedelta(days=days):
            period = ReportPeriod(END - delta, END)
            seconds, _ = timed(
                lambda p=period: json.dumps(build_fairness_report(admin, cluster, p).as_dict()),
                runs,
            )
            results.append((f"report JSON, {label}, every tenant", seconds, None))
    whole = ReportPeriod(END - timedelta(days=days), END)
    seconds, text = timed(
        lambda: json.dumps(build_fairness_report(admin, cluster, whole).as_dict()), runs
    )
    rows = len(json.loads(text)["tenants"])
    results.append((f"report JSON, {days} d, every tenant ({rows} rows)", seconds, JSON_BUDGET_S))
    client = Client()
    client.force_login(admin)
    query = f"from={whole.query()['from']}&to={whole.query()['to']}"
    seconds, response = timed(
        lambda: client.get(f"/api/v1/clusters/{cluster.name}/reports/fairness?{query}"), runs
    )
    assert response.status_code == 200, response.content[:500]
    results.append((f"report JSON through the API, {days} d", seconds, JSON_BUDGET_S))
    seconds, _ = timed(
        lambda: json.dumps(build_fairness_report(manager, cluster, whole).as_dict()), runs
    )
    results.append((f"report JSON, {days} d, a manager of 2 tenants", seconds, JSON_BUDGET_S))
    seconds, pdf = timed(lambda: render_pdf(build_fairness_report(admin, cluster, whole)), runs)
    results.append(
        (f"report PDF, {days} d, every tenant ({len(pdf) // 1024} KiB)", seconds, PDF_BUDGET_S)
    )
    seconds, response = timed(
        lambda: client.get(f"/clusters/{cluster.name}/fairness/?{query}"), runs
    )
    assert response.status_code == 200
    results.append((f"report page, {days} d, every tenant", seconds, None))
    return results


def measure_cycle_writes(runs: int) -> list[tuple[str, float, float | None]]:
    """``record_tenancy`` on a 16,384-GPU snapshot: the first cycle and later ones. The cycle's
    other steps run untimed before it (rules, accounting, findings), as in ``record_cycle``."""
    # lazy: bench/rules.py sets OMP_NUM_THREADS & co. in os.environ on import; the report timings
    # before this one run without them, as they always have
    import bench.rules as rules_bench  # noqa: PLC0415 -- it sets thread counts on import

    document = rules_bench.build_document(GPUS)
    cluster = Cluster.objects.create(name="bench-cycles", enabled=False)
    as_of = datetime.fromisoformat(document["as_of"].replace("Z", "+00:00"))
    seconds_of = []
    for step in range(1 + runs):
        document["as_of"] = (as_of + timedelta(minutes=step)).isoformat()
        for job in document["jobs"][step * 20 : step * 20 + 20]:  # a few jobs change
            job["preemptions"] = step
        snap = snapshot_format.load(document)
        diagnosis, accounting = diagnose(snap)
        record_findings(cluster, diagnosis)
        cycle = ClusterCycle.objects.create(cluster=cluster, as_of=snap.as_of.to_pydatetime())
        started = time.perf_counter()
        record_tenancy(cluster, snap, diagnosis, accounting, cycle)
        seconds_of.append(time.perf_counter() - started)
    jobs, findings = len(document["jobs"]), len(diagnosis.findings)
    return [
        (f"cycle's tenant side, 16,384 GPUs, first ({jobs:,} jobs new)", seconds_of[0], None),
        (
            f"cycle's tenant side, 16,384 GPUs, later (median of {runs}; {findings:,} findings)",
            statistics.median(seconds_of[1:]),
            None,
        ),
    ]


def measure_demo_writes(cycles: int = 30) -> list[tuple[str, float, float | None]]:
    """``record_tenancy`` on the 1,024-GPU demo cluster (the seed scenario)."""
    seconds_of: list[float] = []
    original = cycle_actions.record_tenancy

    def timed_tenancy(*args, **kwargs):
        started = time.perf_counter()
        result = original(*args, **kwargs)
        seconds_of.append(time.perf_counter() - started)
        return result

    cycle_actions.record_tenancy = timed_tenancy
    try:
        call_command("demo", cycles=cycles, stdout=open(os.devnull, "w"))  # noqa: SIM115
    finally:
        cycle_actions.record_tenancy = original
    return [
        (
            f"cycle's tenant side, 1,024-GPU demo (median of {cycles})",
            statistics.median(seconds_of),
            None,
        )
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--runs", type=int, default=3)
    options = parser.parse_args(argv)
    if not on_postgresql("bench/reports.py"):
        return 1
    with bench_database():
        started = time.perf_counter()
        cluster, users = fill(options.days)
        print(f"filled {options.days} days of rollups in {time.perf_counter() - started:.1f} s")
        results = measure_reports(cluster, users, options.days, options.runs)
        results += measure_demo_writes()
        results += measure_cycle_writes(options.runs)
    ok = True
    print(f"\n{'what':<66} {'seconds':>8}  budget")
    for label, seconds, budget in results:
        verdict = "" if budget is None else ("ok" if seconds <= budget else "OVER")
        ok &= budget is None or seconds <= budget
        limit = "" if budget is None else f"<= {budget:g} s {verdict}"
        print(f"{label:<66} {seconds:8.3f}  {limit}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
