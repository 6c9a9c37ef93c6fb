"""Time a manager's findings list, uncached: what the tenant scope of texts costs (issue #28).

    PYTHONPATH=. python bench/tenant_texts.py              # 10 tenants, 30,000 jobs, 300 findings
    PYTHONPATH=. python bench/tenant_texts.py --runs 20

Not a timed test: it prints figures (docs/architecture.md, "Roles and security", quotes them).
Budget: the findings list of a tenant-scoped manager at most 30 ms of this process's CPU with
the page cache empty. The cluster: 10 tenants with 3,000 jobs each (30 days of a busy cluster),
300 open findings of the manager's tenant naming its jobs and others'. Each request goes
through Django's test client (every middleware, a logged-in manager's session) after the page
cache is emptied. Needs PostgreSQL (``DATABASE_URL``); the bench makes ``test_<name>`` and
drops it.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench._common import bench_database, on_postgresql, start_django
from bench._goals import goal

start_django()

from django.contrib.auth.models import Group, User  # noqa: E402
from django.core.cache import caches  # noqa: E402
from django.test import Client  # noqa: E402

from diagnosis.models import Cluster, Finding, Job, Tenant  # noqa: E402
from diagnosis.pages.support import page_cache  # noqa: E402

BUDGET_S = 0.030
TENANTS, JOBS_PER_TENANT, FINDINGS = 10, 3000, 300
START = datetime(2026, 11, 1, tzinfo=UTC)


def plant() -> User:
    cluster = Cluster.objects.create(name="scope", metrics_kind="none")
    tenants = [Tenant.objects.create(cluster=cluster, name=f"team-{t}") for t in range(TENANTS)]
    Job.objects.bulk_create(
        Job(
            cluster=cluster,
            external_id=f"{tenant.name}-{n:05d}",
            name=f"train-{tenant.name}-{n}",
            tenant=tenant,
            submitted_at=START + timedelta(minutes=14 * n),
        )
        for tenant in tenants
        for n in range(JOBS_PER_TENANT)
    )
    mine = tenants[0]
    Finding.objects.bulk_create(
        Finding(
            cluster=cluster,
            rule_id="idle-allocation",
            subject=f"job:team-0-{n:05d}",
            fingerprint=f"bench-{n}",
            tenant=mine,
            summary=f"job team-0-{n:05d} holds 8 GPUs idle while team-3-{n:05d} waits",
            evidence={"jobs": [{"id": f"team-0-{n:05d}", "tenant": "team-0"}]},
            first_seen=START,
            last_seen=START + timedelta(days=29),
        )
        for n in range(FINDINGS)
    )
    manager = User.objects.create_user("manager")
    manager.groups.add(Group.objects.get_or_create(name="manager")[0])
    mine.managers.add(manager)
    return manager


def timed(client: Client, path: str) -> tuple[float, float]:
    caches[page_cache.CACHE].clear()
    started, cpu = time.perf_counter(), time.process_time()
    response = client.get(path)
    seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
    assert response.status_code == 200, (path, response.status_code)
    return seconds, cpu


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10)
    options = parser.parse_args(argv)
    if not on_postgresql("bench/tenant_texts.py"):
        return 1
    with bench_database():
        client = Client()
        client.force_login(plant())
        timed(client, "/clusters/scope/findings/")  # the first request loads templates
        runs = [timed(client, "/clusters/scope/findings/") for _ in range(options.runs)]
    wall = statistics.median(r[0] for r in runs)
    cpu = statistics.median(r[1] for r in runs)
    print(f"\n{TENANTS} tenants, {TENANTS * JOBS_PER_TENANT:,} jobs, {FINDINGS} findings")
    print(f"manager's findings list, uncached: median {wall * 1000:.1f} ms wall, ", end="")
    print(f"{cpu * 1000:.1f} ms CPU")
    goal(
        "a manager's findings list, uncached",
        cpu * 1000,
        BUDGET_S * 1000,
        "ms CPU",
        detail=f"median of {options.runs}; {wall * 1000:.1f} ms wall",
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
