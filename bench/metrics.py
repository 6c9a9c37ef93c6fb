"""Measure ``GET /metrics`` on a big cluster: series count, exposition size, queries and latency.

    PYTHONPATH=. python bench/metrics.py                    # 16,384 GPUs, 20,000 jobs
    PYTHONPATH=. python bench/metrics.py --history-days 30  # with a month of rollups behind it
    PYTHONPATH=. python bench/metrics.py --runs 20          # median of 20 scrapes

Not a timed test: it prints figures (docs/integrations.md, "/metrics", quotes them). The cluster:
the 16,384-GPU snapshot with 20,000 jobs of bench/rules.py, recorded as ``--cycles`` real
cycles (``record_cycle``: rules, findings, accounting, rollups; the recommend step skipped,
its simulator replays take minutes at this size) ten minutes apart, then
``--history-days`` of minute rollups of five pools and the cluster inserted behind them (the
all-time GPU-seconds counter reads those). Then ``--runs`` scrapes of the view (authentication,
permission, exposition; no middleware) with a viewer's bearer token, as Prometheus sends it.
Needs PostgreSQL (``DATABASE_URL``, default ``postgres://postgres@127.0.0.1:5432/postgres``);
the bench makes ``test_<name>`` and drops it.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from datetime import datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench._common import bench_database, on_postgresql, start_django

start_django()

from django.contrib.auth.models import Group, User  # noqa: E402
from django.db import connection  # noqa: E402
from django.test import RequestFactory  # noqa: E402
from django.test.utils import CaptureQueriesContext  # noqa: E402
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402
from rest_framework.authtoken.models import Token  # noqa: E402

import bench.rules as rules_bench  # noqa: E402
from diagnosis.actions.records import cycles as cycle_actions  # noqa: E402
from diagnosis.api.metrics import MetricsView  # noqa: E402
from diagnosis.core import snapshot as snapshot_format  # noqa: E402
from diagnosis.models import Cluster, ClusterCycle, Finding, PoolRollup  # noqa: E402

GPUS = 16384


def record_cycles(count: int) -> tuple[Cluster, dict]:
    # the recommend step replays the window in the simulator for each proposal: minutes at this
    # size, and /metrics reads only the rows it leaves; the bench skips it
    cycle_actions.record_recommendation_step = lambda *args, **kwargs: None
    document = rules_bench.build_document(GPUS)
    cluster = Cluster.objects.create(name="bench-metrics", enabled=False)
    as_of = datetime.fromisoformat(document["as_of"].replace("Z", "+00:00"))
    for step in range(count):
        document["as_of"] = (as_of + timedelta(minutes=10 * step)).isoformat()
        started = time.perf_counter()
        cycle = cycle_actions.record_cycle(cluster, snapshot_format.load(document))
        seconds = time.perf_counter() - started
        print(f"cycle {step + 1}/{count}: {seconds:.1f} s, ok={cycle.ok}", flush=True)
    return cluster, document


def add_history(cluster: Cluster, days: int) -> int:
    """``days`` of minute rollups (five pools and the cluster) before the recorded cycles."""
    if days <= 0:
        return 0
    first = ClusterCycle.objects.filter(cluster=cluster).order_by("as_of").first()
    columns = [
        f.column
        for f in PoolRollup._meta.concrete_fields
        if f.column == "gpu_s" or f.column.endswith("_gpu_s")
    ]
    values = ", ".join("1000.0" for _ in columns)
    with connection.cursor() as cursor:
        cursor.execute(
            f"""
            INSERT INTO {PoolRollup._meta.db_table}
                (cluster_id, cycle_id, as_of, interval_s, pool, entitlement_basis,
                 {", ".join(columns)}, starving_job_s, preemptions)
            SELECT %s, %s, %s::timestamptz - (t || ' minutes')::interval, 60, p, '',
                   {values}, 0, 0
            FROM generate_series(1, %s) AS t,
                 unnest(ARRAY['', 'a100', 'h100', 'l40s', 'p4', 'p5']) AS p
            """,  # noqa: S608 -- column names from the model, values are parameters
            [cluster.pk, first.pk, first.as_of, days * 1440],
        )
        return cursor.rowcount


def scrape(client: RequestFactory, token: str) -> tuple[float, bytes, int]:
    """One scrape through the view (authentication, permission, exposition), as a request."""
    view = MetricsView.as_view()
    connection.queries_log.clear()  # the cycles filled its 9,000 entries: count from empty
    with CaptureQueriesContext(connection) as queries:
        started = time.perf_counter()
        response = view(client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {token}"))
        seconds = time.perf_counter() - started
    assert response.status_code == 200, response.status_code
    return seconds, response.content, len(queries.captured_queries)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cycles", type=int, default=3)
    parser.add_argument("--history-days", type=int, default=30)
    parser.add_argument("--runs", type=int, default=10)
    options = parser.parse_args(argv)
    if not on_postgresql("bench/metrics.py"):
        return 1
    with bench_database():
        cluster, document = record_cycles(options.cycles)
        history = add_history(cluster, options.history_days)
        user = User.objects.create_user("prometheus")
        user.groups.add(Group.objects.get_or_create(name="viewer")[0])
        token = Token.objects.create(user=user).key
        client = RequestFactory()
        scrape(client, token)  # warm: connections, caches
        timings = []
        for _ in range(options.runs):
            seconds, body, queries = scrape(client, token)
            timings.append(seconds)
        families = list(text_string_to_metric_families(body.decode()))
        by_family = {f.name: len(f.samples) for f in families}
        series = sum(by_family.values())
        firing = Finding.objects.filter(cluster=cluster, state="firing").count()
        open_findings = Finding.objects.filter(cluster=cluster).exclude(state="resolved").count()
        rollups = PoolRollup.objects.filter(cluster=cluster).count()
    jobs = len(document["jobs"])
    print(f"\ncluster: {GPUS:,} GPUs, {jobs:,} jobs, {options.cycles} cycles recorded")
    print(f"findings: {open_findings:,} open, {firing:,} firing; {rollups:,} pool rollup rows")
    print(f"  ({history:,} of them history: {options.history_days} days of minute rollups)")
    print(f"\n{'family':<56} {'series':>7}")
    for name, count in sorted(by_family.items(), key=lambda item: -item[1]):
        print(f"{name:<56} {count:>7,}")
    print(f"{'all':<56} {series:>7,}")
    print(f"\nseries per GPU {series / GPUS:.4f}, per job {series / jobs:.4f}")
    print(f"exposition: {len(body):,} bytes ({len(body) / series:.0f} bytes a series)")
    print(f"queries per scrape: {queries}")
    print(
        f"/metrics latency over {options.runs} scrapes: median {statistics.median(timings):.3f} s,"
        f" max {max(timings):.3f} s"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
