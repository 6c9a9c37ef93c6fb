"""A cardinality bomb under a Prometheus-backed cluster (issue #29 item 3: "50 duplicate pod series
per GPU inflate utilisation to 100% with no warning"): a Prometheus of the test's own holds the
simulator's ``small`` scenario as dcgm-exporter shows it, plus 50 copies of every GPU's
utilisation series under made-up ``pod`` labels (a relabelling gone wrong, or an exporter
minting a series per scrape). The real cycle path then reads each GPU as before -- copies of one
reading, never summed -- and says the collection is degraded, naming why; the inventory's answer
stays bounded (``max_series_per_gpu`` + 1 series a GPU)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from diagnosis.actions.records.cycles import run_cluster_cycle
from diagnosis.choices import DataSourceStatus
from diagnosis.edge.sources.dcgm import fields as dcgm
from diagnosis.models import Snapshot
from tests.support.prometheus_fixtures import History, plant_simulator

pytestmark = [pytest.mark.prometheus, pytest.mark.django_db]

COPIES = 50
BOUND = 32  # the default max_series_per_gpu


@pytest.fixture
def bombed(make_prometheus, planted_history, tmp_path):
    """A Prometheus whose every simulated GPU has 50 extra pod-labelled copies of its
    ``DCGM_FI_PROF_GR_ENGINE_ACTIVE`` and ``DCGM_FI_DEV_GPU_UTIL`` series."""
    history = History(planted_history.t0)
    plant_simulator(history)
    for name in (dcgm.GR_ENGINE_ACTIVE, dcgm.GPU_UTIL):
        family = history.families[name]
        originals = list(family.series)
        for series in originals:
            for copy in range(COPIES):
                labels = {
                    **series.labels,
                    "container": "main",
                    "namespace": "serving",
                    "pod": f"infer-{series.labels['gpu']}-{copy:02d}",
                }
                family.series.append(replace(series, labels=labels))
    path = tmp_path / "bomb.om"
    history.write(path)
    return make_prometheus(history=path)


def utils(cluster) -> list[float]:
    document = Snapshot.objects.get(cluster=cluster).load_document()
    return [gpu["util"]["mean"] for gpu in document["gpus"]]


def test_duplicated_series_are_a_degraded_collection_read_as_copies(
    make_sim_cluster, prometheus, bombed
) -> None:
    clean = make_sim_cluster(prometheus.url, "bomb-clean")
    good = run_cluster_cycle(clean)
    cluster = make_sim_cluster(bombed.url, "bomb-hit")
    hit = run_cluster_cycle(cluster)
    unbounded = run_cluster_cycle(
        make_sim_cluster(bombed.url, "bomb-unbounded", max_series_per_gpu=10000)
    )
    assert good.ok, good.error
    assert hit.ok, hit.error
    assert unbounded.ok, unbounded.error
    inventory = hit.source["families"]["inventory"]
    print(
        f"fault matrix: {COPIES} copies per GPU on {hit.gpus} GPUs: activity "
        f"{hit.activity_utilization:.3f} (clean {good.activity_utilization:.3f}); collection "
        f"{hit.source['seconds']:.2f} s (clean {good.source['seconds']:.2f} s); inventory "
        f"{inventory['series']} series / {inventory['bytes']} B (unbounded "
        f"{unbounded.source['families']['inventory']['series']} series / "
        f"{unbounded.source['families']['inventory']['bytes']} B)"
    )

    assert utils(cluster) == utils(clean)  # copies of one reading: never summed
    assert hit.activity_utilization == pytest.approx(good.activity_utilization)
    cluster.refresh_from_db()
    assert cluster.status == DataSourceStatus.DEGRADED
    assert f"{hit.gpus} GPU(s) have more than {BOUND} series in one scrape" in (
        cluster.status_message
    )
    assert "cardinality bomb" in cluster.status_message
    assert hit.source["crowded_gpus"] == hit.gpus
    assert hit.source["crowded_series"] == hit.gpus * (COPIES + 1)
    assert inventory["series"] <= hit.gpus * (BOUND + 2) + 1  # bounded: not 51 a GPU
    assert unbounded.source["families"]["inventory"]["series"] > hit.gpus * COPIES
