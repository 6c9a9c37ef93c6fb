"""One Kubernetes mirror per cluster, not per process: beat's fan-out sends a Kubernetes
cluster's cycles to its mirror queue, whose one worker process keeps the cluster's list/watch
mirror, so 2 workers of 2 prefork processes make one LIST per resource per cluster start."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from diagnosis.actions.upkeep.health import redis_client
from diagnosis.models import Cluster, ClusterCycle
from diagnosis.tasks import run_cycles
from gpuobs import celery_app
from tests.support.kube_mirror import cycle_workers, run_fanned_out_cycles
from tests.support.kube_server import (
    KubeApiServer,
    adapter_config,
    kube_api_fixture,
)

pytestmark = [pytest.mark.kubernetes, pytest.mark.django_db(transaction=True)]

CYCLES = 5


kube_api = kube_api_fixture("nodes", "volcano")


@pytest.fixture
def volcano_cluster(kube_api: KubeApiServer, make_cluster) -> Cluster:
    return make_cluster(
        "volcano-mirror",
        scheduler_kind="volcano",
        scheduler_config=adapter_config(),
        metrics_kind="none",
    )


@pytest.mark.celery_worker
def test_two_workers_of_two_processes_list_each_resource_once_per_cluster_start(
    kube_api: KubeApiServer, volcano_cluster: Cluster, redis_url: str, tmp_path: Path
) -> None:
    with cycle_workers(redis_url, tmp_path, mirror_queue_count=1):
        run_fanned_out_cycles(volcano_cluster, CYCLES, redis_url)

    lists, watches = kube_api.collection_reads()
    assert ClusterCycle.objects.filter(cluster=volcano_cluster, ok=True).count() == CYCLES
    assert {"/api/v1/nodes", "/api/v1/pods", "/api/v1/events"} <= lists.keys()
    assert dict(lists) == dict.fromkeys(lists, 1)
    assert watches["/api/v1/pods"] >= CYCLES - 1  # later cycles watch from the kept version


def test_the_fan_out_sends_a_kubernetes_cycle_to_its_mirror_queue(
    volcano_cluster: Cluster, make_cluster, redis_url: str
) -> None:
    sim = make_cluster("sim-mirror", scheduler_kind="sim", metrics_kind="sim")
    celery_app.control.purge()
    broker = redis_client(redis_url)
    broker.delete("mirror-0")

    run_cycles()

    assert queued_cycles(broker, "mirror-0") == [f"({volcano_cluster.pk},)"]
    assert queued_cycles(broker, "diagnose") == [f"({sim.pk},)"]
    celery_app.control.purge()
    broker.delete("mirror-0")


def queued_cycles(broker, queue: str) -> list[str]:
    """The arguments of the ``run_cycle`` messages waiting in a queue (Redis transport)."""
    headers = [json.loads(message)["headers"] for message in broker.lrange(queue, 0, -1)]
    return [h["argsrepr"] for h in headers if h["task"] == "diagnosis.tasks.run_cycle"]
