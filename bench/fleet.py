"""Time the fleet's cross-cluster tenant report and the fleet table (docs/fairness.md "The
fleet") on a month of hourly rollups of ten clusters with the same fifty tenants each.

    PYTHONPATH=. python bench/fleet.py             # 10 clusters x 50 tenants x 30 days
    PYTHONPATH=. python bench/fleet.py --runs 5    # median of 5 timings

Needs PostgreSQL (``DATABASE_URL``, default ``postgres://postgres@127.0.0.1:5432/postgres``);
the bench makes its own ``test_<name>`` database and drops it at the end. The fill: one
``TenantRollupHour`` row per cluster, tenant and hour (360,000 rows), as the cycles write them
for every whole hour; a manager of two tenants on every cluster reads the same rows filtered to
hers. Prints one JSON line per timing: wall and CPU seconds of this process, median of the runs.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench._common import bench_database, on_postgresql, start_django

start_django()

from django.conf import settings  # noqa: E402
from django.contrib.auth.models import Group, User  # noqa: E402

from diagnosis.models import Cluster, Tenant, TenantRollupHour  # noqa: E402
from diagnosis.pages.fleet import build_fleet  # noqa: E402
from diagnosis.reports.fleet_report import build_fleet_tenant_report  # noqa: E402
from diagnosis.reports.period import ReportPeriod  # noqa: E402

CLUSTERS, TENANTS, DAYS = 10, 50, 30
END = datetime(2026, 11, 30, tzinfo=UTC)


def fill() -> tuple[User, User]:
    admin = User.objects.create_superuser("bench-admin", "a@example.org", "x")
    manager = User.objects.create_user("bench-manager", "m@example.org", "x")
    manager.groups.add(Group.objects.get_or_create(name="manager")[0])
    rows = []
    for i in range(CLUSTERS):
        cluster = Cluster.objects.create(name=f"bench-{i}", enabled=False)
        for t in range(TENANTS):
            tenant = Tenant.objects.create(cluster=cluster, name=f"tenant-{t:02d}")
            if t < 2:
                tenant.managers.add(manager)
            rows += [
                TenantRollupHour(
                    cluster=cluster,
                    as_of=END - timedelta(hours=h + 1),
                    interval_s=3600,
                    cycles=60,
                    tenant_name=tenant.name,
                    allocated_gpu_s=3600 * 8,
                    fair_gpu_s=3600 * 7,
                    demanded_gpu_s=3600 * 9,
                    idle_gpu_s=360,
                )
                for h in range(DAYS * 24)
            ]
    TenantRollupHour.objects.bulk_create(rows, batch_size=20_000)
    return admin, manager


def timed(runs: int, work) -> tuple[float, float]:
    walls, cpus = [], []
    for _ in range(runs):
        wall, cpu = time.perf_counter(), time.process_time()
        work()
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
    return statistics.median(walls), statistics.median(cpus)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    if not on_postgresql("bench/fleet.py"):
        return 0
    settings.GPUOBS_GPU_HOUR_PRICES = "*=2.50"
    with bench_database():
        admin, manager = fill()
        for days in (1, 7, 30):
            period = ReportPeriod(END - timedelta(days=days), END)
            for user in (admin, manager):
                wall, cpu = timed(
                    args.runs, lambda u=user, p=period: build_fleet_tenant_report(u, p)
                )
                print(
                    json.dumps(
                        {
                            "what": "fleet tenants",
                            "days": days,
                            "reader": user.username,
                            "wall_s": round(wall, 3),
                            "cpu_s": round(cpu, 3),
                        }
                    )
                )
        wall, cpu = timed(args.runs, lambda: build_fleet(admin))
        print(
            json.dumps(
                {
                    "what": "fleet table",
                    "clusters": CLUSTERS,
                    "wall_s": round(wall, 3),
                    "cpu_s": round(cpu, 3),
                }
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
