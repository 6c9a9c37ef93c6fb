"""Kubernetes cycles as production runs them: beat's fan-out (``run_cycles``) sent to real
Celery workers, 2 workers of 2 prefork processes each on the ordinary queues and one
single-process worker per mirror queue (none when mirror queues are off). What the test of one
mirror per cluster (tests/app/records/test_kubernetes_mirror.py) and ``bench/kube_mirror.py``
share."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

from diagnosis.actions.upkeep.health import redis_client
from diagnosis.models import Cluster, ClusterCycle
from diagnosis.tasks import cycle_interval_key, cycle_lock_key, run_cycles
from gpuobs import celery_app
from gpuobs.celery import QUEUES, mirror_queues
from tests.support.celery_worker import celery_worker_process
from tests.support.processes import wait_until


@contextmanager
def cycle_workers(
    redis_url: str,
    tmp_path: Path,
    *,
    mirror_queue_count: int,
    workers: int = 2,
    processes: int = 2,
) -> Iterator[None]:
    """``workers`` prefork workers of ``processes`` each on every ordinary queue and a
    single-process worker on each of ``mirror_queue_count`` mirror queues, all answering a ping
    before the block runs; ``GPUOBS_MIRROR_QUEUES`` is ``mirror_queue_count`` in each."""
    env = {"GPUOBS_MIRROR_QUEUES": str(mirror_queue_count)}
    ordinary = ",".join(QUEUES)
    with ExitStack() as stack:
        for index in range(workers):
            stack.enter_context(
                celery_worker_process(
                    ordinary,
                    redis_url,
                    tmp_path,
                    env,
                    processes=processes,
                    name=f"worker-{index}",
                    quiet=True,
                )
            )
        for queue in mirror_queues(mirror_queue_count):
            stack.enter_context(
                celery_worker_process(
                    queue, redis_url, tmp_path, env, processes=1, name=queue, quiet=True
                )
            )
        started = workers + mirror_queue_count
        wait_until(
            lambda: len(celery_app.control.ping(timeout=1.0)) >= started,
            f"{started} workers answering a ping",
            timeout=120,
        )
        yield


def run_fanned_out_cycles(cluster: Cluster, count: int, redis_url: str) -> None:
    """``count`` of beat's fan-outs, one interval each (the interval's claim dropped before each,
    as the next interval would), each waited for until the cluster's cycle row is written and
    its lock released (else the next, in another process, would find it held)."""
    client = redis_client(redis_url)
    for number in range(1, count + 1):
        client.delete(cycle_interval_key(cluster))
        run_cycles.apply_async().get(timeout=60)
        wait_until(
            lambda n=number: (
                ClusterCycle.objects.filter(cluster=cluster).count() >= n
                and not client.exists(cycle_lock_key(cluster.pk))
            ),
            f"cycle {number} of {cluster.name} written and its lock released",
            timeout=120,
        )
