"""Load the pages with concurrent clients against a running server on PostgreSQL (issue #17).

    PYTHONPATH=. python bench/load.py                    # 1,024 and 16,384 GPUs, 60 s each
    PYTHONPATH=. python bench/load.py --seconds 20       # shorter runs
    PYTHONPATH=. python bench/load.py --sizes 16384 --clients 1,20   # one fill, two runs
    PYTHONPATH=. python bench/load.py --sizes 16384 --reports        # the report alone, 24 h-30 d
    PYTHONPATH=. python bench/load.py --sizes 16384 --keep ...       # keep the fill, reuse it later
    PYTHONPATH=. python bench/load.py --sizes 16384 --keep --cost    # CPU ms per page, in process
    PYTHONPATH=. python bench/load.py --sizes 16384 --keep --profile fairness[:cached]  # cProfile

For each size the bench makes its own database ``test_<name>`` (``DATABASE_URL``, default
``postgres://postgres@127.0.0.1:5432/postgres``) and fills it with bench/reports.py's 30 days of
minute cycles and rollups (50 tenants, four pools), its jobs and findings, plus the accounting of
the last hour's cycles (the overview's waterfall reads them; bench/rules.py's snapshot of that
size, diagnosed once; every cycle of that hour the same document, so their waterfall slices carry
no new finding references), the hourly rollups the fairness report reads (as each cycle writes
them) and open findings in proportion to the size (about 8,300 at 16,384 GPUs, as the issue
measured). It then starts gunicorn (``GPUOBS_WEB_WORKERS`` workers, default 3, as
docker-compose.yml does; ``runserver`` when gunicorn is not installed) on that database with
production settings (port ``BENCH_PORT``, default 8765) and, for each number in ``--clients``,
runs that many threads, each with its own logged-in session and keep-alive connection,
requesting in turn the overview, the findings list and the 24-hour fairness page for
``--seconds``. It prints p50/p95/p99 per page and the errors (any answer but
200). Budget (docs/architecture.md#performance-budget): p95 <= 150 ms with 20 clients. The client
threads share the machine with the server: on a small or busy machine the figures include their CPU
too.
"""

from __future__ import annotations

import argparse
import cProfile
import http.client
import os
import pstats
import secrets
import shutil
import socket
import statistics
import subprocess
import sys
import threading
import time
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gpuobs.settings")
os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres")
os.environ.pop("REDIS_URL", None)
# production settings in this process too (its in-process modes time what the server runs)
PRODUCTION = {
    "DJANGO_DEBUG": "0",
    "DJANGO_SECRET_KEY": secrets.token_urlsafe(48),  # the sessions made here are signed with it
    "DJANGO_ALLOWED_HOSTS": "127.0.0.1,localhost,testserver",
    "DJANGO_SECURE_SSL_REDIRECT": "0",
    "DJANGO_SECURE_COOKIES": "0",
    "DJANGO_SECURE_HSTS_SECONDS": "0",
    "DJANGO_LOG_LEVEL": "WARNING",
}
for key, value in PRODUCTION.items():
    os.environ.setdefault(key, value)

import reports  # noqa: E402 -- bench/reports.py: django.setup() and the 30-day fill
import rules  # noqa: E402 -- bench/rules.py: the synthetic snapshot of a size
from django.conf import settings  # noqa: E402
from django.contrib.auth import get_user_model  # noqa: E402
from django.core.cache import caches  # noqa: E402
from django.db import connection  # noqa: E402
from django.test import Client  # noqa: E402
from django.test.utils import (  # noqa: E402
    CaptureQueriesContext,
    setup_databases,
    setup_test_environment,
    teardown_databases,
)

from diagnosis.actions.records.rollups_hourly import record_accounting_slice  # noqa: E402
from diagnosis.actions.upkeep.retention import figure_fields  # noqa: E402
from diagnosis.core import snapshot as snapshot_format  # noqa: E402
from diagnosis.core.diagnose import diagnose  # noqa: E402
from diagnosis.models import Cluster, ClusterCycle, Finding, PoolRollup, TenantRollup  # noqa: E402
from diagnosis.reports.fairness_report import build_fairness_report  # noqa: E402
from diagnosis.reports.period import ReportPeriod  # noqa: E402

BUDGET_P95_MS = 150.0
DAYS = 30
OPEN_FINDINGS_PER_GPU = 8300 / 16384
PORT = int(os.environ.get("BENCH_PORT", "8765"))
COOKIE = settings.SESSION_COOKIE_NAME


def sessions_of(username: str, clients: int) -> list[str]:
    """A session cookie each for ``clients`` logins of ``username``."""
    user = get_user_model().objects.get(username=username)
    sessions = []
    for _ in range(clients):
        client = Client()
        client.force_login(user)
        sessions.append(client.cookies[COOKIE].value)
    return sessions


def fill(gpus: int, clients: int) -> tuple[str, list[str]]:
    """The database of one size; returns the cluster's name and the admin's session cookies.
    A database kept by an earlier ``--keep`` run (its cluster there already) is reused."""
    if Cluster.objects.filter(name="bench").exists():
        if ClusterCycle.objects.filter(cluster__name="bench").values("gpus").first() != {
            "gpus": gpus
        }:
            raise SystemExit("the kept database holds another size: drop it or run without --keep")
        return "bench", sessions_of("bench-admin", clients)
    reports.GPUS = gpus
    with connection.cursor() as cursor:  # columns newer than bench/reports.py's fill: 0
        for model in (PoolRollup, TenantRollup):
            for field in figure_fields(model):
                cursor.execute(
                    f"ALTER TABLE {model._meta.db_table} ALTER COLUMN {field} SET DEFAULT 0"
                )
    cluster, (admin, _manager) = reports.fill(DAYS)
    snap = snapshot_format.load(rules.build_document(gpus))
    _diagnosis, accounting = diagnose(snap)
    document = accounting.as_dict()
    last_hour = ClusterCycle.objects.filter(
        cluster=cluster, as_of__gt=reports.END - timedelta(hours=1)
    )
    last_hour.update(
        accounting=document,
        allocation_utilization=0.8,
        activity_utilization=0.6,
        allocated_gpus=int(0.8 * gpus),
    )
    ClusterCycle.objects.filter(cluster=cluster).exclude(pk__in=last_hour).update(
        allocation_utilization=0.78, activity_utilization=0.55
    )
    rules_ids = ("fragmentation", "gang-partial-hold", "idle-allocation", "low-mfu", "starvation")
    Finding.objects.bulk_create(
        (
            Finding(
                cluster=cluster,
                rule_id=rules_ids[i % len(rules_ids)],
                subject=f"job:open-{i}",
                fingerprint=Finding.fingerprint_of(
                    cluster.pk, rules_ids[i % len(rules_ids)], f"job:open-{i}"
                ),
                state="firing",
                severity="warning",
                first_seen=reports.END - timedelta(hours=2),
                last_seen=reports.END,
                last_hit_at=reports.END,
            )
            for i in range(round(OPEN_FINDINGS_PER_GPU * gpus))
        ),
        batch_size=2000,
    )
    # the overview's waterfall slices of the last hour, as each cycle writes them (bench/
    # reports.py's fill has summed its rollups per hour already)
    for cycle in last_hour.order_by("as_of"):
        record_accounting_slice(cycle)
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE")
    return cluster.name, sessions_of(admin.username, clients)


def collect_static() -> None:
    """Production serves hashed static files from STATIC_ROOT (collectstatic, as the image
    does); the pages name them through its manifest."""
    subprocess.run(
        [sys.executable, "manage.py", "collectstatic", "--noinput", "-v", "0"],
        cwd=ROOT,
        env=os.environ,
        check=True,
    )


def start_server(database: str) -> subprocess.Popen:
    env = {**os.environ, "DATABASE_URL": database}
    workers = os.environ.get("GPUOBS_WEB_WORKERS", "3")
    if shutil.which("gunicorn") or (Path(sys.executable).parent / "gunicorn").exists():
        gunicorn = shutil.which("gunicorn") or str(Path(sys.executable).parent / "gunicorn")
        command = [gunicorn, "gpuobs.wsgi:application", "--bind", f"127.0.0.1:{PORT}"]
        command += ["--workers", workers, "--log-level", "warning"]
    else:
        command = [sys.executable, "manage.py", "runserver", f"127.0.0.1:{PORT}", "--noreload"]
    server = subprocess.Popen(command, cwd=ROOT, env=env)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", PORT), timeout=1).close()
            return server
        except OSError:
            if server.poll() is not None:
                raise RuntimeError(f"the server exited with {server.returncode}") from None
            time.sleep(0.2)  # waiting for the server's port to open: nothing to wait on
    server.terminate()
    raise RuntimeError("the server did not open its port within 60 s")


def page_paths(name: str) -> dict[str, str]:
    """The pages the clients request, in turn."""
    end = reports.END
    day = f"from={(end - timedelta(days=1)):%Y-%m-%dT%H:%MZ}&to={end:%Y-%m-%dT%H:%MZ}"
    return {
        "overview": f"/clusters/{name}/",
        "findings": f"/clusters/{name}/findings/",
        "fairness 24 h": f"/clusters/{name}/fairness/?{day}",
    }


def run_clients(name: str, sessions: list[str], seconds: float) -> dict[str, list[float]]:
    pages = page_paths(name)
    warm = http.client.HTTPConnection("127.0.0.1", PORT, timeout=120)
    for _ in range(2 * int(os.environ.get("GPUOBS_WEB_WORKERS", "3"))):  # every worker warm
        for path in pages.values():
            warm.request("GET", path, headers={"Cookie": f"{COOKIE}={sessions[0]}"})
            warm.getresponse().read()
    warm.close()
    latencies: dict[str, list[float]] = {page: [] for page in pages}
    errors: dict[str, list[float]] = {page: [] for page in pages}
    stop = time.monotonic() + seconds
    lock = threading.Lock()

    def client(session: str, offset: int) -> None:
        connection = http.client.HTTPConnection("127.0.0.1", PORT, timeout=30)
        headers = {"Cookie": f"{COOKIE}={session}"}
        order = list(pages.items())
        turn = offset
        while time.monotonic() < stop:
            page, path = order[turn % len(order)]
            turn += 1
            started = time.perf_counter()
            try:
                connection.request("GET", path, headers=headers)
                response = connection.getresponse()
                response.read()
                ok = response.status == 200
            except (OSError, http.client.HTTPException):
                connection.close()
                connection = http.client.HTTPConnection("127.0.0.1", PORT, timeout=30)
                ok = False
            elapsed = (time.perf_counter() - started) * 1000
            with lock:
                (latencies if ok else errors)[page].append(elapsed)

    threads = [
        threading.Thread(target=client, args=(session, i)) for i, session in enumerate(sessions)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return {page: (latencies[page], errors[page]) for page in pages}


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    return (
        statistics.quantiles(values, n=100, method="inclusive")[q - 1]
        if len(values) > 1
        else values[0]
    )


def measure(
    gpus: int,
    seconds: float,
    clients: list[int],
    *,
    mode: str = "load",
    keep: bool = False,
    runs: int = 20,
) -> bool:
    """One database of ``gpus``, then a run of ``seconds`` for each number of ``clients`` (or,
    by ``mode``, the report timings or the in-process page costs). ``keep``: the database is
    kept for the next run, and a kept one reused."""
    collect_static()
    databases = setup_databases(verbosity=0, interactive=False, keepdb=keep)
    ok = True
    try:
        started = time.perf_counter()
        kept = Cluster.objects.filter(name="bench").exists()
        name, sessions = fill(gpus, max(clients))
        seconds_filling = time.perf_counter() - started
        filled = "kept from an earlier run" if kept else f"filled in {seconds_filling:.0f} s"
        if mode == "reports":
            time_reports(name)
            return True
        if mode == "cost":
            page_costs(name, runs)
            return True
        if mode.startswith("profile:"):
            profile_page(name, mode.removeprefix("profile:"), runs)
            return True
        database = settings.DATABASES["default"]
        url = f"postgres://{database['USER']}@{database['HOST']}:{database['PORT']}/{database['NAME']}"
        connection.close()
        server = start_server(url)
        try:
            for count in clients:
                print(
                    f"\n== {gpus:,} GPUs, {DAYS} days stored ({filled}), "
                    f"{count} clients, {seconds:g} s =="
                )
                ok = report(run_clients(name, sessions[:count], seconds)) and ok
        finally:
            server.terminate()
            server.wait(timeout=30)
    finally:
        if not keep:
            teardown_databases(databases, verbosity=0)
    return ok


def time_reports(name: str) -> None:
    """``build_fairness_report`` for the admin over 24 h, 7 and 30 days (median of 3)."""
    cluster = Cluster.objects.get(name=name)
    admin = get_user_model().objects.get(username="bench-admin")
    for label, days in (("24 h", 1), ("7 days", 7), ("30 days", 30)):
        period = ReportPeriod(start=reports.END - timedelta(days=days), end=reports.END)
        build_fairness_report(admin, cluster, period)  # warm
        wall, cpu = [], []
        for _ in range(3):
            started, used = time.perf_counter(), time.process_time()
            build_fairness_report(admin, cluster, period)
            wall.append(time.perf_counter() - started)
            cpu.append(time.process_time() - used)
        print(
            f"fairness report, {label}: wall {statistics.median(wall):.3f} s, "
            f"CPU {statistics.median(cpu):.3f} s"
        )


def _viewers() -> dict[str, Client]:
    clients = {}
    for username in ("bench-admin", "bench-manager"):
        client = Client()
        client.force_login(get_user_model().objects.get(username=username))
        clients[username.removeprefix("bench-")] = client
    return clients


def _cpu_ms(client: Client, path: str) -> tuple[float, int, int]:
    """CPU ms of one request, its queries and bytes."""
    with CaptureQueriesContext(connection) as captured:
        used = time.process_time()
        response = client.get(path)
        cpu = (time.process_time() - used) * 1000
    assert response.status_code == 200, (path, response.status_code)
    return cpu, len(captured.captured_queries), len(response.content)


def page_costs(name: str, runs: int) -> None:
    """Each page through Django's test client in this process (every middleware, a logged-in
    session), for the admin and for a manager: the median CPU ms of ``runs`` requests with the
    page cache cleared before each ("uncached": a new cycle's first request in a worker) and of
    ``runs`` more that find it filled ("cached"), with their queries. CPU is what the server
    spends on a request, PostgreSQL's own time aside."""
    print(f"{'page':<14} {'viewer':<8} {'uncached ms':>11} {'queries':>7}", end="")
    print(f" {'cached ms':>9} {'queries':>7} {'KiB':>5}")
    for viewer, client in _viewers().items():
        for page, path in page_paths(name).items():
            _cpu_ms(client, path)  # warm
            uncached = []
            for _ in range(runs):
                caches["pages"].clear()
                uncached.append(_cpu_ms(client, path))
            cached = [_cpu_ms(client, path) for _ in range(runs)]
            print(
                f"{page:<14} {viewer:<8} {statistics.median(c[0] for c in uncached):>11.1f}"
                f" {uncached[-1][1]:>7} {statistics.median(c[0] for c in cached):>9.1f}"
                f" {cached[-1][1]:>7} {cached[-1][2] / 1024:>5.0f}"
            )


def profile_page(name: str, page: str, runs: int) -> None:
    """cProfile of ``runs`` admin requests of one page (``overview``, ``findings``,
    ``fairness``; with ``:cached``, answered from the page cache, else with it cleared before
    each): the top functions by cumulative time, then by own time."""
    page, _, cached = page.partition(":")
    path = next(p for label, p in page_paths(name).items() if label.startswith(page))
    client = _viewers()["admin"]
    client.get(path)
    profiler = cProfile.Profile()
    for _ in range(runs):
        if not cached:
            caches["pages"].clear()
        profiler.enable()
        client.get(path)
        profiler.disable()
    pstats.Stats(profiler).sort_stats("cumulative").print_stats(40)
    pstats.Stats(profiler).sort_stats("tottime").print_stats(25)


def report(results: dict[str, tuple[list[float], list[float]]]) -> bool:
    """Print p50/p95/p99 per page; whether every page met the budget without errors."""
    ok = True
    print(f"{'page':<14} {'requests':>8} {'p50 ms':>8} {'p95 ms':>8} {'p99 ms':>8} {'errors':>7}")
    for page, (done, failed) in results.items():
        p95 = percentile(done, 95)
        ok = ok and p95 <= BUDGET_P95_MS and not failed
        print(
            f"{page:<14} {len(done):>8} {percentile(done, 50):>8.0f} {p95:>8.0f} "
            f"{percentile(done, 99):>8.0f} {len(failed):>7}"
        )
    return ok


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1024,16384", help="GPU counts, comma-separated")
    parser.add_argument("--seconds", type=float, default=60.0, help="per size")
    parser.add_argument(
        "--clients", default="20", help="concurrent clients, comma-separated: a run for each"
    )
    parser.add_argument(
        "--reports",
        action="store_true",
        help="no server: time build_fairness_report over 24 h, 7 and 30 days in process",
    )
    parser.add_argument(
        "--cost",
        action="store_true",
        help="no server: each page's CPU ms per request in process, admin and manager",
    )
    parser.add_argument(
        "--profile",
        metavar="PAGE",
        help="no server: cProfile of one page (overview, findings, fairness), cache cleared",
    )
    parser.add_argument("--runs", type=int, default=20, help="requests per page for --cost")
    parser.add_argument(
        "--keep",
        action="store_true",
        help="keep the filled database for the next run (and reuse one kept before)",
    )
    args = parser.parse_args(argv)
    mode = (
        "reports"
        if args.reports
        else "cost"
        if args.cost
        else f"profile:{args.profile}"
        if args.profile
        else "load"
    )
    ok = True
    setup_test_environment()
    for gpus in [int(s) for s in args.sizes.split(",")]:
        clients = [int(c) for c in args.clients.split(",")]
        ok = measure(gpus, args.seconds, clients, mode=mode, keep=args.keep, runs=args.runs) and ok
    if mode != "load":
        return 0
    print(f"\nbudget: p95 <= {BUDGET_P95_MS:g} ms on every page: {'met' if ok else 'NOT met'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
