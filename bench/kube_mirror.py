"""Count the Kubernetes API requests of a cluster's cycles with 2 Celery workers of 2 prefork
processes each: LISTs and WATCHes per resource per cluster start, with one mirror per process
(``GPUOBS_MIRROR_QUEUES=0``: the cycles on ``diagnose``, whichever process takes them) and with
the cluster's mirror queue (``GPUOBS_MIRROR_QUEUES=1``: the cycles on ``mirror-0``, one
single-process worker), side by side in one run.

    PYTHONPATH=. REDIS_URL=redis://127.0.0.1:6379/1 python bench/kube_mirror.py
    PYTHONPATH=. REDIS_URL=redis://127.0.0.1:6379/1 python bench/kube_mirror.py --cycles 12

The API server is the tests' loopback one (tests/support/kube_server.py) serving the Volcano
fixtures (tests/fixtures/kubernetes); the workers are real ``celery -A gpuobs worker`` processes
on Redis and a ``test_<name>`` PostgreSQL database the bench makes and drops (``DATABASE_URL``,
default ``postgres://postgres@127.0.0.1:5432/postgres``). Each design gets fresh workers and a
fresh cluster: one cluster start. Every cycle is beat's fan-out (``run_cycles``), one interval
each. Prints one JSON line per design, then the goal (issue #35): LISTs per resource per cluster
start <= 1. Without ``REDIS_URL`` or PostgreSQL it says so and exits 0.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench._common import bench_database, on_postgresql, start_django
from bench._goals import goal

start_django()

import pytest  # noqa: E402
from django.conf import settings  # noqa: E402

from diagnosis.models import Cluster, ClusterCycle  # noqa: E402
from tests.support.kube_mirror import cycle_workers, run_fanned_out_cycles  # noqa: E402
from tests.support.kube_server import adapter_config, load_fixture, serving  # noqa: E402

DESIGNS = {"per-process": 0, "mirror queue": 1}
WORKERS, PROCESSES = 2, 2


def count_requests(design: str, mirror_queue_count: int, cycles: int) -> dict[str, object]:
    """Run ``cycles`` fanned-out cycles of a fresh Volcano cluster on fresh workers; the
    LISTs and WATCHes the API server saw, per resource."""
    with tempfile.TemporaryDirectory(prefix="gpuobs-bench-kube-mirror-") as workdir:
        patch = pytest.MonkeyPatch()
        try:
            with serving(Path(workdir), patch) as server:
                server.load(load_fixture("nodes"))
                server.load(load_fixture("volcano"))
                cluster = Cluster.objects.create(
                    name=f"volcano-{mirror_queue_count}",
                    scheduler_kind="volcano",
                    scheduler_config=adapter_config(),
                    metrics_kind="none",
                )
                with cycle_workers(
                    settings.REDIS_URL,
                    Path(workdir),
                    mirror_queue_count=mirror_queue_count,
                    workers=WORKERS,
                    processes=PROCESSES,
                ):
                    run_fanned_out_cycles(cluster, cycles, settings.REDIS_URL)
                lists, watches = server.collection_reads()
        finally:
            patch.undo()
    good = ClusterCycle.objects.filter(cluster=cluster, ok=True).count()
    return {
        "design": design,
        "workers": WORKERS,
        "processes_per_worker": PROCESSES,
        "mirror_queues": mirror_queue_count,
        "cycles": cycles,
        "good_cycles": good,
        "lists_per_resource": dict(sorted(lists.items())),
        "watches_per_resource": dict(sorted(watches.items())),
        "max_lists_per_resource": max(lists.values(), default=0),
        "lists": sum(lists.values()),
        "watches": sum(watches.values()),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cycles", type=int, default=8)
    args = parser.parse_args()
    if not settings.REDIS_URL:
        print("bench/kube_mirror.py needs Redis for its workers: set REDIS_URL=redis://...")
        return 0
    if not on_postgresql("bench/kube_mirror.py"):
        return 0
    with bench_database():
        figures = {
            design: count_requests(design, count, args.cycles) for design, count in DESIGNS.items()
        }
    for figure in figures.values():
        print(json.dumps(figure))
    before, after = figures["per-process"], figures["mirror queue"]
    goal(
        f"LISTs per resource per cluster start, {WORKERS} workers x {PROCESSES} processes",
        after["max_lists_per_resource"],
        1,
        "LISTs",
        detail=(
            f"{args.cycles} cycles; per-process design: up to {before['max_lists_per_resource']}"
            f" per resource, {before['lists']} LISTs in all against {after['lists']}"
        ),
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
