"""A real scheduler adapter composed with the Prometheus source in the cycle: Volcano (the
loopback Kubernetes API server of tests/support/kube_server.py) for nodes, jobs and events, a real
Prometheus for every GPU's metrics."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from diagnosis.actions.records.cycles import run_cluster_cycle
from diagnosis.models import Cluster, SchedulerEvent
from tests.support.kube_server import adapter_config as kube_config
from tests.support.kube_server import kube_api_fixture, load_fixture
from tests.support.prometheus_fixtures import STEP, History, start_prometheus

pytestmark = [pytest.mark.prometheus, pytest.mark.kubernetes, pytest.mark.django_db]


kube_api = kube_api_fixture("nodes", "volcano")


@pytest.fixture
def node_prometheus(tmp_path: Path):
    """A Prometheus with the last hour of every GPU node of the Kubernetes fixture, up to now."""
    history = History(float(int(time.time()) // STEP * STEP))
    for node in load_fixture("nodes"):
        gpus = int(node["status"].get("capacity", {}).get("nvidia.com/gpu", 0))
        for index in range(gpus):
            history.gpu("k8s", node["metadata"]["name"], index, util=0.1 * (index + 1))
    history.write(tmp_path / "history.om")
    server = start_prometheus(tmp_path / "prometheus", history=tmp_path / "history.om")
    yield server
    server.stop()


def test_a_volcano_cluster_takes_its_gpu_metrics_from_prometheus(
    kube_api, node_prometheus, make_cluster
):
    cluster = make_cluster(
        "volcano-prom",
        scheduler_kind="volcano",
        scheduler_config=kube_config(),
        metrics_kind="prometheus",
        metrics_config={
            "url": node_prometheus.url,
            "matchers": {"cluster": "k8s"},
            "scrape_interval_s": STEP,
            "max_data_age_s": 600,  # the history ended when the test began
        },
    )

    cycle = run_cluster_cycle(cluster)

    assert cycle.ok, cycle.error
    assert (cycle.gpus, cycle.coverage) == (40, 1.0)
    assert cycle.source["scheduler"] == "volcano"
    assert cycle.source["util_sources"] == {"prof": 40}
    stored = cluster.snapshots.latest().load_document()
    util = {(g["node"], g["index"]): g["util"]["mean"] for g in stored["gpus"]}
    assert util[("gpu-h-2", 7)] == pytest.approx(0.8)
    assert SchedulerEvent.objects.filter(cluster=cluster).exists()
    assert Cluster.objects.get(pk=cluster.pk).event_cursor
