"""Time the issue-19 pages on a big cluster: the GPU heatmap and the job list above all.

    PYTHONPATH=. python bench/pages.py              # 16,384 GPUs, 20,000 jobs, 2 cycles
    PYTHONPATH=. python bench/pages.py --runs 20    # median and p95 of 20 requests per page

Not a timed test: it prints figures (docs/ui.md, "Nodes and GPUs" and "Jobs", quotes them).
Budget (issue 19): the heatmap and the job list under 150 ms server time at 16,384 GPUs /
20,000 jobs; (issue 35) every page's cold request at most 1 s and warm p95 at most 150 ms, and
one render per page and cycle across processes: 2 forked web processes request the heatmap and
the queue pages at once with the shared page cache emptied (as after a new cycle; Redis when
``REDIS_URL`` is set), and each counts what it rendered (``page_cache.renders``). The cluster:
the snapshot of
bench/rules.py recorded as real cycles
(``record_cycle``, as bench/metrics.py does), then each page requested through Django's test
client (every middleware, a logged-in viewer's session). The first request after a cycle reads
the new snapshot from the database ("cold"); later ones find what they need in the process's
cache of stored snapshots ("warm"); "2nd proc" is the first request of another process (its
caches empty, the shared page cache filled by the first); "after step" is the first request
after a cycle where the worker's step ran (``diagnosis.pages.prerender``, run here as the task
would: shared page cache emptied, the step, then this process's caches emptied), printed with
the step's own CPU. Needs PostgreSQL (``DATABASE_URL``); the bench makes ``test_<name>`` and
drops it.
"""

from __future__ import annotations

import argparse
import multiprocessing
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench._common import bench_database, on_postgresql, start_django

start_django()

from django.conf import settings  # noqa: E402
from django.contrib.auth.models import Group, User  # noqa: E402
from django.core.cache import caches  # noqa: E402
from django.db import connection, connections  # noqa: E402
from django.test import Client  # noqa: E402
from django.test.utils import CaptureQueriesContext  # noqa: E402

from bench._goals import goal  # noqa: E402
from bench.metrics import record_cycles  # noqa: E402
from diagnosis.pages import prerender  # noqa: E402
from diagnosis.pages.support import page_cache, snapshots  # noqa: E402

BUDGET_S = 0.150
COLD_BUDGET_S = 1.0  # the first request after a new snapshot in a process (issue #35)


def timed(client: Client, path: str) -> tuple[float, float, int, int, float]:
    """Wall seconds, this process's CPU seconds (what the server spent on the request, minus
    PostgreSQL's own time and minus waiting for a CPU on a busy machine), bytes, queries, and
    the wall seconds of those queries (PostgreSQL's part, round trips included)."""
    connection.queries_log.clear()
    with CaptureQueriesContext(connection) as queries:
        started, cpu = time.perf_counter(), time.process_time()
        response = client.get(path)
        seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
    assert response.status_code == 200, (path, response.status_code)
    db = sum(float(q["time"]) for q in queries.captured_queries)
    return seconds, cpu, len(response.content), len(queries.captured_queries), db


def p95_of(times: list[float]) -> float:
    """The 95th percentile of sorted ``times`` (the nearest rank)."""
    return times[min(len(times) - 1, round(0.95 * (len(times) - 1)))]


def cache_kind() -> str:
    backend = settings.CACHES[page_cache.CACHE]["BACKEND"]
    return "on Redis" if "redis" in backend.lower() else "in each process's memory"


def cold_start() -> None:
    """A web process's first request after a new cycle: nothing of the new snapshot kept in
    this process, nor in the shared page cache."""
    snapshots.forget_cached()
    caches[page_cache.CACHE].clear()


def after_the_step(cluster: Any) -> float:
    """A first request after a cycle whose pages the worker's step rendered: the step's CPU
    seconds (it ran here as the task would; then this process's caches are emptied)."""
    cold_start()
    latest = snapshots.latest_snapshot(cluster)
    cpu = time.process_time()
    done = prerender.prerender_pages(cluster.pk, latest.id)
    assert done["outcome"] == "rendered", done
    cpu = time.process_time() - cpu
    snapshots.forget_cached()
    step_parts.update(done["rendered"])
    return cpu


step_parts: dict[str, float] = {}  # the step's parts and their CPU seconds, the last run's


PROCESSES = 2


def _renders_in_child(client: Client, path: str, barrier: Any, answers: Any) -> None:
    snapshots.forget_cached()
    barrier.wait()
    before = page_cache.renders
    client.get(path)
    answers.put(page_cache.renders - before)


def renders_in_one_process(client: Client, path: str) -> int:
    """What one web process with empty caches renders for a first request of ``path`` (the
    floor: a page may compute several parts, the queue page its tree and its pending jobs)."""
    cold_start()
    before = page_cache.renders
    client.get(path)
    return page_cache.renders - before


def renders_across_processes(client: Client, path: str) -> int:
    """What ``PROCESSES`` forked web processes with empty caches render between them when each
    requests ``path`` at the same moment."""
    context = multiprocessing.get_context("fork")
    cold_start()
    connections.close_all()  # each child opens its own connections
    barrier, answers = context.Barrier(PROCESSES), context.Queue()
    children = [
        context.Process(target=_renders_in_child, args=(client, path, barrier, answers))
        for _ in range(PROCESSES)
    ]
    for child in children:
        child.start()
    renders = sum(answers.get(timeout=120) for _ in children)
    for child in children:
        child.join(30)
    return renders


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cycles", type=int, default=2)
    parser.add_argument("--runs", type=int, default=10)
    options = parser.parse_args(argv)
    if not on_postgresql("bench/pages.py"):
        return 1
    results = []
    with bench_database():
        cluster, document = record_cycles(options.cycles)
        user = User.objects.create_user("viewer")
        user.groups.add(Group.objects.get_or_create(name="viewer")[0])
        client = Client()
        client.force_login(user)
        node = document["nodes"][0]["name"]
        running = next(j for j in document["jobs"] if j["state"] == "running" and j["allocation"])
        pending = next(j for j in document["jobs"] if j["state"] == "pending" and j.get("queue"))
        base = f"/clusters/{cluster.name}"
        pages = [
            ("heatmap (util)", f"{base}/nodes/"),
            ("heatmap (health)", f"{base}/nodes/?color=health"),
            ("job list (pending or running)", f"{base}/jobs/"),
            ("job list, search 'team-a'", f"{base}/jobs/?q=team-a&state=all"),
            ("job list, page 200 of all", f"{base}/jobs/?state=all&page=200"),
            ("job list, all by longest wait", f"{base}/jobs/?state=all&sort=-wait"),
            ("job list, all by most GPUs", f"{base}/jobs/?state=all&sort=-gpus"),
            ("node table, unhealthy, most Xids", f"{base}/nodes/?health=unhealthy&sort=-xids"),
            ("queue list", f"{base}/queues/"),
            ("queue list by use", f"{base}/queues/?sort=-used"),
            ("node page", f"{base}/nodes/{node}/"),
            ("GPU page", f"{base}/nodes/{node}/gpus/0/"),
            ("queue page", f"{base}/queues/{pending['queue']}/"),
            ("job page (running)", f"{base}/jobs/{running['id']}/"),
            ("job page (pending)", f"{base}/jobs/{pending['id']}/"),
            (
                "overlay, 4 nodes' 32 GPUs",
                f"{base}/overlay/?gpu="
                + "+".join(f"{n['name']}/{i}" for n in document["nodes"][:4] for i in range(8)),
            ),
        ]
        client.get(f"{base}/jobs/")  # the process's first request loads the templates
        for label, path in pages:
            cold_start()
            cold = timed(client, path)
            snapshots.forget_cached()  # another process: the shared page cache has the page
            second = timed(client, path)
            warm = [timed(client, path) for _ in range(options.runs)]
            step_cpu = after_the_step(cluster)
            stepped = timed(client, path)
            results.append((label, cold, second, warm, stepped))
        once = [
            (label, renders_in_one_process(client, path), renders_across_processes(client, path))
            for label, path in pages
            if label in ("heatmap (util)", "queue list", "queue page")
        ]
    gpus, jobs = len(document["gpus"]), len(document["jobs"])
    print(f"\ncluster: {gpus:,} GPUs, {len(document['nodes']):,} nodes, {jobs:,} jobs")
    print(
        f"{'page':<32} {'cold s':>7} {'cold CPU':>8} {'2nd proc':>8} {'median s':>9}"
        f" {'p95 s':>7} {'CPU med s':>9} {'DB med s':>8} {'queries':>8} {'KiB':>7}"
        f" {'after step':>10} {'its CPU':>8}"
    )
    for label, cold, second, warm, stepped in results:
        times = sorted(w[0] for w in warm)
        p95 = p95_of(times)
        median = statistics.median(times)
        cpu = statistics.median(w[1] for w in warm)
        db = statistics.median(w[4] for w in warm)
        print(
            f"{label:<32} {cold[0]:>7.3f} {cold[1]:>8.3f} {second[0]:>8.3f} {median:>9.3f}"
            f" {p95:>7.3f} {cpu:>9.3f} {db:>8.3f} {warm[0][3]:>8} {warm[0][2] / 1024:>7.0f}"
            f" {stepped[0]:>10.3f} {stepped[1]:>8.3f}"
        )
    parts = ", ".join(f"{part} {cpu:.3f}" for part, cpu in step_parts.items())
    print(f"the worker's step after a cycle (prerender_pages): {step_cpu:.3f} s CPU ({parts})")
    sizes = f"{gpus:,} GPUs, {jobs:,} jobs"
    print()
    for label, cold, _second, warm, stepped in results:
        times = sorted(w[0] for w in warm)
        p95 = p95_of(times)
        goal(f"{label}: cold", cold[0], COLD_BUDGET_S, detail=f"{cold[1]:.3f} s CPU; {sizes}")
        goal(f"{label}: warm p95", p95, BUDGET_S, detail=f"{len(times)} requests; {sizes}")
        goal(
            f"{label}: first request after the worker's step",
            stepped[0],
            COLD_BUDGET_S,
            detail=f"{stepped[1]:.3f} s CPU (cold: {cold[1]:.3f}); {sizes}",
        )
    for label, alone, together in once:
        goal(
            f"{label}: renders per cycle across {PROCESSES} processes",
            together,
            alone,
            "renders",
            detail=f"against one process's; {PROCESSES} concurrent first requests, "
            f"page cache {cache_kind()}",
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
